"""Auto-tag lists the knowledge base's live tags, asks the chat model (seconds), then adds the chosen ids. A tag
deleted while the model chose (DELETE .../tags/{id}: marked deleting, its task untags every related document,
then deletes the tag) was added to the document after its delete ended, which kept a tag id that no longer
exists (and its relation) for good: the chosen tags are read again after the write."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.enrich.auto_tag as auto_tag_module
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Tenant

from .test_auto_tag_once import deliver_enrichment, llm, planned  # noqa: F401
from .test_move_clone import run_lifecycle


@pytest.mark.usefixtures("llm", "workflow")
def test_a_tag_deleted_while_the_model_chose_is_taken_off_again(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.tags import delete_tag

    knowledge = planned(deps, tenant, "Lighthouses", False)
    [tag] = deps.tags.list_kb(knowledge.kb_id)
    real = auto_tag_module.choose

    def choose(*args: Any, **kwargs: Any) -> list[int]:
        chosen = real(*args, **kwargs)  # the model picks "Lighthouses"
        delete_tag(deps, tenant.id, knowledge.kb_id, tag.id)  # meanwhile the user deletes the tag
        run_lifecycle(deps)  # and its delete task runs to its end
        return chosen

    monkeypatch.setattr(auto_tag_module, "choose", choose)
    assert deliver_enrichment(deps) == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and deps.tags.get(knowledge.kb_id, tag.id) is None
    assert tag.id not in row.tag_ids, "the document holds a tag that was deleted"
    assert not deps.tags.tagged(knowledge.kb_id, tag.id, limit=10)
