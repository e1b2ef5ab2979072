"""An import that fails for good with rows not done settles the entries those rows were to replace after its
last progress save (replacing.stopped): one whose replacement a batch that died wrote is deleted, one whose
replacement was not written is kept. The task's progress and the knowledge base's last import count them
(before, `deleted` and `kept_for_failed_rows` said only what the last batch saved)."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .test_faq import entries_of
from .test_faq_replace_crash_points import WorkerDied, _deliver_once, _fail_once, _seed, _start_replace


def _fail_for_good(
    deps: Services, kb: KnowledgeBase, task_id: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The last try dies at once (the store does not answer): the import fails for good. Returns the task's
    progress and the last import's counts."""
    from chalicelib.faq import importing

    def lost(*args: Any) -> None:
        raise WorkerDied("the store")

    monkeypatch.setattr(importing, "_renew", lost)
    importing.run(deps, task_id, last_try=True)
    task = deps.tasks.get(task_id)
    last = deps.faq.get_last_import(kb.id)
    assert task is not None and task.status.value == "failed" and last is not None
    keys = ("deleted", "kept_for_failed_rows")
    return {"task": [task.progress.get(k) for k in keys], "last import": [last.get(k) for k in keys]}


def test_an_old_entry_deleted_when_the_import_stops_is_counted(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(deps, faq_kb)
    old_id = entries_of(deps, faq_kb)["Opening hours"].id
    _fail_once(deps, "delete_entries", lambda kb_id, ids: old_id in ids)  # the batch dies once it is written
    task_id = _start_replace(deps, faq_kb)
    _deliver_once(deps)

    counts = _fail_for_good(deps, faq_kb, task_id, monkeypatch)

    assert deps.faq.get_entry(faq_kb.id, old_id) is None  # "Pets", then the old "Opening hours"
    assert counts == {"task": [2, 0], "last import": [2, 0]}


def test_an_old_entry_kept_when_the_import_stops_is_counted(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(deps, faq_kb)
    old_id = entries_of(deps, faq_kb)["Opening hours"].id
    _fail_once(deps, "put_entries")  # the batch dies before its rows are written
    task_id = _start_replace(deps, faq_kb)
    _deliver_once(deps)

    counts = _fail_for_good(deps, faq_kb, task_id, monkeypatch)

    assert deps.faq.get_entry(faq_kb.id, old_id) is not None  # "Pets" went, the old "Opening hours" stays
    assert counts == {"task": [1, 1], "last import": [1, 1]}
