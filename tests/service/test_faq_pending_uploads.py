"""What a tenant can park through FAQ upload grants is bounded (faq/uploads.py): at most MAX_PENDING_UPLOADS
grants at a time, across its knowledge bases, counted from one listing of the tenant's prefix. A grant counts
while its form can still upload or while its upload waits for an import: taking grants first and uploading
after, or using a form again after its import, parks no more. An import consumes its upload (a failed one
too, and a dry run that could not read it); the key stays the caller's tenant's and knowledge base's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pydantic import ValidationError

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.adapters.storage import LocalFileStore, S3FileStore
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError, BadRequest
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
from chalicelib.faq.importing import LEASE_SECONDS, start_import
from chalicelib.faq.uploads import upload_url
from chalicelib.ports import FileStore

from .faq_support import faq_kb_named
from .test_faq import drain, task_view

CSV = b"question,answers\nWhere is the harbour?,Down the estuary road.\n"
CAP = 20


def _grant(deps: Services, kb: KnowledgeBase, name: str = "faq.csv") -> dict[str, Any]:
    return upload_url(deps, kb.tenant_id, kb.id, FaqUploadUrlRequest(file_name=name))


def _inbox(deps: Services) -> MemoryFileStore:
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    return inbox


def _refused(deps: Services, kb: KnowledgeBase) -> AppError:
    with pytest.raises(AppError) as refused:
        _grant(deps, kb)
    assert refused.value.status == 429 and refused.value.code == "too_many_pending_uploads"
    assert "import" in refused.value.message and "7 days" in refused.value.message
    return refused.value


def _after_the_forms_expire(deps: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.faq.uploads import CLOCK_SKEW_SECONDS

    now = time.time() + deps.settings.presign_expires_seconds + CLOCK_SKEW_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: now)


def test_a_tenant_holds_at_most_the_cap_of_uploads_across_its_knowledge_bases(
    deps: Services, faq_kb: KnowledgeBase, tenant: Tenant
) -> None:
    other = faq_kb_named(deps, tenant, "faq two")
    inbox = _inbox(deps)
    for i in range(CAP):
        inbox.post_presigned(_grant(deps, faq_kb if i % 2 else other)["fields"], CSV)
    _refused(deps, faq_kb)
    _refused(deps, other)


def test_grants_taken_before_any_upload_count(deps: Services, faq_kb: KnowledgeBase) -> None:
    grants = [_grant(deps, faq_kb) for _ in range(CAP)]
    _refused(deps, faq_kb)
    inbox = _inbox(deps)
    for grant in grants:  # the forms taken all work: what can be parked is the cap's worth, no more
        inbox.post_presigned(grant["fields"], CSV)
    _refused(deps, faq_kb)


def test_another_tenants_uploads_do_not_count(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.operations.tenants import create_tenant_with_key

    for _ in range(CAP):
        _grant(deps, faq_kb)
    stranger, _ = create_tenant_with_key(deps, "stranger")
    _grant(deps, faq_kb_named(deps, stranger, "faq"))


def test_an_unused_form_frees_its_place_when_it_expires_and_its_marker_goes(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = _inbox(deps)
    uploaded = _grant(deps, faq_kb)
    inbox.post_presigned(uploaded["fields"], CSV)
    for _ in range(CAP - 1):
        _grant(deps, faq_kb)
    _refused(deps, faq_kb)
    _after_the_forms_expire(deps, monkeypatch)
    from chalicelib.faq.uploads import marker_key, uploads_prefix

    grant = _grant(deps, faq_kb)  # the unused forms expired: their places are free
    prefix = uploads_prefix(faq_kb.tenant_id)
    # what is left: the upload not imported (it holds its place), the new grant's marker
    assert inbox.keys(prefix) == sorted([uploaded["object_key"], marker_key(grant["object_key"])])


def test_an_upload_not_imported_holds_its_place_after_its_form_expires(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    inbox = _inbox(deps)
    for _ in range(CAP):
        inbox.post_presigned(_grant(deps, faq_kb)["fields"], CSV)
    _after_the_forms_expire(deps, monkeypatch)
    _refused(deps, faq_kb)


def test_an_imported_uploads_place_frees_when_its_form_can_no_longer_upload(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The import deletes the upload, but its form works until it expires: used again, it parks another
    file, so the grant keeps its place until then."""
    inbox = _inbox(deps)
    grants = [_grant(deps, faq_kb) for _ in range(CAP)]
    inbox.post_presigned(grants[0]["fields"], CSV)
    task = start_import(
        deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=grants[0]["object_key"])
    )
    drain(deps)
    assert task_view(deps, task.id)["status"] == "completed"
    assert not inbox.exists(inbox.url_for(grants[0]["object_key"]))  # consumed
    _refused(deps, faq_kb)
    inbox.post_presigned(grants[0]["fields"], CSV)  # the form again: the file is counted
    _after_the_forms_expire(deps, monkeypatch)
    for _ in range(CAP - 1):  # every form expired: only that file, not imported, holds a place
        _grant(deps, faq_kb)
    _refused(deps, faq_kb)


def _import(deps: Services, kb: KnowledgeBase, data: bytes, **request: Any) -> tuple[str, str]:
    grant = _grant(deps, kb)
    _inbox(deps).post_presigned(grant["fields"], data)
    task = start_import(
        deps, kb.tenant_id, kb.id, FaqImportRequest(object_key=grant["object_key"], **request)
    )
    drain(deps)
    return str(grant["object_key"]), task_view(deps, task.id)["status"]


def test_a_finished_import_and_a_failed_one_delete_their_upload(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    inbox = _inbox(deps)
    key, status = _import(deps, faq_kb, CSV)
    assert status == "completed" and not inbox.exists(inbox.url_for(key))
    key, status = _import(deps, faq_kb, b"question,answers\n,\n", mode="replace")  # no valid row: refused
    assert status == "failed" and not inbox.exists(inbox.url_for(key))
    key, status = _import(deps, faq_kb, b"\xff\xfe not a CSV \x00")
    assert status == "failed" and not inbox.exists(inbox.url_for(key))


def test_a_dry_run_keeps_its_upload_for_the_import_which_deletes_it(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    inbox = _inbox(deps)
    key, status = _import(deps, faq_kb, CSV, dry_run=True)
    assert status == "completed" and inbox.exists(inbox.url_for(key))
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    drain(deps)
    assert task_view(deps, task.id)["status"] == "completed" and not inbox.exists(inbox.url_for(key))


def test_a_dry_run_that_cannot_read_its_upload_deletes_it(deps: Services, faq_kb: KnowledgeBase) -> None:
    """No import can read it either: kept, it would hold one of the tenant's places for 7 days."""
    inbox = _inbox(deps)
    key, status = _import(deps, faq_kb, b"\xff\xfe not a CSV \x00", dry_run=True)
    assert status == "failed" and not inbox.exists(inbox.url_for(key))


def test_an_import_that_lost_its_lease_leaves_the_upload_to_the_import_that_took_it(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stalled past its lease, the user starts B on the same upload: A's failure must not delete the file B
    reads (B consumes it)."""
    grant = _grant(deps, faq_kb)
    _inbox(deps).post_presigned(grant["fields"], CSV)
    request = FaqImportRequest(object_key=grant["object_key"])
    stalled = start_import(deps, faq_kb.tenant_id, faq_kb.id, request)
    later = time.time() + LEASE_SECONDS + 1
    monkeypatch.setattr(time, "time", lambda: later)
    retried = start_import(deps, faq_kb.tenant_id, faq_kb.id, request)
    drain(deps)
    assert task_view(deps, stalled.id)["status"] == "failed"
    assert task_view(deps, retried.id)["status"] == "completed"
    assert not _inbox(deps).exists(_inbox(deps).url_for(grant["object_key"]))  # consumed by the retry


def test_the_uploads_of_a_deleted_knowledge_base_hold_no_place(
    deps: Services, faq_kb: KnowledgeBase, tenant: Tenant
) -> None:
    """Nothing can import them once their knowledge base is gone: the next grant deletes them."""
    from chalicelib.faq.uploads import MAX_PENDING_UPLOADS, uploads_prefix
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    for _ in range(MAX_PENDING_UPLOADS):
        _inbox(deps).post_presigned(_grant(deps, faq_kb)["fields"], CSV)
    delete_kb(deps, faq_kb.tenant_id, faq_kb.id)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    while queue.waiting("lifecycle"):
        queue.deliver("lifecycle", lifecycle.handle, deps)
    other = faq_kb_named(deps, tenant, "another")
    key = str(_grant(deps, other)["object_key"])
    assert _inbox(deps).keys(uploads_prefix(tenant.id)) == [key.rsplit(".", 1)[0] + ".grant"]


def test_the_key_is_under_the_callers_tenant_and_knowledge_base(
    deps: Services, faq_kb: KnowledgeBase, tenant: Tenant
) -> None:
    from chalicelib.faq.uploads import marker_key

    key = str(_grant(deps, faq_kb)["object_key"])
    assert key.startswith(f"faq-imports/{faq_kb.tenant_id}/uploads/{faq_kb.id}/") and key.endswith(".csv")
    assert FaqImportRequest(object_key=key).object_key == key
    other = faq_kb_named(deps, tenant, "faq two")
    with pytest.raises(BadRequest) as refused:  # another knowledge base's upload, the same tenant
        start_import(deps, other.tenant_id, other.id, FaqImportRequest(object_key=key))
    assert refused.value.code == "invalid_object_key"
    with pytest.raises(AppError):  # another tenant's: its knowledge base is not found for this caller
        start_import(deps, "another-tenant", faq_kb.id, FaqImportRequest(object_key=key))
    with pytest.raises(ValidationError):  # a grant's marker is never an import's source
        FaqImportRequest(object_key=marker_key(key))


def test_an_upload_of_a_grant_minted_before_the_per_tenant_prefix_is_still_imported(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    inbox = _inbox(deps)
    key = f"faq-imports/{faq_kb.tenant_id}/{faq_kb.id}/uploads/{'ab' * 16}.csv"
    inbox.save(key, CSV)
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    drain(deps)
    assert task_view(deps, task.id)["status"] == "completed" and not inbox.exists(inbox.url_for(key))


@pytest.fixture(params=["local", "s3", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
    elif request.param == "memory":
        yield MemoryFileStore("files")
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            yield S3FileStore(client, "files")


def test_list_keys_answers_the_keys_under_a_prefix_in_order_up_to_the_limit(store: FileStore) -> None:
    for key in ("t/uploads/b/2.csv", "t/uploads/a/1.csv", "t/uploads-not/x", "t/other/y", "u/uploads/z"):
        store.save(key, b"x")
    assert store.list_keys("t/uploads/", 10) == ["t/uploads/a/1.csv", "t/uploads/b/2.csv"]
    assert store.list_keys("t/uploads/", 1) == ["t/uploads/a/1.csv"]
    assert store.list_keys("nothing/", 10) == []
    for limit in (0, 1001):
        with pytest.raises(ValueError):
            store.list_keys("t/", limit)
    with pytest.raises(ValueError):
        store.list_keys("t/../", 10)
