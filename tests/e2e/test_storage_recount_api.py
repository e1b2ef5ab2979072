"""What is stored is what is counted, through the public path (Chalice test client, DynamoDB and S3 on moto):
a document cancelled after its parse keeps its Markdown (spec §1.23), which now counts on its tenant's
storage quota, and the operator's recount (POST /v1/admin/tenants/{id}/storage-recount) backfills a document
that counts its file alone."""

from __future__ import annotations

from typing import Any

from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_admin_api import Operator, operator  # noqa: F401  (the fixture)

DOC = b"# Tides\n\n" + b"\n\n".join(
    b"Spring tides come at full and new moon, paragraph %d." % i for i in range(40)
)


def _used(operator: Operator, tenant_id: str) -> int:  # noqa: F811
    tenants = operator.call("get", "/tenants").json_body["data"]
    return int(next(t for t in tenants if t["id"] == tenant_id)["storage_used"])


def _markdown_size(services: Services, knowledge_id: str) -> int:
    row = services.knowledge.get(knowledge_id)
    assert row is not None
    key = parsed_markdown_key(row.tenant_id, row.id, row.attempt)
    return services.files.size(services.files.backend(row.storage_backend).url_for(key))


def _recount(operator: Operator, tenant_id: str, query: str = "") -> Any:  # noqa: F811
    return operator.call("post", f"/tenants/{tenant_id}/storage-recount{query}")


def test_a_cancel_after_the_parse_counts_its_markdown_and_the_operator_recount_backfills(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
    services: Services,
) -> None:
    created = operator.call("post", "/tenants", {"name": "recount"})
    assert created.status_code == 201, created.json_body
    tenant_id = created.json_body["data"]["tenant"]["id"]
    api = Api(client, created.json_body["data"]["api_key"])
    kb = api.create_kb()

    cancelled = api.upload(kb["id"], "tides.md", DOC).json_body["data"]
    runtime.poller("DocreaderStage").poll_once(wait_time_seconds=0)  # parsed, not indexed
    assert _used(operator, tenant_id) == len(DOC)
    answer = api.post(f"/knowledge/{cancelled['id']}/cancel")
    assert answer.status_code == 200, answer.json_body
    runtime.drain(timeout=120)
    assert api.knowledge(cancelled["id"])["parse_status"] == "cancelled"
    kept = len(DOC) + _markdown_size(services, cancelled["id"])
    assert _used(operator, tenant_id) == kept

    indexed = api.upload(kb["id"], "tides2.md", DOC + b"\n\nmore").json_body["data"]
    runtime.drain(timeout=120)
    full = len(DOC) + len(b"\n\nmore") + _markdown_size(services, indexed["id"])
    assert _used(operator, tenant_id) == kept + full
    # indexed before its parse outputs counted: the row and the usage count its file alone
    assert services.knowledge.update_fields(indexed["id"], {}, storage_size=len(DOC) + 6) is not None
    assert _used(operator, tenant_id) == kept + len(DOC) + 6

    assert _recount(Operator(client, None), tenant_id).status_code == 401
    assert _recount(Operator(client, "wrong"), tenant_id).status_code == 403
    missing = _recount(operator, "no-such-tenant")
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "tenant_not_found"
    bad = _recount(operator, tenant_id, "?cursor=nope")
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_cursor"

    first = _recount(operator, tenant_id, "?limit=1")
    assert first.status_code == 200, first.json_body
    page = first.json_body["data"]
    assert page["documents"] == 1 and page["next_cursor"]
    second = _recount(operator, tenant_id, f"?limit=1&cursor={page['next_cursor']}").json_body["data"]
    pages = [page, second]
    while pages[-1]["next_cursor"]:
        pages.append(_recount(operator, tenant_id, f"?cursor={pages[-1]['next_cursor']}").json_body["data"])
    assert sum(p["documents"] for p in pages) == 2 and sum(p["corrected"] for p in pages) == 1
    assert pages[-1]["usage_after"] == kept + full == _used(operator, tenant_id)
    again = _recount(operator, tenant_id).json_body["data"]
    assert (again["documents"], again["corrected"], again["usage_after"]) == (2, 0, kept + full)
