"""A presigned upload's URL that expired unused, and two copies of one upload's S3 event handled at once.

An unused URL answers `upload_expired` once its expiry (plus the allowance for a PUT begun just before it)
is past, instead of `upload_pending` until the bucket forgets the intent days later; a file that did land
is still accepted. Two copies of the event racing: the one that loses the insert to the row of its own id
finishes quietly, leaving the winner's object, tag relations and counts as they are."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, UploadUrlRequest
from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
from chalicelib.domain.types import KnowledgeBase, utcnow
from chalicelib.operations.create import accept_uploaded_object, create_upload_url
from chalicelib.services import ownership
from chalicelib.services.ownership import missing_knowledge_error

from .conftest import TEXT, upload


def grant(deps: Services, kb: KnowledgeBase, tag_ids: list[str] | None = None) -> dict[str, Any]:
    request = UploadUrlRequest(file_name="tides.md", tag_ids=tag_ids or [])
    return create_upload_url(deps, kb.tenant_id, kb.id, request)


def landed(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, tag_ids: list[str] | None = None
) -> tuple[str, str]:
    """A presigned upload whose file S3 took: its knowledge id and object key."""
    granted = grant(deps, kb, tag_ids)
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    return str(granted["knowledge_id"]), str(granted["key"])


def answer_at(deps: Services, kb: KnowledgeBase, knowledge_id: str, later: timedelta, mp: Any) -> str:
    moment = utcnow() + later
    mp.setattr(ownership, "utcnow", lambda: moment)
    return missing_knowledge_error(deps, kb.tenant_id, knowledge_id).code


# ---------------------------------------------------------------- an unused URL expires


def test_an_unused_upload_url_answers_upload_expired_after_its_expiry_and_allowance(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.services.ownership import UPLOAD_LATE_ALLOWANCE

    granted = grant(deps, kb)
    knowledge_id = str(granted["knowledge_id"])
    expiry = timedelta(seconds=int(granted["expires_in"]))
    assert answer_at(deps, kb, knowledge_id, timedelta(0), monkeypatch) == "upload_pending"
    # a PUT begun just before the expiry may still land
    assert answer_at(deps, kb, knowledge_id, expiry + timedelta(minutes=5), monkeypatch) == "upload_pending"
    late = expiry + UPLOAD_LATE_ALLOWANCE + timedelta(minutes=1)
    assert answer_at(deps, kb, knowledge_id, late, monkeypatch) == "upload_expired"
    error = missing_knowledge_error(deps, kb.tenant_id, knowledge_id)
    assert error.status == 404 and "new upload URL" in error.message
    # nothing about another tenant's upload is told
    assert missing_knowledge_error(deps, "another-tenant", knowledge_id).code == "knowledge_not_found"


def test_a_file_that_landed_before_the_expiry_is_pending_then_accepted_however_late(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    knowledge_id, key = landed(deps, kb, inbox)  # S3 took the PUT before the expiry
    days_later = timedelta(days=2)
    assert answer_at(deps, kb, knowledge_id, days_later, monkeypatch) == "upload_pending"  # its event is due
    accepted = accept_uploaded_object(deps, key)  # the expiry never drops an upload
    assert accepted is not None and rows.get(knowledge_id) is not None


def test_an_expired_grant_keeps_a_recorded_refusal_and_an_old_intent_stays_pending(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_after = timedelta(days=3)
    refused = str(grant(deps, kb)["knowledge_id"])
    inbox.save(
        upload_result_key(refused),
        json.dumps({"code": "file_too_large", "message": "too big", "data": None}).encode(),
        "application/json",
    )
    assert answer_at(deps, kb, refused, long_after, monkeypatch) == "file_too_large"

    old = str(grant(deps, kb)["knowledge_id"])  # an intent written before the expiry was recorded
    intent_url = inbox.url_for(upload_intent_key(old))
    intent = json.loads(inbox.read(intent_url))
    for recorded in ("created_at", "expires_at", "key"):
        intent.pop(recorded)
    inbox.save(upload_intent_key(old), json.dumps(intent).encode(), "application/json")
    assert answer_at(deps, kb, old, long_after, monkeypatch) == "upload_pending"


# ---------------------------------------------------------------- two copies of one event at once


def _other_copy_first(
    monkeypatch: pytest.MonkeyPatch, rows: MemoryKnowledgeRepo, method: str, key: str, deps: Services
) -> list[object]:
    """Just before this delivery's `method`, the other copy of the event is handled from start to end."""
    original = getattr(rows, method)
    winners: list[object] = []

    def other_copy_then(*args: Any, **kwargs: Any) -> Any:
        if not winners:
            winners.append(None)
            winners[0] = accept_uploaded_object(deps, key)
        return original(*args, **kwargs)

    monkeypatch.setattr(rows, method, other_copy_then)
    return winners


@pytest.mark.parametrize("lost_at", ["insert", "find_duplicate"])
def test_the_copy_of_an_event_that_loses_the_race_finishes_quietly(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    files: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    lost_at: str,
) -> None:
    from chalicelib.operations.tags import create_tag

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="ops"))
    knowledge_id, key = landed(deps, kb, inbox, [tag.id])
    winners = _other_copy_first(monkeypatch, rows, lost_at, key, deps)

    assert accept_uploaded_object(deps, key) is None  # no error: nothing for the queue to retry
    assert winners and winners[0] is not None
    row = rows.get(knowledge_id)
    assert row is not None and row.file_path and files.exists(row.file_path)  # the winner's object stays
    stored = files.keys(f"{kb.tenant_id}/{knowledge_id}/")
    assert [files.url_for(k) for k in stored] == [row.file_path]  # the loser's own copy does not
    assert deps.tags.tagged(kb.id, tag.id, limit=10) != []
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None and (tenant.document_count, tenant.storage_used) == (1, len(TEXT))
    assert len(queue.bodies("docreader")) == 1
    assert not inbox.exists(inbox.url_for(upload_result_key(knowledge_id)))  # no refusal recorded
    assert not inbox.exists(inbox.url_for(upload_intent_key(knowledge_id)))
    assert not inbox.exists(inbox.url_for(key))


def test_a_different_document_taking_the_content_meanwhile_is_still_a_duplicate(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    knowledge_id, key = landed(deps, kb, inbox)
    insert = rows.insert
    others: list[str] = []

    def multipart_upload_first(knowledge: Any) -> None:
        if not others:
            others.append("")  # before the upload: its own insert comes here too
            others[0] = upload(deps, kb, "tides copy.md", TEXT).id
        insert(knowledge)

    monkeypatch.setattr(rows, "insert", multipart_upload_first)
    assert accept_uploaded_object(deps, key) is None
    assert rows.get(knowledge_id) is None
    refusal = missing_knowledge_error(deps, kb.tenant_id, knowledge_id)
    assert refusal.code == "duplicate_file" and others[0] in refusal.message
