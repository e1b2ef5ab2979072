"""A presigned upload URL stays valid for its hour after its document is created: a PUT replayed with it
(after the document's delete, or while it lives), or a key that does not match its intent, is deleted when
its ObjectCreated event comes, instead of parking up to 5 GB under `uploads/` that no quota counts until
the bucket's 7-day rule. Duplicated and reordered events never touch a live document's file (it is stored
under its own key, not the upload's)."""

from __future__ import annotations

import logging

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import UploadUrlRequest
from chalicelib.domain.storage_keys import upload_intent_key
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.operations.create import accept_uploaded_object, create_upload_url
from chalicelib.operations.knowledge_changes import delete_knowledge

from .conftest import TEXT, drain


def _granted(deps: Services, kb: KnowledgeBase) -> tuple[str, str, str]:
    granted = create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name="a.md"))
    return str(granted["upload_url"]), str(granted["key"]), str(granted["knowledge_id"])


def _accepted(deps: Services, inbox: MemoryFileStore, url: str, key: str) -> Knowledge:
    inbox.put_presigned(url, TEXT)
    knowledge = accept_uploaded_object(deps, key)
    assert knowledge is not None
    return knowledge


def test_a_put_replayed_after_the_documents_delete_is_deleted_not_parked(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, caplog: pytest.LogCaptureFixture
) -> None:
    deps.tenants.set_quotas(kb.tenant_id, len(TEXT), 1)  # room for one small file only
    url, key, knowledge_id = _granted(deps, kb)
    _accepted(deps, inbox, url, key)
    delete_knowledge(deps, kb.tenant_id, knowledge_id)
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(knowledge_id) is None
    object_url = inbox.put_presigned(url, b"x" * (60 * 1024 * 1024))  # the same URL, within its hour
    with caplog.at_level(logging.INFO):
        assert accept_uploaded_object(deps, key) is None  # its ObjectCreated event
    assert not inbox.exists(object_url)
    (deleted,) = [r for r in caplog.records if "the object is deleted" in r.getMessage()]
    assert deleted.levelno == logging.INFO and getattr(deleted, "key", None) == key
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None and tenant.storage_used == 0
    # a late copy of the same event finds nothing to do
    assert accept_uploaded_object(deps, key) is None
    assert deps.knowledge.get(knowledge_id) is None


def test_a_duplicate_event_never_deletes_the_live_documents_file(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second copy of the event read the row as missing before the first inserted it, then found the
    intent consumed by the first: the upload object goes (already gone), the document and its file stay."""
    url, key, knowledge_id = _granted(deps, kb)
    created = _accepted(deps, inbox, url, key)
    assert not inbox.exists(inbox.url_for(upload_intent_key(knowledge_id)))  # consumed by the first
    replayed = inbox.put_presigned(url, b"replayed while the document lives")
    real_get = deps.knowledge.get
    stale = [True]

    def read_before_the_insert(kid: str, *args: bool, **kwargs: bool) -> Knowledge | None:
        if kid == knowledge_id and stale:
            stale.pop()
            return None
        return real_get(kid, *args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "get", read_before_the_insert)
    assert accept_uploaded_object(deps, key) is None
    monkeypatch.undo()
    assert stale == []  # the event did read the row as missing
    assert not inbox.exists(replayed)
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.file_path == created.file_path
    assert deps.files.read(created.file_path) == TEXT
    # and an in-order duplicate (the row found): the same, as before
    inbox.put_presigned(url, b"again")
    assert accept_uploaded_object(deps, key) is None
    assert not inbox.exists(replayed)
    drain(deps)  # the document's stages read its file
    done = deps.knowledge.get(knowledge_id)
    assert done is not None and done.parse_status != ParseStatus.FAILED and not done.error_message
    assert deps.files.read(done.file_path) == TEXT


def test_an_object_whose_key_does_not_match_its_intent_is_deleted_and_the_upload_still_works(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    url, key, knowledge_id = _granted(deps, kb)
    prefix = deps.settings.upload_prefix
    stray_key = f"{prefix}other-tenant/other-kb/{knowledge_id}/a.md"
    stray = inbox.save(stray_key, b"not what the URL was signed for")
    assert accept_uploaded_object(deps, stray_key) is None
    assert not inbox.exists(stray)
    assert inbox.exists(inbox.url_for(upload_intent_key(knowledge_id)))  # the intent is not its to take
    created = _accepted(deps, inbox, url, key)
    assert created.id == knowledge_id and deps.files.read(created.file_path) == TEXT


def test_an_object_whose_event_comes_before_its_acceptance_is_still_accepted(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    """The intent is written before the URL is answered: an object's first event always finds it."""
    url, key, knowledge_id = _granted(deps, kb)
    inbox.put_presigned(url, TEXT)
    inbox.put_presigned(url, TEXT)  # the same PUT twice: two events, one document
    first = accept_uploaded_object(deps, key)
    assert first is not None and first.id == knowledge_id
    assert accept_uploaded_object(deps, key) is None
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and deps.files.read(row.file_path) == TEXT
