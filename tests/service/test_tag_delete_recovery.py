"""A tag delete that fails after it marked the tag deleting (the in-memory adapters): the mark must not
block the tag's name for good. A retried delete completes; a mark left by a delete task that failed is
redriven by the next create or rename to the name once it is stale, and the name is free after that."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, UpdateTagRequest
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import KnowledgeBase, utcnow

from .test_move_clone import run_lifecycle


def test_a_delete_that_died_after_its_mark_is_completed_by_a_retry(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.tags import create_tag, delete_tag, list_tags

    old = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    real_put = deps.tasks.put

    def put(task: Any) -> None:
        raise RuntimeError("the task table did not answer")

    monkeypatch.setattr(deps.tasks, "put", put)
    with pytest.raises(RuntimeError):
        delete_tag(deps, kb.tenant_id, kb.id, old.id)  # marked, but no task
    monkeypatch.setattr(deps.tasks, "put", real_put)
    assert list_tags(deps, kb.tenant_id, kb.id) == []

    task = delete_tag(deps, kb.tenant_id, kb.id, old.id)  # the client's retry
    run_lifecycle(deps)
    assert deps.tasks.get(task.id).status.value == "completed"  # type: ignore[union-attr]
    assert deps.tags.get(kb.id, old.id) is None
    new = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="red"))
    assert [t.id for t in list_tags(deps, kb.tenant_id, kb.id)] == [new.id]


@pytest.mark.parametrize("by", ["create", "rename"])
def test_a_stale_mark_of_a_failed_delete_task_is_redriven_and_the_name_freed(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, by: str
) -> None:
    from chalicelib.operations import tags as tag_ops
    from chalicelib.operations.tags import create_tag, delete_tag, list_tags, update_tag

    old = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    other = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Blue"))
    delete_tag(deps, kb.tenant_id, kb.id, old.id)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("lifecycle")  # its task never ran to the end (killed, its message dead-lettered)
    assert deps.tags.get(kb.id, old.id) is not None  # still marked: the delete never finished

    def claim_name() -> Any:
        if by == "create":
            return create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="RED"))
        return update_tag(deps, kb.tenant_id, kb.id, other.id, UpdateTagRequest(name="RED"))

    with pytest.raises(Conflict) as fresh:  # a fresh mark: the delete may still be running
        claim_name()
    assert fresh.value.code == "tag_name_being_released"
    run_lifecycle(deps)
    assert deps.tags.get(kb.id, old.id) is not None  # nothing redriven it

    later = utcnow() + timedelta(days=1)  # the mark is long stale
    monkeypatch.setattr(tag_ops, "utcnow", lambda: later, raising=False)
    with pytest.raises(Conflict) as stale:  # the stale mark's delete is started again
        claim_name()
    assert stale.value.code == "tag_name_being_released"
    run_lifecycle(deps)
    assert deps.tags.get(kb.id, old.id) is None
    claimed = claim_name()
    assert claimed.name == "RED" and "RED" in [t.name for t in list_tags(deps, kb.tenant_id, kb.id)]
