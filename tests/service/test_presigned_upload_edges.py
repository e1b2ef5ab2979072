"""Presigned uploads at their edges: an object whose acceptance fails on every try of its S3 event (the
client is told, not left at `upload_pending` until the intent expires days later), and a file name whose
UTF-8 bytes would take the object key past S3's 1,024-byte limit (S3 refuses such a PUT)."""

from __future__ import annotations

import json

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import UploadUrlRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.create import accept_uploaded_object, create_upload_url
from chalicelib.ports.storage import StorageUnavailable
from chalicelib.services.ownership import missing_knowledge_error
from chalicelib.stages import uploads

from .conftest import TEXT

S3_MAX_KEY_BYTES = 1024


def notification(key: str) -> dict[str, object]:
    return {"Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": {"key": key}}}]}


def test_an_upload_whose_acceptance_fails_on_every_try_is_reported_not_left_pending(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    granted = create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name="notes.md"))
    knowledge_id, key = str(granted["knowledge_id"]), str(granted["key"])
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    store = deps.files.backend(kb.storage_backend)

    def unavailable(*_: object, **__: object) -> str:
        raise StorageUnavailable("the store did not answer")

    monkeypatch.setattr(store, "save", unavailable)
    queue.send_raw("uploads", notification(key))
    for _ in range(deps.settings.stage_max_receives):
        assert queue.deliver("uploads", uploads.handle, deps)["batchItemFailures"]
        if not queue.dead_letters("uploads"):
            assert missing_knowledge_error(deps, kb.tenant_id, knowledge_id).code == "upload_pending"
    assert len(queue.dead_letters("uploads")) == 1
    given_up = missing_knowledge_error(deps, kb.tenant_id, knowledge_id)
    assert given_up.code == "upload_failed" and "upload it again" in given_up.message
    assert missing_knowledge_error(deps, "another-tenant", knowledge_id).code == "knowledge_not_found"

    # the message redriven once the store is back: the document is created after all
    monkeypatch.undo()
    queue.send_raw("uploads", notification(key))
    assert queue.deliver("uploads", uploads.handle, deps)["batchItemFailures"] == []
    created = rows.get(knowledge_id)
    assert created is not None and created.file_name == "notes.md"


@pytest.mark.parametrize("char", ["😀", "文", "é"])
def test_a_long_unicode_file_name_keeps_the_upload_key_within_s3s_limit(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, rows: MemoryKnowledgeRepo, char: str
) -> None:
    file_name = char * 300 + ".md"
    granted = create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name=file_name))
    key = str(granted["key"])
    assert len(key.encode()) <= S3_MAX_KEY_BYTES
    assert key.endswith(".md")
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    assert uploads.object_keys(json.dumps(notification(key))) == [key]
    created = accept_uploaded_object(deps, key)
    assert created is not None and rows.get(created.id) is not None
    assert created.file_name.endswith(".md") and created.file_name.startswith(char)  # the row keeps the name
