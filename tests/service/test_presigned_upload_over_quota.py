"""A document's presigned PUT is not size-bound, so its object may be bigger than the tenant's storage quota
left when the URL was granted: the ObjectCreated path refuses it (`storage_quota_exceeded`, recorded for
GET /knowledge/{id}) and deletes it at once (as it does one over the file size limit: test_create.py
test_an_oversized_presigned_upload_is_rejected_without_being_read)."""

from __future__ import annotations

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import UploadUrlRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.create import accept_uploaded_object, create_upload_url
from chalicelib.services.ownership import missing_knowledge_error

from .conftest import TEXT


def test_an_upload_over_the_storage_quota_left_is_refused_and_deleted(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    deps.tenants.set_quotas(kb.tenant_id, len(TEXT), 0)  # room for the file granted, not for more
    granted = create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name="a.md"))
    object_url = inbox.put_presigned(str(granted["upload_url"]), TEXT * 3)
    assert accept_uploaded_object(deps, str(granted["key"])) is None
    refusal = missing_knowledge_error(deps, kb.tenant_id, str(granted["knowledge_id"]))
    assert refusal.code == "storage_quota_exceeded"
    assert not inbox.exists(object_url) and deps.knowledge.get(str(granted["knowledge_id"])) is None
