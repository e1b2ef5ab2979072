"""An FAQ import's upload is bound to the import's file limit (rows.MAX_FILE_BYTES): the upload URL is a
presigned form (POST) whose policy storage enforces, not a presigned PUT (up to 5 GB, outside the tenant's
quota, until the bucket's rule expires it). Where a store takes a bigger object anyway (moto does not check
the policy), the start refuses it and the worker fails the import with `import_file_too_large`, without
reading it, and both delete it."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
from chalicelib.faq.rows import MAX_FILE_BYTES

from .test_faq import drain, task_view

BIG = b"question,answers\n" + b"q,a\n" * (MAX_FILE_BYTES // 4)  # a valid CSV, just over the limit
SMALL = b"question,answers\nq,a\n"


def _grant(deps: Services, kb: KnowledgeBase) -> tuple[dict[str, object], MemoryFileStore]:
    from chalicelib.faq.uploads import upload_url

    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    return upload_url(deps, kb.tenant_id, kb.id, FaqUploadUrlRequest(file_name="faq.csv")), inbox


def test_the_upload_url_is_a_form_storage_holds_to_the_import_file_limit(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.adapters.memory.files import UploadRefused

    grant, inbox = _grant(deps, faq_kb)
    assert grant["method"] == "POST" and grant["max_size"] == MAX_FILE_BYTES and "upload_url" not in grant
    assert grant["expires_in"] == deps.settings.presign_expires_seconds
    fields = grant["fields"]
    assert isinstance(fields, dict) and fields["key"] == grant["object_key"] and grant["url"]
    key = str(grant["object_key"])
    with pytest.raises(UploadRefused, match="EntityTooLarge"):
        inbox.post_presigned(fields, BIG)
    assert not inbox.exists(inbox.url_for(key))
    with pytest.raises(UploadRefused):  # the form names its one key
        inbox.post_presigned({**fields, "key": key.replace("uploads/", "uploads/x")}, SMALL)
    assert inbox.read(inbox.post_presigned(fields, SMALL)) == SMALL


def test_an_object_over_the_limit_is_deleted_when_the_import_starts(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.domain.errors import PayloadTooLarge
    from chalicelib.faq.importing import start_import

    grant, inbox = _grant(deps, faq_kb)
    key = str(grant["object_key"])
    url = inbox.save(key, BIG)  # a store that does not enforce the form's bound (moto)
    with pytest.raises(PayloadTooLarge) as refused:
        start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    assert refused.value.code == "import_file_too_large"
    assert not inbox.exists(url)  # never importable: it does not wait days for the bucket's rule


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_object_replaced_by_a_bigger_one_fails_the_import_unread_and_is_deleted(
    deps: Services, faq_kb: KnowledgeBase, dry_run: bool
) -> None:
    from chalicelib.faq.importing import start_import

    grant, inbox = _grant(deps, faq_kb)
    key = str(grant["object_key"])
    url = inbox.save(key, SMALL)
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key, dry_run=dry_run))
    inbox.save(key, BIG)  # replaced after the start, where the store takes it
    reads: list[int | None] = []
    real_read = inbox.read

    def read(read_url: str, limit: int | None = None) -> bytes:
        if read_url == url:
            reads.append(limit)
        return real_read(read_url, limit)

    inbox.read = read  # type: ignore[method-assign]
    drain(deps)
    view = task_view(deps, task.id)
    progress = view["progress"]
    assert view["status"] == "failed" and progress["error_code"] == "import_file_too_large", progress
    assert "split it" in progress["error"]
    assert reads == [MAX_FILE_BYTES]  # refused by its length: its bytes were never read into memory
    assert not inbox.exists(url)  # even a dry run's upload (kept for the import that follows) goes
    assert deps.faq.get_lease(faq_kb.id) is None
