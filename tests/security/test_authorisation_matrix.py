"""The authorisation matrix: every route of the app × no key, a wrong key, another tenant's key on our ids,
our key on another tenant's ids, and every key scope (read, write, admin), a key limited to another
knowledge base, and another tenant's keys on a knowledge base shared with it and after the share is revoked.

Routes are taken from the Chalice app's route table, so a route added later is probed too (a route whose
body model has no sample below fails the test and says so). A request another tenant makes with our ids is
a 404 (never a 403 that confirms the id exists), and no answer to another tenant ever carries our ids or
our text; afterwards everything of ours is still there, unchanged."""

from __future__ import annotations

import json
import re
import time
import uuid
from dataclasses import dataclass, fields, replace
from typing import Any

import pytest
from e2e.conftest import V1, Api, load_app, multipart
from pydantic import BaseModel

from chalicelib.api.registry import OPERATIONS, Operation
from chalicelib.bootstrap import Services
from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.local.runtime import LocalRuntime

#: minimal valid bodies per body model; "{name}" is replaced by the id of that name
SAMPLE_BODIES: dict[str, dict[str, Any]] = {
    "CreateKnowledgeBase": {"name": "probe-{n}"},
    "SearchRequest": {"query_text": "{secret}"},
    "UploadUrlRequest": {"file_name": "probe-{n}.md"},
    "UrlImportRequest": {"url": "https://example.com/probe-{n}.html"},
    "ManualRequest": {"content": "# probe\n\n{n}"},
    "ReparseRequest": {},
    "ChunkPreviewRequest": {"knowledge_id": "{knowledge_id}"},
    # its own knowledge: the probed one stays in use (a row being deleted answers 404 to what reads it)
    "BatchDeleteRequest": {"kb_id": "{kb_id}", "ids": ["{doomed_id}"]},
    "BatchReparseRequest": {"kb_id": "{kb_id}", "ids": ["{knowledge_id}"]},
    "EditKnowledgeRequest": {"title": "taken over"},
    "UpdateKnowledgeBase": {"description": "taken over"},
    "EditChunkRequest": {"content": "taken over"},
    "TenantQuotas": {"document_quota": 1},
    "TenantSettingsRequest": {"parser_engine_rules": {"docx": "markitdown"}},
    "MoveKnowledgeRequest": {"source_kb_id": "{kb_id}", "target_kb_id": "{kb_id}", "ids": ["{knowledge_id}"]},
    "CloneKnowledgeBaseRequest": {"target_kb_id": "{kb_id}"},
    "CreateTagRequest": {"name": "probe-{n}"},
    "UpdateTagRequest": {"color": "red"},
    "FaqEntryRequest": {"standard_question": "probe {n}?", "answers": ["{secret}"]},
    "FaqEntryUpdate": {"is_enabled": True},
    "FaqImportRequest": {"dry_run": True, "entries": [{"standard_question": "q {n}?", "answers": ["a"]}]},
    "FaqUploadUrlRequest": {"file_name": "probe-{n}.csv"},
    "ShareRequest": {"tenant_id": "{peer_tenant_id}"},
    "BlockTenantRequest": {"tenant_id": "{peer_tenant_id}"},
    # a public address literal: the SSRF check passes without DNS
    "CreateWebhookRequest": {
        "url": "https://93.184.216.34/probe-{n}",
        "event_types": ["Knowledge Completed"],
    },
    "UpdateWebhookRequest": {"description": "taken over"},
    "RotateWebhookSecretRequest": {"previous_secret_expires_in_seconds": 60},
}
#: query strings a route needs to get past validation
SAMPLE_QUERIES: dict[str, str] = {"GraphQuery": "entity={secret}"}
#: public by design: liveness, the API's own description and docs, and the console's static files (they hold
#: no data: the page calls the API with the key its user gives it; tests/security/test_console_static.py)
PUBLIC = {"health", "openapi_document", "api_docs", "api_docs_asset", "console_page", "console_asset"}
#: a public route's answer when it is not 200: `/console` sends the browser on to `/console/` (its assets
#: are relative to it)
PUBLIC_STATUS = {"console_page": 308}
#: public by design: the token in the path is the credential (tested on its own below)
BY_TOKEN = {"redeem_download"}
#: 404 codes that say the (owned, found) parent holds nothing of that kind yet, not that access was refused
NOTHING_YET = {"faq_import_not_found", "chunk_not_found", "file_not_found"}
_ID = re.compile(r"\{(kb_id|knowledge_id|task_id|tenant_id|key_id|tag_id|entry_id|chunk_id|webhook_id)\}")


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    view: str
    op: Operation

    @property
    def operator(self) -> bool:
        return bool(getattr(self.op, "operator", False))

    @property
    def scope(self) -> Scope:
        return self.op.required_scope(self.method)

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


def _routes() -> list[Route]:
    return sorted(
        (
            Route(method, path, entry.view_name, OPERATIONS[entry.view_name])
            for path, methods in load_app().routes.items()
            for method, entry in methods.items()
            if method != "OPTIONS"  # CORS preflights hold no data (tests/e2e/test_one_envelope.py)
        ),
        key=str,
    )


ROUTES = _routes()
#: the routes an API key opens
KEYED = [route for route in ROUTES if route.view not in BY_TOKEN]


def _fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, real in ids.items():
            value = value.replace("{" + name + "}", real)
        return value
    if isinstance(value, list):
        return [_fill(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, ids) for k, v in value.items()}
    return value


def _body_sample(route: Route) -> dict[str, Any]:
    """The route's sample body; operator routes refuse a tenant before reading any body."""
    model: type[BaseModel] | None = route.op.body
    if model is None or route.operator:
        return {}
    assert model.__name__ in SAMPLE_BODIES or model.__name__ == "FileUploadForm", (
        f"add a sample body for {model.__name__} to SAMPLE_BODIES"
    )
    return SAMPLE_BODIES.get(model.__name__, {})


def takes_ids(route: Route) -> bool:
    """The route names objects: in its path, or in its sample body."""
    return bool(_ID.search(route.path + json.dumps(_body_sample(route))))


class Sent:
    """A response and what the request itself carried (an id echoed back in a 404 is no leak)."""

    def __init__(self, response: Any, request_text: str):
        self.response = response
        self.request_text = request_text
        self.status_code = response.status_code
        self.body = response.body
        self.json_body = response.json_body


def call(api: Api, route: Route, ids: dict[str, str], key: str | None) -> Sent:
    # {asset}: one of the API docs' files, or of the console's
    ids = {**ids, "n": uuid.uuid4().hex[:8], "asset": "init.js" if "/docs/" in route.path else "app.js"}
    if "/faq/" in route.path:  # FAQ routes act on the tenant's FAQ knowledge base
        ids["kb_id"] = ids["faq_kb_id"]
    path = _fill(route.path, ids)
    if route.op.query is not None and route.op.query.__name__ in SAMPLE_QUERIES:
        path += "?" + _fill(SAMPLE_QUERIES[route.op.query.__name__], ids)
    headers = {} if key is None else {"X-API-Key": key}
    if route.op.multipart:
        body, content_type = multipart({"file": (f"probe-{ids['n']}.md", b"# probe\n\ntext")}, {})
        headers["Content-Type"] = content_type
        response = api.client.http.request(method=route.method, path=path, headers=headers, body=body)
        return Sent(response, path)
    data = b""
    if route.method in ("POST", "PUT"):
        headers["Content-Type"] = "application/json"
        data = json.dumps(_fill(_body_sample(route), ids)).encode()
    response = api.client.http.request(method=route.method, path=path, headers=headers, body=data)
    return Sent(response, path + data.decode())


@dataclass
class Tenant:
    api: Api
    ids: dict[str, str]


def _seed(api: Api, secret: str) -> dict[str, str]:
    """A knowledge base with a knowledge carrying `secret`, a finished task, and tenant settings."""
    kb = api.create_kb(f"kb-{secret}")
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": secret, "content": f"# {secret}\n\n{secret} body", "status": "draft"},
    )
    assert manual.status_code == 200, manual.json_body
    spare = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "spare", "status": "draft"})
    doomed = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "doomed", "status": "draft"}
    )
    assert doomed.status_code == 200, doomed.json_body
    task = api.client.http.delete(
        f"{V1}/knowledge/{spare.json_body['data']['id']}", headers={"X-API-Key": api.api_key}
    )
    assert task.status_code == 202, task.json_body
    settings = api.client.http.request(
        method="PUT",
        path=f"{V1}/tenant/settings",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps({"parser_engine_rules": {"pdf": "builtin"}}).encode(),
    )
    assert settings.status_code == 200, settings.json_body
    tag = api.post(f"/knowledge-bases/{kb['id']}/tags", {"name": f"tag-{secret}"})
    assert tag.status_code == 201, tag.json_body
    faq_kb = api.create_kb(f"faq-{secret}", type="faq")
    entry = api.post(
        f"/knowledge-bases/{faq_kb['id']}/faq/entries",
        {"standard_question": f"{secret}?", "answers": [secret]},
    )
    assert entry.status_code in (200, 201), entry.json_body
    hook = api.post(
        f"/knowledge-bases/{kb['id']}/webhooks",
        {"url": f"https://93.184.216.34/{secret}", "event_types": ["Knowledge Completed"]},
    )
    assert hook.status_code == 201, hook.json_body
    return {
        "webhook_id": hook.json_body["data"]["id"],
        "kb_id": kb["id"],
        "faq_kb_id": faq_kb["id"],
        "tag_id": tag.json_body["data"]["id"],
        "entry_id": entry.json_body["data"]["id"],
        "knowledge_id": manual.json_body["data"]["id"],
        "doomed_id": doomed.json_body["data"]["id"],
        "chunk_id": f"{manual.json_body['data']['id']}-a1-00000",
        "task_id": task.json_body["data"]["task_id"],
        "secret": secret,
        "tenant_id": kb["tenant_id"],
        "key_id": uuid.uuid4().hex,
    }


OPERATOR_KEY = "matrix-operator-key"


@pytest.fixture
def tenants(api: Api, other_api: Api, services: Services) -> tuple[Tenant, Tenant]:
    if "operator_key" in {f.name for f in fields(services.settings)}:  # the admin API is on, behind a key
        services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    if "tenant_requests_per_second" in {f.name for f in fields(services.settings)}:
        # every route under every scope: hundreds of requests a window, not a test of the request limit
        services.settings = replace(services.settings, tenant_requests_per_second=0)
    a = Tenant(api, _seed(api, f"alpha{uuid.uuid4().hex[:8]}"))
    b = Tenant(other_api, _seed(other_api, f"bravo{uuid.uuid4().hex[:8]}"))
    a.ids["peer_tenant_id"], b.ids["peer_tenant_id"] = b.ids["tenant_id"], a.ids["tenant_id"]
    return a, b


def _leaks(sent: Sent, ids: dict[str, str]) -> list[str]:
    """Names of the victim's ids or text in the answer that the request itself did not carry."""
    body = sent.body.decode("utf-8", "replace") if isinstance(sent.body, bytes) else str(sent.body)
    return [
        name
        for name in ("kb_id", "knowledge_id", "task_id", "secret")
        if ids[name] in body and ids[name] not in sent.request_text
    ]


def test_every_route_is_in_the_matrix() -> None:
    views = {route.view for route in ROUTES}
    assert views == set(OPERATIONS)  # every registered operation is routed, and probed here
    assert len(ROUTES) >= 30
    for route in ROUTES:
        _body_sample(route)


def test_no_key_and_a_wrong_key(tenants: tuple[Tenant, Tenant]) -> None:
    a, _ = tenants
    problems = []
    for route in KEYED:
        for key, expected_code in (
            (None, "missing_api_key"),
            ("wk-not-a-key", "invalid_api_key"),
            ("", None),
        ):
            response = call(a.api, route, a.ids, key)
            if route.view in PUBLIC:
                if response.status_code != PUBLIC_STATUS.get(route.view, 200):
                    problems.append(f"{route} public route answered {response.status_code}")
                continue
            if response.status_code not in (401, 403):
                problems.append(f"{route} key={key!r}: {response.status_code}")
            elif (
                expected_code and not route.operator and response.json_body["error"]["code"] != expected_code
            ):
                problems.append(f"{route} key={key!r}: code {response.json_body['error']['code']}")
            if leaked := _leaks(response, a.ids):
                problems.append(f"{route} key={key!r} leaked {leaked}")
    assert not problems, "\n".join(problems)


def test_another_tenants_key_on_our_ids(tenants: tuple[Tenant, Tenant]) -> None:
    a, b = tenants
    problems = []
    for route in KEYED:
        if route.view in PUBLIC:
            continue
        response = call(a.api, route, a.ids, b.api.api_key)
        if route.operator:
            allowed: tuple[int, ...] = (401, 403)
        elif takes_ids(route):
            allowed = (404,)
        else:  # the other tenant's own scope (its list, its settings): fine, as long as none of ours shows
            allowed = (200, 201, 202, 400)
        if response.status_code not in allowed:
            problems.append(f"{route}: {response.status_code} (expected {allowed}) {response.body[:200]!r}")
        if leaked := _leaks(response, a.ids):
            problems.append(f"{route} leaked our {leaked} to another tenant")
    assert not problems, "\n".join(problems)
    _ours_unchanged(a)


def test_our_key_on_another_tenants_ids(tenants: tuple[Tenant, Tenant]) -> None:
    a, b = tenants
    problems = []
    for route in KEYED:
        if route.view in PUBLIC or route.operator:
            continue
        if not takes_ids(route):
            continue
        response = call(a.api, route, b.ids, a.api.api_key)
        if response.status_code != 404:
            problems.append(f"{route}: {response.status_code} {response.body[:200]!r}")
        if leaked := _leaks(response, b.ids):
            problems.append(f"{route} leaked the other tenant's {leaked}")
    # Mixed: our knowledge base with the other tenant's knowledge ids in a batch.
    for path in ("/knowledge/batch-delete", "/knowledge/batch-reparse"):
        response = a.api.post(path, {"kb_id": a.ids["kb_id"], "ids": [b.ids["knowledge_id"]]})
        assert response.status_code in (202, 404), response.json_body
    assert not problems, "\n".join(problems)
    _ours_unchanged(b)


def test_a_tenants_key_is_no_operator_key(tenants: tuple[Tenant, Tenant]) -> None:
    a, _ = tenants
    problems = []
    for route in KEYED:
        if not route.operator:
            continue
        for key in (a.api.api_key, "", "wk-not-a-key"):
            response = a.api.client.http.request(
                method=route.method,
                path=_fill(route.path, a.ids),
                headers={
                    "X-API-Key": a.api.api_key,
                    "X-Operator-Key": key,
                    "Content-Type": "application/json",
                },
                body=b"{}",
            )
            if response.status_code not in (401, 403):
                problems.append(f"{route} with X-Operator-Key={key!r}: {response.status_code}")
            if leaked := _leaks(Sent(response, ""), a.ids):
                problems.append(f"{route} leaked {leaked}")
    assert not problems, "\n".join(problems)


def test_the_owner_gets_through(tenants: tuple[Tenant, Tenant]) -> None:
    """The probes are real requests: with the owner's key none of them is refused for its key or ids."""
    a, _ = tenants
    problems = []
    for route in KEYED:
        if route.operator or route.method == "DELETE":
            continue
        response = call(a.api, route, a.ids, a.api.api_key)
        refused = response.status_code in (401, 403) or (
            response.status_code == 404
            and response.json_body["error"]["code"].endswith("not_found")
            and response.json_body["error"]["code"] not in NOTHING_YET
        )
        if refused:
            problems.append(f"{route}: {response.status_code} {response.body[:200]!r}")
    assert not problems, "\n".join(problems)


def _ours_unchanged(tenant: Tenant) -> None:
    api, ids = tenant.api, tenant.ids
    assert api.get(f"/knowledge-bases/{ids['kb_id']}").status_code == 200
    row = api.knowledge(ids["knowledge_id"])
    assert row["title"] == ids["secret"] and row["parse_status"] == "draft"
    listed = api.get(f"/knowledge-bases/{ids['kb_id']}/knowledge").json_body["data"]
    assert ids["knowledge_id"] in json.dumps(listed)
    settings = api.get("/tenant/settings").json_body["data"]
    assert settings["parser_engine_rules"] == {"pdf": "builtin"}
    assert api.get(f"/tasks/{ids['task_id']}").status_code == 200


# ---------------------------------------------------------------- scopes, knowledge-base limits, shares

#: the routes whose scope is not the one their method implies: a decision made on their registration
READ_BY_DECISION = {"hybrid_search", "chunker_preview"}
ADMIN_BY_DECISION = {
    "put_tenant_settings",
    "share_knowledge_base",
    "list_knowledge_base_shares",
    "unshare_knowledge_base",
    "decline_shared_knowledge_base",
    "block_tenant",
    "list_blocked_tenants",
    "unblock_tenant",
}
#: reads that need a write key: a webhook's URL may carry its receiver's credentials (managing webhooks is
#: a write)
WRITE_BY_DECISION = {"list_webhooks", "get_webhook", "list_webhook_deliveries"}
#: what acts on the tenant as a whole: refused to a key limited to some knowledge bases
WHOLE_TENANT = {
    "create_knowledge_base",
    "put_tenant_settings",
    "block_tenant",  # tests/service/test_share_blocks.py
    "list_blocked_tenants",
    "unblock_tenant",
}
#: what the tenant a knowledge base is shared with does to the share itself (tests/service/test_kb_listing_caps.py)
RECIPIENT_ACTS = {"decline_shared_knowledge_base"}
#: reads of what is not the knowledge base's own: the owner's tasks stay the owner's
NOT_SHARED = {"get_task"}
#: what another tenant reads of a knowledge base shared with it (each answers 200)
SHARED_READS = {
    "get_knowledge_base",
    "list_knowledge",
    "get_knowledge",
    "knowledge_spans",
    "list_chunks",
    "hybrid_search",
}


def _key(services: Services, tenant: Tenant, scope: Scope, kb_ids: tuple[str, ...] | None = None) -> str:
    record, secret = ApiKey.issue(tenant.ids["tenant_id"], f"matrix-{scope.value}", scope, kb_ids)
    services.api_keys.put(record)
    return secret


def _scope_refusal(sent: Sent) -> bool:
    return sent.status_code == 403 and sent.json_body["error"]["code"] == "insufficient_scope"


def _refused(sent: Sent) -> bool:
    """Refused for its key or its ids (not for what the found object holds, nor for a bad body)."""
    return sent.status_code in (401, 403) or (
        sent.status_code == 404
        and sent.json_body["error"]["code"].endswith("not_found")
        and sent.json_body["error"]["code"] not in NOTHING_YET
    )


def _tenant_routes() -> list[Route]:
    return [r for r in KEYED if r.view not in PUBLIC and not r.operator]


def test_every_route_has_its_scope() -> None:
    """Each route's scope comes from its method, or from a decision on its registration; a route whose
    decision is not the one listed here (or one that makes none while it should) fails."""
    decided = {r.view: r.op.scope for r in _tenant_routes() if r.op.scope is not None}
    assert {v for v, s in decided.items() if s is Scope.READ} == READ_BY_DECISION
    assert {v for v, s in decided.items() if s is Scope.ADMIN} == ADMIN_BY_DECISION
    assert {v for v, s in decided.items() if s is Scope.WRITE} == WRITE_BY_DECISION
    for route in _tenant_routes():
        if route.view in READ_BY_DECISION | ADMIN_BY_DECISION | WRITE_BY_DECISION:
            continue
        assert route.scope is (Scope.READ if route.method == "GET" else Scope.WRITE), route
        # anything under /tenant/ that is not a read changes the tenant itself: admin
        assert not (route.path.startswith(f"{V1}/tenant/") and route.method != "GET"), route
    assert not set(SHARED_READS) - {r.view for r in _tenant_routes() if r.scope is Scope.READ}


def test_every_route_under_every_scope(tenants: tuple[Tenant, Tenant], services: Services) -> None:
    """A key below the route's scope is refused (403 insufficient_scope) before anything is read or written;
    a key at or above it gets through. Read first (nothing may change), then write, then admin."""
    a, _ = tenants
    problems = []
    for scope in Scope:
        key = _key(services, a, scope)
        for route in _tenant_routes():
            if scope is not Scope.READ and route.method == "DELETE":
                continue  # the owner's deletes run last, below
            sent = call(a.api, route, a.ids, key)
            if not scope.covers(route.scope):
                if not _scope_refusal(sent):
                    problems.append(
                        f"{scope} key on {route} ({route.scope}): {sent.status_code} {sent.body[:160]!r}"
                    )
            elif _refused(sent):
                problems.append(
                    f"{scope} key on {route} ({route.scope}) refused: {sent.status_code} {sent.body[:160]!r}"
                )
        if scope is Scope.READ:
            _ours_unchanged(a)
    write = _key(services, a, Scope.WRITE)
    for route in _tenant_routes():
        if route.method == "DELETE":
            sent = call(a.api, route, a.ids, write)
            if route.scope is Scope.WRITE and _scope_refusal(sent):
                problems.append(f"write key on {route}: refused its scope")
            if route.scope is Scope.ADMIN and not _scope_refusal(sent):
                problems.append(f"write key on {route}: {sent.status_code}, not insufficient_scope")
    assert not problems, "\n".join(problems)


def test_a_key_limited_to_another_knowledge_base(tenants: tuple[Tenant, Tenant], services: Services) -> None:
    """Every route that names a knowledge base outside the key's list (or something in one) answers 404 as
    if it did not exist; the listing shows only the listed ones; the listed one works."""
    a, _ = tenants
    own = a.api.create_kb(f"limited-{uuid.uuid4().hex[:6]}")
    assert not WHOLE_TENANT - {r.view for r in _tenant_routes()}
    key = _key(services, a, Scope.ADMIN, (own["id"],))
    problems = []
    for route in _tenant_routes():
        sent = call(a.api, route, a.ids, key)
        if route.view in WHOLE_TENANT:  # refused whatever it names (an unblock names a tenant)
            if (sent.status_code, sent.json_body["error"]["code"]) != (403, "kb_limited_key"):
                problems.append(f"{route}: {sent.status_code} (expected 403 kb_limited_key)")
        elif takes_ids(route):
            if sent.status_code != 404:
                problems.append(f"{route}: {sent.status_code} (expected 404) {sent.body[:160]!r}")
        elif sent.status_code not in (200, 201, 202, 400):
            problems.append(f"{route}: {sent.status_code} {sent.body[:160]!r}")
        if leaked := _leaks(sent, a.ids):
            problems.append(f"{route} leaked {leaked} to a key limited to another knowledge base")
    assert not problems, "\n".join(problems)
    limited = Api(a.api.client, key)
    listed = {kb["id"] for kb in limited.get("/knowledge-bases").json_body["data"]}
    assert own["id"] in listed and a.ids["kb_id"] not in listed and a.ids["faq_kb_id"] not in listed
    assert limited.get(f"/knowledge-bases/{own['id']}").status_code == 200
    made = limited.post(
        f"/knowledge-bases/{own['id']}/knowledge/manual", {"content": "# mine", "status": "draft"}
    )
    assert made.status_code == 200, made.json_body
    assert limited.get(f"/knowledge/{made.json_body['data']['id']}").status_code == 200
    # a clone of its own knowledge base into a new one would make a knowledge base outside its list
    cloned = limited.post(f"/knowledge-bases/{own['id']}/clone", {"name": f"made-{uuid.uuid4().hex[:6]}"})
    assert (cloned.status_code, cloned.json_body["error"]["code"]) == (403, "kb_limited_key")
    _ours_unchanged(a)


def _share(a: Tenant, b: Tenant) -> None:
    shared = a.api.post(f"/knowledge-bases/{a.ids['kb_id']}/shares", {"tenant_id": b.ids["tenant_id"]})
    assert shared.status_code == 201, shared.json_body
    assert shared.json_body["data"]["tenant_ids"] == [b.ids["tenant_id"]]


def test_another_tenant_on_a_shared_knowledge_base(
    tenants: tuple[Tenant, Tenant], services: Services
) -> None:
    """Shared read-only: the other tenant's keys (read scope or more) read the knowledge base, its knowledge,
    stage trees and chunks and search it; every other route on it (writes, shares, the FAQ knowledge base not
    shared) answers 404, or 403 insufficient_scope to a key below the route's scope; nothing of ours
    changes. Revoked, the reads are 404 again."""
    a, b = tenants
    _share(a, b)
    problems = []
    for scope in Scope:
        key = _key(services, b, scope)
        for route in _tenant_routes():
            if route.view in RECIPIENT_ACTS:  # it would end the share the rest of the loop reads through
                continue
            sent = call(a.api, route, a.ids, key)
            on_shared_kb = "/faq/" not in route.path
            if route.view in SHARED_READS and on_shared_kb:
                if sent.status_code != 200:
                    problems.append(
                        f"{scope} key, shared read {route}: {sent.status_code} {sent.body[:160]!r}"
                    )
                continue
            if not scope.covers(route.scope):
                if not _scope_refusal(sent):
                    problems.append(
                        f"{scope} key on {route}: {sent.status_code} (expected insufficient_scope)"
                    )
            elif takes_ids(route) and route.scope is not Scope.READ and sent.status_code != 404:
                problems.append(
                    f"{scope} key wrote through a share: {route} {sent.status_code} {sent.body[:160]!r}"
                )
            elif not takes_ids(route) and sent.status_code not in (200, 201, 202, 400):
                problems.append(f"{scope} key on {route}: {sent.status_code} {sent.body[:160]!r}")
            elif takes_ids(route) and route.scope is Scope.READ:
                if "/faq/" in route.path or route.view in NOT_SHARED:  # not on the shared knowledge base
                    if sent.status_code != 404:
                        problems.append(f"{scope} key, read {route}: {sent.status_code} (expected 404)")
                elif _refused(sent):  # a read on the shared knowledge base gets through
                    problems.append(f"{scope} key, shared read {route} refused: {sent.body[:160]!r}")
    assert not problems, "\n".join(problems)
    reader = Api(b.api.client, _key(services, b, Scope.READ))
    hits = reader.post(f"/knowledge-bases/{a.ids['kb_id']}/hybrid-search", {"query_text": "anything"})
    assert hits.status_code == 200, hits.json_body
    listed = reader.get(f"/knowledge-bases/{a.ids['kb_id']}/knowledge").json_body["data"]
    assert a.ids["knowledge_id"] in json.dumps(listed)
    assert reader.get(f"/knowledge/{a.ids['knowledge_id']}").json_body["data"]["title"] == a.ids["secret"]
    # the shared knowledge base is in the other tenant's list, after its own, naming its owner
    kbs = reader.get("/knowledge-bases").json_body["data"]
    assert kbs[-1]["id"] == a.ids["kb_id"] and kbs[-1]["tenant_id"] == a.ids["tenant_id"]
    assert b.ids["kb_id"] in [kb["id"] for kb in kbs]
    # the owner's share list is the owner's: 404 to the tenant it is shared with
    assert b.api.get(f"/knowledge-bases/{a.ids['kb_id']}/shares").status_code == 404
    _ours_unchanged(a)
    revoked = a.api.client.http.delete(
        f"{V1}/knowledge-bases/{a.ids['kb_id']}/shares/{b.ids['tenant_id']}",
        headers={"X-API-Key": a.api.api_key},
    )
    assert revoked.status_code == 200 and revoked.json_body["data"]["tenant_ids"] == []
    for path in (f"/knowledge-bases/{a.ids['kb_id']}", f"/knowledge/{a.ids['knowledge_id']}"):
        assert reader.get(path).status_code == 404, path
    assert a.ids["kb_id"] not in [kb["id"] for kb in reader.get("/knowledge-bases").json_body["data"]]
    gone = reader.post(f"/knowledge-bases/{a.ids['kb_id']}/hybrid-search", {"query_text": "anything"})
    assert gone.status_code == 404


def test_sharing_refusals(tenants: tuple[Tenant, Tenant], services: Services, runtime: LocalRuntime) -> None:
    a, b = tenants
    kb = a.ids["kb_id"]
    assert (
        a.api.post(f"/knowledge-bases/{kb}/shares", {"tenant_id": a.ids["tenant_id"]}).json_body["error"][
            "code"
        ]
        == "share_with_self"
    )
    unknown = a.api.post(f"/knowledge-bases/{kb}/shares", {"tenant_id": "no-such-tenant"})
    assert (unknown.status_code, unknown.json_body["error"]["code"]) == (404, "tenant_not_found")
    bad = a.api.post(f"/knowledge-bases/{kb}/shares", {"tenant_id": "a b"})
    assert (bad.status_code, bad.json_body["error"]["code"]) == (400, "invalid_tenant_id")
    writer = Api(a.api.client, _key(services, a, Scope.WRITE))
    refused = writer.post(f"/knowledge-bases/{kb}/shares", {"tenant_id": b.ids["tenant_id"]})
    assert (refused.status_code, refused.json_body["error"]["code"]) == (403, "insufficient_scope")
    not_shared = a.api.client.http.delete(
        f"{V1}/knowledge-bases/{kb}/shares/{b.ids['tenant_id']}", headers={"X-API-Key": a.api.api_key}
    )
    assert (not_shared.status_code, not_shared.json_body["error"]["code"]) == (404, "share_not_found")
    # b cannot share a's knowledge base, even once a shared it with b
    _share(a, b)
    assert b.api.post(f"/knowledge-bases/{kb}/shares", {"tenant_id": b.ids["tenant_id"]}).status_code == 404
    # a deleted knowledge base leaves no share behind
    deleted = a.api.client.http.delete(f"{V1}/knowledge-bases/{kb}", headers={"X-API-Key": a.api.api_key})
    assert deleted.status_code == 202, deleted.json_body
    runtime.drain(timeout=120)
    assert services.shares.tenants_of(kb) == []


# ---------------------------------------------------------------- download links: the token is the credential


def _grant(api: Api, knowledge_id: str, kind: str = "original") -> str:
    answer = api.get(f"/knowledge/{knowledge_id}/file-url?kind={kind}")
    assert answer.status_code == 200, answer.json_body
    return str(answer.json_body["data"]["url"]).split("/r/", 1)[1]


def _redeem(api: Api, path: str, key: str | None = None) -> Any:
    return api.client.http.get(path, headers={} if key is None else {"X-API-Key": key})


def test_a_download_token_opens_its_one_file_only(
    tenants: tuple[Tenant, Tenant], services: Services, runtime: LocalRuntime
) -> None:
    a, b = tenants
    mine = a.api.upload(a.ids["kb_id"], "alpha.md", f"# {a.ids['secret']}\n\nalpha".encode())
    theirs = b.api.upload(b.ids["kb_id"], "bravo.md", f"# {b.ids['secret']}\n\nbravo".encode())
    mine_id, theirs_id = mine.json_body["data"]["id"], theirs.json_body["data"]["id"]
    token, other = _grant(a.api, mine_id), _grant(b.api, theirs_id)
    # no key, a wrong key, another tenant's key: the token alone decides, and leads to its own file only
    for key in (None, "wk-not-a-key", b.api.api_key, a.api.api_key):
        for suffix in ("", "?kind=parsed", f"?resource={other}", f"?knowledge_id={theirs_id}"):
            answer = _redeem(a.api, f"/r/{token}{suffix}", key)
            assert answer.status_code == 302, (key, suffix, answer.body)
            location = answer.headers["Location"]
            assert mine_id in location and theirs_id not in location and b.ids["tenant_id"] not in location
    # no key opens anything without a token, and a token changed by one character is no token
    for path in (f"/r/{token[:-1]}", f"/r/{token}x", f"/r/{other[:-1]}", "/r/{token}", f"/r/{'A' * 43}"):
        refused = _redeem(a.api, path)
        assert refused.status_code == 404 and refused.json_body["error"]["code"] == "grant_not_found", path
        assert not _leaks(Sent(refused, path), a.ids) and not _leaks(Sent(refused, path), b.ids)
    # a token works for download only: no other method is routed on it
    assert a.api.client.http.request(
        method="DELETE", path=f"/r/{token}", headers={}, body=b""
    ).status_code in (
        403,
        404,
        405,
    )
    # expired
    services.settings = replace(services.settings, download_url_seconds=1)
    short = _grant(a.api, mine_id)
    time.sleep(1.2)
    expired = _redeem(a.api, f"/r/{short}")
    assert expired.status_code == 410 and expired.json_body["error"]["code"] == "grant_expired"
    # deleted: the token stops working with its document; the other tenant's token still works
    deleted = a.api.client.http.delete(f"{V1}/knowledge/{mine_id}", headers={"X-API-Key": a.api.api_key})
    assert deleted.status_code == 202, deleted.json_body
    # the delete alone: the tenants' URL-import probes may still be retrying with backoff (a full drain
    # waited for them, 95 s); the next test starts from a cleared state anyway
    deadline = time.monotonic() + 120
    while a.api.get(f"/knowledge/{mine_id}").status_code != 404:
        assert time.monotonic() < deadline, "the delete did not finish"
        if not any(not result.empty for result in runtime.poll_once().values()):
            time.sleep(0.05)
    gone = _redeem(a.api, f"/r/{token}")
    assert gone.status_code == 410 and gone.json_body["error"]["code"] == "resource_deleted"
    assert _redeem(b.api, f"/r/{other}").status_code == 302
