"""A presigned upload whose ObjectCreated worker died after inserting the row (a Lambda timeout in the
announcement's sends, say) is finished by the event's redelivery: announced under the same event id and
its first stage queued, instead of staying `pending` until housekeeping fails it. A redelivery after a
first run that finished does nothing again (the intent it consumed last tells the two apart)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import UploadUrlRequest
from chalicelib.domain.storage_keys import upload_intent_key
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.operations.create import accept_uploaded_object, create_upload_url
from chalicelib.operations.knowledge_changes import delete_kb
from chalicelib.services.ownership import missing_knowledge_error
from chalicelib.services.resources import ROLE_ORIGINAL
from chalicelib.stages import housekeeping

from .conftest import TEXT, drain


class WorkerDied(BaseException):
    """The Lambda stopped (timeout, out of memory): nothing after it runs, no handler catches it."""


def _landed(deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore) -> tuple[str, str]:
    granted = create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name="tides.md"))
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    return str(granted["knowledge_id"]), str(granted["key"])


def _die_once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, when: Callable[..., bool]) -> None:
    real = getattr(owner, name)
    died: list[int] = []

    def dying(*args: Any, **kwargs: Any) -> Any:
        if not died and when(*args, **kwargs):
            died.append(1)
            raise WorkerDied()
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, dying)


def _created_ids(deps: Services, knowledge_id: str) -> list[str]:
    return [
        e.event_id
        for e in deps.events.published  # type: ignore[attr-defined]
        if e.detail.get("knowledge_id") == knowledge_id and e.type.value == "Knowledge Created"
    ]


def _docreader_messages(deps: Services, knowledge_id: str) -> int:
    return sum(knowledge_id in m.body for m in deps.queue.waiting("docreader"))  # type: ignore[attr-defined]


#: where the first delivery dies, after the row is in: each a call the create makes after its insert
DEATHS = {
    "reading the knowledge base again": ("kbs", "get", lambda *a, **k: bool(k.get("consistent"))),
    "putting the event on the bus": ("events", "publish", lambda *a, **k: True),
    "registering the original": ("resources", "register", lambda *a, **k: True),
    "sending the docreader message": ("queue", "send", lambda *a, **k: True),
}


@pytest.mark.parametrize("death", sorted(DEATHS))
def test_the_redelivery_announces_and_queues_an_upload_whose_worker_died_after_the_insert(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, monkeypatch: pytest.MonkeyPatch, death: str
) -> None:
    knowledge_id, key = _landed(deps, kb, inbox)
    port, method, when = DEATHS[death]
    with monkeypatch.context() as patch:
        _die_once(patch, getattr(deps, port), method, when)
        with pytest.raises(WorkerDied):
            accept_uploaded_object(deps, key)  # the first delivery: the row is in, then the worker stops
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.parse_status == ParseStatus.PENDING
    assert _docreader_messages(deps, knowledge_id) == 0

    assert accept_uploaded_object(deps, key) is None  # SQS delivers the event again
    assert len(set(_created_ids(deps, knowledge_id))) == 1  # announced, under one id however often
    assert _docreader_messages(deps, knowledge_id) == 1
    assert [r.role for r in deps.resources.owned_by(knowledge_id)] == [ROLE_ORIGINAL]
    assert not inbox.exists(inbox.url_for(upload_intent_key(knowledge_id)))  # consumed at last

    drain(deps)
    housekeeping.sweep(deps, now=datetime.now(UTC) + timedelta(hours=3))
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.parse_status not in (ParseStatus.PENDING, ParseStatus.FAILED)
    assert accept_uploaded_object(deps, key) is None  # a late copy: nothing more
    assert len(set(_created_ids(deps, knowledge_id))) == 1
    assert _docreader_messages(deps, knowledge_id) == 0


def test_a_redelivery_after_a_first_run_that_finished_does_nothing_again(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    """The row is still pending (its docreader message waits in a busy queue): no second announcement,
    no second message."""
    knowledge_id, key = _landed(deps, kb, inbox)
    created = accept_uploaded_object(deps, key)
    assert created is not None and created.parse_status == ParseStatus.PENDING
    published = len(deps.events.published)  # type: ignore[attr-defined]

    assert accept_uploaded_object(deps, key) is None
    assert len(deps.events.published) == published  # type: ignore[attr-defined]
    assert _docreader_messages(deps, knowledge_id) == 1


def test_the_copy_losing_the_insert_to_a_copy_that_died_after_it_finishes_the_upload(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies of the event at once: the one whose insert came first dies after it; the other finds the
    row of its own id (AlreadyCreated) and finishes the upload instead of only consuming its intent."""
    knowledge_id, key = _landed(deps, kb, inbox)
    repo = deps.knowledge
    assert isinstance(repo, MemoryKnowledgeRepo)
    insert = repo.insert
    other: list[int] = []

    def other_copy_first(knowledge: Knowledge) -> None:
        if not other:
            other.append(1)
            with monkeypatch.context() as patch:
                _die_once(patch, deps.events, "publish", lambda *a, **k: True)
                with pytest.raises(WorkerDied):
                    accept_uploaded_object(deps, key)
        insert(knowledge)

    monkeypatch.setattr(repo, "insert", other_copy_first)
    assert accept_uploaded_object(deps, key) is None
    assert other == [1]
    assert len(set(_created_ids(deps, knowledge_id))) == 1
    assert _docreader_messages(deps, knowledge_id) == 1
    assert not inbox.exists(inbox.url_for(upload_intent_key(knowledge_id)))
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None and (tenant.document_count, tenant.storage_used) == (1, len(TEXT))


def test_a_redelivery_finding_the_knowledge_base_deleting_takes_the_row_back(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    files: MemoryFileStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The knowledge base's delete began after the row was inserted and before the redelivery: the row goes,
    as the first delivery's read of the knowledge base would have taken it, and GET /knowledge/{id} says why."""
    knowledge_id, key = _landed(deps, kb, inbox)
    with monkeypatch.context() as patch:
        _die_once(patch, deps.events, "publish", lambda *a, **k: True)
        with pytest.raises(WorkerDied):
            accept_uploaded_object(deps, key)
    delete_kb(deps, kb.tenant_id, kb.id)  # its task has not run yet: the knowledge base is `deleting`

    assert accept_uploaded_object(deps, key) is None
    assert deps.knowledge.get(knowledge_id) is None
    assert missing_knowledge_error(deps, kb.tenant_id, knowledge_id).code == "kb_deleting"
    assert _docreader_messages(deps, knowledge_id) == 0 and files.keys(f"{kb.tenant_id}/") == []
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None and (tenant.document_count, tenant.storage_used) == (0, 0)
