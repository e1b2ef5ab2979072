"""sec2 through the public path (DynamoDB on moto): a manual text's edit and a chunk's edit count what they
store on the tenant's storage quota; one that does not fit is 403 `storage_quota_exceeded` and changes
nothing."""

from __future__ import annotations

import json
from typing import Any

from chalice.test import Client

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_admin_api import Operator, operator  # noqa: F401  (the fixture)

DOC = "# Ferries\n\n" + "\n\n".join(
    f"Paragraph {i}: the ferry to island {i} leaves at dawn." for i in range(12)
)


def _put(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"/api/v1{path}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


def _used(operator: Operator, tenant_id: str) -> int:  # noqa: F811
    tenants = operator.call("get", "/tenants").json_body["data"]
    return int(next(t for t in tenants if t["id"] == tenant_id)["storage_used"])


def test_text_and_chunk_edits_count_on_the_storage_quota(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
) -> None:
    created = operator.call("post", "/tenants", {"name": "edits", "storage_quota": 100_000})
    assert created.status_code == 201, created.json_body
    tenant_id, api = (
        created.json_body["data"]["tenant"]["id"],
        Api(client, created.json_body["data"]["api_key"]),
    )
    kb = api.create_kb(chunking_config={"chunk_size": 120, "chunk_overlap": 0})

    body = {"title": "d", "content": "x", "status": "draft"}
    draft = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", body).json_body["data"]
    assert _used(operator, tenant_id) == 1
    too_big = _put(api, f"/knowledge/{draft['id']}", {"content": "\U0001f600" * 30_000})  # 120 KB
    assert too_big.status_code == 403 and too_big.json_body["error"]["code"] == "storage_quota_exceeded"
    assert _used(operator, tenant_id) == 1
    fits = _put(api, f"/knowledge/{draft['id']}", {"content": "y" * 500})
    assert fits.status_code == 200, fits.json_body
    assert _used(operator, tenant_id) == 500

    document = api.upload(kb["id"], "ferries.md", DOC.encode()).json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(document["id"])["parse_status"] == "completed"
    before = _used(operator, tenant_id)
    chunk = api.get(f"/knowledge/{document['id']}/chunks?limit=1").json_body["data"]["items"][0]
    path = f"/knowledge/{document['id']}/chunks/{chunk['id']}"
    refused = _put(api, path, {"content": "\u00e9" * 60_000})  # 120 KB: past the 100 KB quota
    assert refused.status_code == 403 and refused.json_body["error"]["code"] == "storage_quota_exceeded"
    assert api.get(path).json_body["data"]["content"] == chunk["content"]
    assert _used(operator, tenant_id) == before
    edited = _put(api, path, {"content": chunk["content"] + " And back."})
    assert edited.status_code == 200, edited.json_body
    assert _used(operator, tenant_id) == before + len(" And back.")
