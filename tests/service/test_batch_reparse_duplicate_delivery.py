"""A duplicate delivery of a batch reparse's message that reads the task just after the first one recorded
the attempts (`running`, ATTEMPTS present) walks the items from done 0 too. If it checks item 1 between the
first delivery's check and its reset, the reset must hold once: item 1 is reparsed once (attempt 2, not 3),
and neither delivery records an error for it. (Found by a review.)"""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import BatchReparseRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.knowledge_changes import batch_reparse
from chalicelib.stages import lifecycle

from .test_move_clone import TIDES, completed


def test_a_duplicate_delivery_between_the_check_and_the_reset_does_not_reparse_the_item_again(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = [completed(deps, kb, "tides.md", TIDES), completed(deps, kb, "waves.md", TIDES + b"\nWaves.\n")]
    task = batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    real_reset = deps.knowledge.reset_for_reparse
    second_ran = [False]

    def reset_for_reparse(knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        if knowledge_id == docs[0].id and not second_ran[0]:
            # delivery A checked item 1 (attempt 1 == recorded 1) and is about to reset it; the message's
            # duplicate B arrives now: it reads the task running, with attempts, and runs from done 0
            second_ran[0] = True
            stored = deps.tasks.get(task.id)
            assert stored is not None and lifecycle.ATTEMPTS in stored.params
            lifecycle.run(deps, task.id)
        return real_reset(knowledge_id, *args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "reset_for_reparse", reset_for_reparse)
    lifecycle.run(deps, task.id)  # delivery A
    row = deps.knowledge.get(docs[0].id)
    assert row is not None
    assert row.attempt == 2, f"item 1 reparsed {row.attempt - 1} times by one batch reparse"
    final = deps.tasks.get(task.id)
    assert final is not None and final.errors == {}
