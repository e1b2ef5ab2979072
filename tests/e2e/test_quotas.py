"""Issue 24, quotas: the operator's optional per-tenant storage and document quotas, enforced with a clear
4xx at the API and a `failed` row with the reason where the size is known only at indexing (a URL import)."""

from __future__ import annotations

from typing import Any

from chalice.test import Client

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_admin_api import Operator, operator  # noqa: F401  (the fixture)

DOC = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"


def _tenant(client: Client, operator: Operator, **quotas: int) -> tuple[str, Api]:  # noqa: F811
    created = operator.call("post", "/tenants", {"name": "quota", **quotas})
    assert created.status_code == 201, created.json_body
    data = created.json_body["data"]
    return data["tenant"]["id"], Api(client, data["api_key"])


def _view(operator: Operator, tenant_id: str) -> dict[str, Any]:  # noqa: F811
    tenants = operator.call("get", "/tenants").json_body["data"]
    return dict(next(t for t in tenants if t["id"] == tenant_id))


def test_a_document_quota_refuses_the_next_document_until_one_is_deleted(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
) -> None:
    tenant_id, api = _tenant(client, operator, document_quota=2)
    kb = api.create_kb()
    first = api.upload(kb["id"], "a.md", DOC).json_body["data"]
    assert api.upload(kb["id"], "b.md", DOC + b"b").status_code == 200
    refused = api.upload(kb["id"], "c.md", DOC + b"c")
    assert refused.status_code == 403 and refused.json_body["error"]["code"] == "document_quota_exceeded"
    manual = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# x\n\ny"})
    assert manual.status_code == 403 and manual.json_body["error"]["code"] == "document_quota_exceeded"
    assert _view(operator, tenant_id)["document_count"] == 2
    runtime.drain(timeout=120)
    deleted = api.client.http.delete(f"/api/v1/knowledge/{first['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code == 202
    runtime.drain(timeout=120)
    assert _view(operator, tenant_id)["document_count"] == 1
    assert api.upload(kb["id"], "c.md", DOC + b"c").status_code == 200
    raised = operator.call("put", f"/tenants/{tenant_id}/quotas", {"document_quota": 0, "storage_quota": 0})
    assert raised.status_code == 200 and raised.json_body["data"]["document_quota"] == 0
    assert api.upload(kb["id"], "d.md", DOC + b"d").status_code == 200


def test_a_storage_quota_refuses_a_file_that_does_not_fit(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
) -> None:
    tenant_id, api = _tenant(client, operator, storage_quota=len(DOC) * 2 + 10)
    kb = api.create_kb()
    assert api.upload(kb["id"], "a.md", DOC).status_code == 200
    runtime.drain(timeout=120)
    assert _view(operator, tenant_id)["storage_used"] == len(DOC)
    too_big = api.upload(kb["id"], "big.md", DOC * 3)
    assert too_big.status_code == 403 and too_big.json_body["error"]["code"] == "storage_quota_exceeded"
    presign = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "x.md", "file_size": 10**6}
    )
    assert presign.status_code == 403 and presign.json_body["error"]["code"] == "storage_quota_exceeded"
    fits = api.upload(kb["id"], "b.md", DOC + b"b").json_body["data"]
    # counted when accepted, before it is indexed: a third file finds the room taken
    assert _view(operator, tenant_id)["storage_used"] == 2 * len(DOC) + 1
    third = api.upload(kb["id"], "c.md", b"# c\n\n" + b"x" * 20)
    assert third.status_code == 403 and third.json_body["error"]["code"] == "storage_quota_exceeded"
    # the operator lowers the quota while it is queued: accepted and counted, it still completes
    operator.call("put", f"/tenants/{tenant_id}/quotas", {"storage_quota": len(DOC) + 5})
    runtime.drain(timeout=120)
    assert api.knowledge(fits["id"])["parse_status"] == "completed"
    assert _view(operator, tenant_id)["storage_used"] == 2 * len(DOC) + 1


def test_quotas_are_validated(client: Client, operator: Operator) -> None:  # noqa: F811
    bad = operator.call("post", "/tenants", {"name": "neg", "document_quota": -1})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_quota"
    missing = operator.call("put", "/tenants/no-such-tenant/quotas", {"document_quota": 1})
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "tenant_not_found"
