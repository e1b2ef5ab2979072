"""The operators' API through the public path (Chalice test client, DynamoDB and SQS on moto): tenants and
API keys behind the operator key, and DLQ recovery of a document that died in the docreader stage."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3
import pytest
from chalice.test import Client
from project_paths import corpus_bytes

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import DocReader, ReadRequest, ReadResult

from .conftest import V1, Api

OPERATOR_KEY = "op-test-key"
TEXT = corpus_bytes("debian-faq-getting-debian.md")


class Operator:
    def __init__(self, client: Client, key: str | None = OPERATOR_KEY) -> None:
        self.client = client
        self.key = key

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.key is not None:
            headers["X-Operator-Key"] = self.key
        return headers

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body) if body is not None else None
        return getattr(self.client.http, method)(f"{V1}/admin{path}", headers=self._headers(), body=data)


@pytest.fixture
def operator(client: Client, services: Services) -> Operator:
    services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    return Operator(client)


def test_admin_routes_are_disabled_without_an_operator_key(client: Client, services: Services) -> None:
    services.settings = replace(services.settings, operator_key="")
    for method, path in (
        ("get", "/tenants"),
        ("post", "/tenants"),
        ("get", "/dlq"),
        ("post", "/dlq/redrive"),
    ):
        response = Operator(client, "anything").call(
            method, path, {"name": "x"} if method == "post" else None
        )
        assert response.status_code == 403 and response.json_body["error"]["code"] == "admin_disabled"


def test_operator_key_checks(client: Client, operator: Operator, api: Api) -> None:
    assert Operator(client, None).call("get", "/tenants").status_code == 401
    wrong = Operator(client, "op-wrong").call("get", "/tenants")
    assert wrong.status_code == 403 and wrong.json_body["error"]["code"] == "invalid_operator_key"
    as_tenant = client.http.get(f"{V1}/admin/tenants", headers={"X-Operator-Key": api.api_key})
    assert as_tenant.status_code == 403  # a tenant's API key is not an operator key


def test_tenants_get_several_keys_and_a_revoked_key_answers_401_at_once(
    client: Client, operator: Operator, api: Api
) -> None:
    created = operator.call("post", "/tenants", {"name": "acme", "key_name": "first"})
    assert created.status_code == 201, created.json_body
    data = created.json_body["data"]
    tenant_id, first_key, first_id = data["tenant"]["id"], data["api_key"], data["key"]["id"]
    acme = Api(client, first_key)
    assert acme.get("/knowledge-bases").status_code == 200
    assert acme.create_kb("acme-docs")["name"] == "acme-docs"
    assert all(kb["name"] != "acme-docs" for kb in api.get("/knowledge-bases").json_body["data"])

    issued = operator.call("post", f"/tenants/{tenant_id}/api-keys", {"name": "ci"})
    assert issued.status_code == 201
    second = Api(client, issued.json_body["data"]["api_key"])
    assert [kb["name"] for kb in second.get("/knowledge-bases").json_body["data"]] == ["acme-docs"]

    keys = operator.call("get", f"/tenants/{tenant_id}/api-keys").json_body["data"]
    assert {k["name"] for k in keys} == {"first", "ci"} and all("api_key" not in k for k in keys)
    assert all(first_key not in json.dumps(k) for k in keys)  # shown once: never listed

    revoked = operator.call("delete", f"/tenants/{tenant_id}/api-keys/{first_id}")
    assert revoked.status_code == 200 and revoked.json_body["data"]["status"] == "revoked"
    refused = acme.get("/knowledge-bases")
    assert refused.status_code == 401 and refused.json_body["error"]["code"] == "revoked_api_key"
    assert second.get("/knowledge-bases").status_code == 200

    tenants = operator.call("get", "/tenants").json_body["data"]
    assert "acme" in {t["name"] for t in tenants} and "local" in {t["id"] for t in tenants}
    assert all(not t["id"].startswith("apikey#") for t in tenants)
    missing = operator.call("delete", f"/tenants/{tenant_id}/api-keys/key_nope")
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "api_key_not_found"
    bad = operator.call("post", "/tenants", {"name": ""})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_name"
    assert operator.call("get", "/dlq?queue=nope").status_code == 400


def test_keys_are_issued_with_a_scope_and_knowledge_bases(client: Client, operator: Operator) -> None:
    """A key's scope and knowledge bases are set when the operator issues it, listed (never the key), and
    bind at once; a key issued without them is an admin key over the whole tenant, as keys were before."""
    created = operator.call("post", "/tenants", {"name": "scoped", "scope": "read"})
    assert created.status_code == 201, created.json_body
    data = created.json_body["data"]
    tenant_id, reader = data["tenant"]["id"], Api(client, data["api_key"])
    assert (data["key"]["scope"], data["key"]["kb_ids"]) == ("read", None)
    refused = reader.post("/knowledge-bases", {"name": "nope"})
    assert (refused.status_code, refused.json_body["error"]["code"]) == (403, "insufficient_scope")

    admin = operator.call("post", f"/tenants/{tenant_id}/api-keys", {"name": "ops"}).json_body["data"]
    assert (admin["key"]["scope"], admin["key"]["kb_ids"]) == ("admin", None)
    owner = Api(client, admin["api_key"])
    kept, other = owner.create_kb("kept"), owner.create_kb("other")
    assert {kb["id"] for kb in reader.get("/knowledge-bases").json_body["data"]} == {kept["id"], other["id"]}

    issued = operator.call(
        "post", f"/tenants/{tenant_id}/api-keys", {"name": "w", "scope": "write", "kb_ids": [kept["id"]]}
    )
    assert issued.status_code == 201, issued.json_body
    assert (issued.json_body["data"]["key"]["scope"], issued.json_body["data"]["key"]["kb_ids"]) == (
        "write",
        [kept["id"]],
    )
    writer = Api(client, issued.json_body["data"]["api_key"])
    assert [kb["id"] for kb in writer.get("/knowledge-bases").json_body["data"]] == [kept["id"]]
    made = writer.post(
        f"/knowledge-bases/{kept['id']}/knowledge/manual", {"content": "# w", "status": "draft"}
    )
    assert made.status_code == 200, made.json_body
    hidden = writer.post(f"/knowledge-bases/{other['id']}/knowledge/manual", {"content": "# w"})
    assert (hidden.status_code, hidden.json_body["error"]["code"]) == (404, "kb_not_found")
    settings = writer.client.http.put(
        f"{V1}/tenant/settings",
        headers={"X-API-Key": writer.api_key, "Content-Type": "application/json"},
        body=json.dumps({"parser_engine_rules": {}}),
    )
    assert (settings.status_code, settings.json_body["error"]["code"]) == (403, "insufficient_scope")

    listed = operator.call("get", f"/tenants/{tenant_id}/api-keys").json_body["data"]
    assert {(k["name"], k["scope"]) for k in listed} == {
        ("primary", "read"),
        ("ops", "admin"),
        ("w", "write"),
    }
    for body, code in (
        ({"scope": "owner"}, "invalid_scope"),
        ({"kb_ids": "kb-1"}, "invalid_kb_ids"),
        ({"kb_ids": ["a b"]}, "invalid_kb_ids"),
        ({"kb_ids": [f"kb-{i}" for i in range(101)]}, "invalid_kb_ids"),
        ({"kb_ids": []}, "invalid_kb_ids"),  # a key that would reach nothing
        ({"kb_ids": [kept["id"], "no-such-kb"]}, "unknown_kb_id"),
    ):
        bad = operator.call("post", f"/tenants/{tenant_id}/api-keys", body)
        assert (bad.status_code, bad.json_body["error"]["code"]) == (400, code), body
    # another tenant's knowledge base is as unknown as a missing one, and is not named back as found
    stranger = operator.call("post", "/tenants", {"name": "stranger"}).json_body["data"]
    theirs = Api(client, stranger["api_key"]).create_kb("theirs")
    foreign = operator.call("post", f"/tenants/{tenant_id}/api-keys", {"kb_ids": [theirs["id"]]})
    assert (foreign.status_code, foreign.json_body["error"]["code"]) == (400, "unknown_kb_id")
    assert foreign.json_body["data"]["kb_ids"] == [theirs["id"]]
    first = operator.call("post", "/tenants", {"name": "fresh", "kb_ids": [kept["id"]]})
    assert (first.status_code, first.json_body["error"]["code"]) == (400, "unknown_kb_id")


class DownThenUp:
    """A parser that is down for the first `failures` calls (every try of the first document), then works."""

    def __init__(self, inner: DocReader, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def read(self, request: ReadRequest) -> ReadResult:
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("parser service down")
        return self.inner.read(request)

    def engines(self) -> list[dict[str, object]]:
        return self.inner.engines()


def test_a_document_that_died_in_the_docreader_dlq_is_redriven_to_completion(
    operator: Operator, api: Api, runtime: LocalRuntime, services: Services
) -> None:
    services.replace_docreader(DownThenUp(services.docreader(), failures=4))
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "failed"

    (letter,) = operator.call("get", "/dlq?queue=docreader").json_body["data"]
    assert (letter["knowledge_id"], letter["attempt"]) == (created["id"], 1)
    assert letter["row"]["parse_status"] == "failed"
    assert len(operator.call("get", "/dlq").json_body["data"]) == 1  # listing changed nothing

    report = operator.call("post", "/dlq/redrive", {"queue": "docreader"}).json_body["data"]
    assert report["counts"] == {"redriven": 1}
    runtime.drain(timeout=180)
    done = api.knowledge(created["id"])
    assert done["parse_status"] == "completed" and done["chunk_count"] > 0
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "Debian", "match_count": 3})
    assert {h["knowledge_id"] for h in hits.json_body["data"]} == {created["id"]}

    again = operator.call("post", "/dlq/redrive", {}).json_body["data"]
    assert again["counts"] == {}  # the DLQ is empty and the row untouched
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName="weknora-docreader-dlq")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        attrs["ApproximateNumberOfMessages"] == "0" and attrs["ApproximateNumberOfMessagesNotVisible"] == "0"
    )
