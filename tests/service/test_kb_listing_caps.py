"""GET /knowledge-bases is paged (`limit`, an opaque `cursor`; `next_cursor` beside `data`, which stays the
list older clients read): the tenant's own knowledge bases by name, then those shared with it by id, every
one once across the pages, a page reading a bounded number of rows whatever the number shared. A forged or
another tenant's cursor is 400 invalid_cursor. A tenant owns at most WEKNORA_MAX_KBS_PER_TENANT knowledge
bases (403 kb_limit_reached) and has at most WEKNORA_MAX_SHARES_PER_TENANT shared with it (409
share_limit_reached); it declines a share with DELETE /shared-knowledge-bases/{kb_id}. Through the API on
the in-memory adapters (the audit: /tmp/audit-tenants2/probe5.py)."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, replace
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Tenant
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"


@dataclass
class Caller:
    client: Client
    tenant: Tenant
    key: str

    def send(self, method: str, path: str, body: object = None) -> Any:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        data = json.dumps(body).encode() if body is not None else b""
        return self.client.http.request(method, f"{V1}{path}", headers=headers, body=data)

    def ok(self, method: str, path: str, body: object = None) -> Any:
        answer = self.send(method, path, body)
        assert answer.status_code < 300, (method, path, answer.status_code, answer.body)
        return answer.json_body

    def new_kb(self, name: str) -> str:
        return str(self.ok("POST", "/knowledge-bases", {"name": name})["data"]["id"])

    def share(self, kb_id: str, other: Caller) -> Any:
        return self.send("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": other.tenant.id})

    def every_page(self, limit: int) -> list[list[dict[str, Any]]]:
        pages, cursor = [], None
        while True:
            body = self.ok("GET", f"/knowledge-bases?limit={limit}" + (f"&cursor={cursor}" if cursor else ""))
            pages.append(body["data"])
            cursor = body["next_cursor"]
            assert body["has_more"] is (cursor is not None)
            if cursor is None:
                return pages
            assert len(pages) < 50, "the listing never ends"


def _caller(deps: Services, client: Client, name: str) -> Caller:
    tenant, key = create_tenant_with_key(deps, name)
    return Caller(client, tenant, key)


@pytest.fixture
def owner(deps: Services, client: Client) -> Caller:
    return _caller(deps, client, "owner")


@pytest.fixture
def reader(deps: Services, client: Client) -> Caller:
    return _caller(deps, client, "reader")


def test_pages_hold_every_knowledge_base_once_own_by_name_then_shared(owner: Caller, reader: Caller) -> None:
    own = {
        reader.new_kb(name): name for name in ("delta", "alpha", "echo", "charlie", "bravo", "golf", "fox")
    }
    shared = [owner.new_kb(f"shared {n}") for n in range(5)]
    for kb_id in shared:
        assert owner.share(kb_id, reader).status_code == 201
    pages = reader.every_page(limit=3)
    assert all(len(page) <= 3 for page in pages) and len(pages) >= 4
    listed = [kb["id"] for page in pages for kb in page]
    assert len(listed) == len(set(listed)) == 12
    assert listed[:7] == sorted(own, key=lambda kb_id: own[kb_id]) and listed[7:] == sorted(shared)
    assert [kb["shared"] for page in pages for kb in page] == [False] * 7 + [True] * 5
    # without parameters, a small tenant's one answer is the whole list, as before
    whole = reader.ok("GET", "/knowledge-bases")
    assert [kb["id"] for kb in whole["data"]] == listed and whole["next_cursor"] is None


def test_a_forged_or_foreign_cursor_is_refused(owner: Caller, reader: Caller) -> None:
    for name in ("a", "b", "c"):
        owner.new_kb(name)
        reader.new_kb(name)
    cursor = owner.ok("GET", "/knowledge-bases?limit=1")["next_cursor"]
    assert cursor
    raw = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    forged = [
        "not-a-cursor",
        base64.urlsafe_b64encode(json.dumps({**raw, "f": "0" * 16}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps({**raw, "s": "everything"}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps({**raw, "a": [1, 2]}).encode()).decode(),
    ]
    for bad in forged:
        answer = owner.send("GET", f"/knowledge-bases?cursor={bad}")
        assert answer.status_code == 400 and answer.json_body["error"]["code"] == "invalid_cursor", bad
    foreign = reader.send("GET", f"/knowledge-bases?cursor={cursor}")  # the owner's cursor
    assert foreign.status_code == 400 and foreign.json_body["error"]["code"] == "invalid_cursor"
    too_many = owner.send("GET", "/knowledge-bases?limit=100000")
    assert too_many.status_code == 400


def test_knowledge_bases_per_tenant_are_capped(deps: Services, owner: Caller) -> None:
    deps.settings = replace(deps.settings, max_kbs_per_tenant=3)
    first, *_ = [owner.new_kb(name) for name in ("one", "two", "three")]
    over = owner.send("POST", "/knowledge-bases", {"name": "four"})
    assert over.status_code == 403 and over.json_body["error"]["code"] == "kb_limit_reached"
    assert len(owner.ok("GET", "/knowledge-bases")["data"]) == 3
    # a clone into a new knowledge base is a create too
    clone = owner.send("POST", f"/knowledge-bases/{first}/clone", {"name": "four"})
    assert clone.status_code == 403 and clone.json_body["error"]["code"] == "kb_limit_reached"
    assert len(owner.ok("GET", "/knowledge-bases")["data"]) == 3


def test_shares_per_recipient_are_capped(
    deps: Services, client: Client, owner: Caller, reader: Caller
) -> None:
    deps.settings = replace(deps.settings, max_shares_per_tenant=2)
    first, second, third = (owner.new_kb(f"kb {n}") for n in range(3))
    assert owner.share(first, reader).status_code == 201
    assert owner.share(second, reader).status_code == 201
    over = owner.share(third, reader)
    assert over.status_code == 409 and over.json_body["error"]["code"] == "share_limit_reached"
    assert owner.ok("GET", f"/knowledge-bases/{third}/shares")["data"]["tenant_ids"] == []
    assert owner.share(first, reader).status_code == 201  # sharing one it holds again is no new share
    # the cap is the recipient's: another tenant still receives the third
    assert owner.share(third, _caller(deps, client, "another")).status_code == 201
    # a declined share makes room
    reader.ok("DELETE", f"/shared-knowledge-bases/{first}")
    assert owner.share(third, reader).status_code == 201


def test_the_recipient_declines_a_share(owner: Caller, reader: Caller) -> None:
    kb_id = owner.new_kb("unwanted")
    kept = owner.new_kb("kept")
    for shared in (kb_id, kept):
        assert owner.share(shared, reader).status_code == 201
    assert reader.send("GET", f"/knowledge-bases/{kb_id}").status_code == 200
    declined = reader.ok("DELETE", f"/shared-knowledge-bases/{kb_id}")
    assert declined["data"] == {"kb_id": kb_id, "declined": True}
    assert [kb["id"] for kb in reader.ok("GET", "/knowledge-bases")["data"]] == [kept]
    for path in (f"/knowledge-bases/{kb_id}", f"/knowledge-bases/{kb_id}/knowledge"):
        gone = reader.send("GET", path)
        assert gone.status_code == 404 and gone.json_body["error"]["code"] == "kb_not_found", path
    again = reader.send("DELETE", f"/shared-knowledge-bases/{kb_id}")
    assert again.status_code == 404 and again.json_body["error"]["code"] == "share_not_found"
    # its own knowledge base, or one never shared with it, is no share to decline; the owner's stays
    assert reader.send("DELETE", f"/shared-knowledge-bases/{reader.new_kb('mine')}").status_code == 404
    assert owner.send("DELETE", f"/shared-knowledge-bases/{kb_id}").status_code == 404
    assert owner.ok("GET", f"/knowledge-bases/{kb_id}/shares")["data"]["tenant_ids"] == []
    assert owner.ok("GET", f"/knowledge-bases/{kb_id}")["data"]["id"] == kb_id


def test_a_page_reads_a_bounded_number_of_rows(
    deps: Services, owner: Caller, reader: Caller, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(30):
        assert owner.share(owner.new_kb(f"spam {n:02}"), reader).status_code == 201
    reads = {"kb": 0, "share": 0}

    def counted(repo: object, name: str, kind: str, per_call: bool) -> None:
        original = getattr(repo, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            found = original(*args, **kwargs)
            reads[kind] += 1 if per_call else len(found)
            return found

        monkeypatch.setattr(repo, name, wrapper)

    counted(deps.kbs, "get", "kb", per_call=True)
    counted(deps.shares, "tenants_of", "share", per_call=True)
    if hasattr(deps.kbs, "get_many"):
        counted(deps.kbs, "get_many", "kb", per_call=False)
    first = reader.ok("GET", "/knowledge-bases?limit=5")
    assert len(first["data"]) == 5 and first["next_cursor"]
    # the page's five knowledge bases, each read once in a batch, and no share read one by one
    assert reads == {"kb": 5, "share": 0}


def test_the_openapi_document_says_so(client: Client) -> None:
    document = client.http.get(f"{V1}/openapi.json").json_body
    listing = document["paths"][f"{V1}/knowledge-bases"]["get"]
    params = {p["name"]: p for p in listing["parameters"]}
    assert params["limit"]["schema"]["maximum"] == 100 and params["limit"]["schema"]["default"] == 100
    assert (
        params["cursor"]["in"] == "query" and "invalid_cursor" in listing["responses"]["400"]["description"]
    )
    success = document["components"]["schemas"]["Success"]["properties"]
    assert {"next_cursor", "has_more"} <= set(success)
    create = document["paths"][f"{V1}/knowledge-bases"]["post"]["responses"]
    assert "kb_limit_reached" in create["403"]["description"]
    assert "insufficient_scope" in create["403"]["description"]
    share = document["paths"][f"{V1}/knowledge-bases/{{kb_id}}/shares"]["post"]["responses"]
    assert "share_limit_reached" in share["409"]["description"]
    decline = document["paths"][f"{V1}/shared-knowledge-bases/{{kb_id}}"]["delete"]
    assert decline["x-scope"] == "admin" and "share_not_found" in decline["responses"]["404"]["description"]
