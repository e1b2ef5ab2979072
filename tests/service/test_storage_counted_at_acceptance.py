"""A document's stored bytes count from its acceptance, within the quota (one conditional add), recorded on
its row (`storage_size`): indexing adds nothing, the delete gives them back once, a create taken back (lost
dedupe race) gives them back at once."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import KnowledgeBase
from chalicelib.ports import ServiceUnreachable

from .conftest import MAIN_STAGES, drain, upload


def used(deps: Services, tenant_id: str) -> int:
    tenant = deps.tenants.get(tenant_id)
    assert tenant is not None
    return tenant.storage_used


def test_uploads_not_yet_indexed_count_on_the_quota(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    from .test_move_clone import run_lifecycle

    deps.tenants.set_quotas(kb.tenant_id, storage_quota=1000, document_quota=0)
    body = b"# Doc\n\n" + b"word " * 170
    first = upload(deps, kb, "doc0.md", body)
    assert used(deps, kb.tenant_id) == len(body)  # counted at acceptance
    codes = []
    for i in range(1, 6):
        with pytest.raises(AppError) as refused:
            upload(deps, kb, f"doc{i}.md", body + str(i).encode())
        codes.append(refused.value.code)
    assert codes == ["storage_quota_exceeded"] * 5
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=10_000, document_quota=0)  # room for its Markdown
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.get(first.id)
    assert row is not None and row.enable_status.value == "enabled"
    # indexing adds only what the parse stored (its Markdown), not the file a second time
    markdown = deps.files.backend(row.storage_backend).url_for(parsed_markdown_key(row.tenant_id, row.id, 1))
    assert row.storage_size == len(body) + deps.files.size(markdown) == used(deps, kb.tenant_id)
    delete_knowledge(deps, kb.tenant_id, first.id)
    run_lifecycle(deps)
    assert used(deps, kb.tenant_id) == 0


def test_an_outage_while_counting_the_bytes_undoes_the_create(deps: Services, kb: KnowledgeBase) -> None:
    deps.tenants.set_quotas(kb.tenant_id, 10_000_000, 100)
    before = deps.tenants.get(kb.tenant_id)
    assert before is not None
    saved: list[str] = []
    backend = deps.files.backend(kb.storage_backend)
    real_save = backend.save

    def save(*args: Any, **kwargs: Any) -> str:
        url = real_save(*args, **kwargs)
        saved.append(url)
        return url

    backend.save = save  # type: ignore[method-assign]

    def unreachable(*args: object, **kwargs: object) -> bool:
        raise ServiceUnreachable("DynamoDB did not answer")

    deps.tenants.add_usage_within = unreachable  # type: ignore[method-assign]
    with pytest.raises(ServiceUnreachable):
        upload(deps, kb)
    after = deps.tenants.get(kb.tenant_id)
    assert after is not None
    assert after.document_count == before.document_count, "the reserved place was not given back"
    for url in saved:
        with pytest.raises(FileNotFoundError):
            deps.files.read(url)
