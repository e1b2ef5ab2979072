"""A tenant blocks an owner tenant (POST /shared-knowledge-bases/blocked-tenants): every share of that
owner's knowledge bases with it is removed in one call and the owner's next shares answer the 404 an
unknown tenant gets (tenant_not_found), so an owner cannot keep a recipient's share cap full by sharing
again after each decline. Listed (GET), unblocked (DELETE .../{tenant_id}); an admin key on the whole
tenant. Through the API on the in-memory adapters, and the ShareRepo contract on the fake."""

from __future__ import annotations

from dataclasses import replace

import pytest
from chalice.test import Client

from chalicelib.adapters.memory import MemoryShareRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.operations import shares as share_ops
from chalicelib.ports import ShareRepo

from .share_block_contract import ShareBlockContract
from .test_kb_listing_caps import Caller, _caller

BLOCKED = "/shared-knowledge-bases/blocked-tenants"


class TestMemoryShareBlocks(ShareBlockContract):
    @pytest.fixture
    def shares(self) -> ShareRepo:
        return MemoryShareRepo()


@pytest.fixture
def owner(deps: Services, client: Client) -> Caller:
    return _caller(deps, client, "owner")


@pytest.fixture
def reader(deps: Services, client: Client) -> Caller:
    return _caller(deps, client, "reader")


def _shared_ids(caller: Caller) -> list[str]:
    return [
        kb["id"] for kb in caller.ok("GET", "/knowledge-bases")["data"] if kb["tenant_id"] != caller.tenant.id
    ]


def test_an_owner_cannot_keep_a_recipients_share_cap_full(
    deps: Services, client: Client, owner: Caller, reader: Caller
) -> None:
    """The reviewer's case: a decline frees a place the owner takes again at once; a block frees them all
    for good, and another owner's share gets in."""
    deps.settings = replace(deps.settings, max_shares_per_tenant=2)
    spam = [owner.new_kb(f"spam {n}") for n in range(2)]
    for kb_id in spam:
        assert owner.share(kb_id, reader).status_code == 201
    friend = _caller(deps, client, "friend")
    wanted = friend.new_kb("wanted")
    assert friend.share(wanted, reader).status_code == 409
    reader.ok("DELETE", f"/shared-knowledge-bases/{spam[0]}")
    assert owner.share(spam[0], reader).status_code == 201  # a decline alone: the owner fills it again
    blocked = reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})["data"]
    assert blocked == {"tenant_id": owner.tenant.id, "blocked": True, "removed_kb_ids": sorted(spam)}
    assert _shared_ids(reader) == []
    for kb_id in spam:
        assert owner.ok("GET", f"/knowledge-bases/{kb_id}/shares")["data"]["tenant_ids"] == []
        assert reader.send("GET", f"/knowledge-bases/{kb_id}").status_code == 404
    assert friend.share(wanted, reader).status_code == 201
    assert _shared_ids(reader) == [wanted]


def test_a_blocked_owner_gets_the_answer_an_unknown_tenant_gets(owner: Caller, reader: Caller) -> None:
    kb_id = owner.new_kb("refused")
    reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})
    refused = owner.share(kb_id, reader)
    unknown = owner.send("POST", f"/knowledge-bases/{kb_id}/shares", {"tenant_id": "no-such-tenant"})
    assert refused.status_code == unknown.status_code == 404
    assert refused.json_body["error"]["code"] == unknown.json_body["error"]["code"] == "tenant_not_found"
    assert refused.json_body["error"]["message"] == f"tenant {reader.tenant.id} not found"
    assert set(refused.json_body) == set(unknown.json_body)
    assert owner.ok("GET", f"/knowledge-bases/{kb_id}/shares")["data"]["tenant_ids"] == []
    # the blocked owner's other routes say nothing either: its unshare is the one of a share never made
    gone = owner.send("DELETE", f"/knowledge-bases/{kb_id}/shares/{reader.tenant.id}")
    assert (gone.status_code, gone.json_body["error"]["code"]) == (404, "share_not_found")


def test_block_is_idempotent_listed_and_undone(
    owner: Caller, reader: Caller, deps: Services, client: Client
) -> None:
    other = _caller(deps, client, "other")
    assert reader.ok("GET", BLOCKED)["data"] == {"tenant_ids": [], "limit": share_ops.MAX_BLOCKED_TENANTS}
    first = reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})["data"]
    again = reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})["data"]
    assert first == again == {"tenant_id": owner.tenant.id, "blocked": True, "removed_kb_ids": []}
    reader.ok("POST", BLOCKED, {"tenant_id": other.tenant.id})
    assert reader.ok("GET", BLOCKED)["data"]["tenant_ids"] == sorted([owner.tenant.id, other.tenant.id])
    kb_id = owner.new_kb("later")
    assert owner.share(kb_id, reader).status_code == 404
    unblocked = reader.ok("DELETE", f"{BLOCKED}/{owner.tenant.id}")["data"]
    assert unblocked == {"tenant_id": owner.tenant.id, "blocked": False}
    missing = reader.send("DELETE", f"{BLOCKED}/{owner.tenant.id}")
    assert (missing.status_code, missing.json_body["error"]["code"]) == (404, "block_not_found")
    assert reader.ok("GET", BLOCKED)["data"]["tenant_ids"] == [other.tenant.id]
    assert owner.share(kb_id, reader).status_code == 201
    assert _shared_ids(reader) == [kb_id]
    # the owner's own tenants' blocks are its own: the owner sees none of the reader's
    assert owner.ok("GET", BLOCKED)["data"]["tenant_ids"] == []


def test_block_refusals(
    owner: Caller, reader: Caller, deps: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    def code(answer: object) -> tuple[int, str]:
        return answer.status_code, answer.json_body["error"]["code"]  # type: ignore[attr-defined]

    assert code(reader.send("POST", BLOCKED, {"tenant_id": reader.tenant.id})) == (400, "block_self")
    assert code(reader.send("POST", BLOCKED, {"tenant_id": "no-such-tenant"})) == (404, "tenant_not_found")
    assert code(reader.send("POST", BLOCKED, {"tenant_id": "a b"})) == (400, "invalid_tenant_id")
    assert code(reader.send("POST", BLOCKED, {})) == (400, "invalid_tenant_id")
    monkeypatch.setattr(share_ops, "MAX_BLOCKED_TENANTS", 1)
    other = _caller(deps, reader.client, "other")
    reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})
    assert code(reader.send("POST", BLOCKED, {"tenant_id": other.tenant.id})) == (409, "block_limit_reached")
    reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})  # one it blocks: still fine at the limit
    # a write key is below the route's scope; an admin key limited to some knowledge bases acts on no tenant
    for scope, kb_ids, expected in (
        (Scope.WRITE, None, (403, "insufficient_scope")),
        (Scope.ADMIN, (reader.new_kb("mine"),), (403, "kb_limited_key")),
    ):
        record, secret = ApiKey.issue(reader.tenant.id, "probe", scope, kb_ids)
        deps.api_keys.put(record)
        limited = Caller(reader.client, reader.tenant, secret)
        assert code(limited.send("POST", BLOCKED, {"tenant_id": other.tenant.id})) == expected
        assert code(limited.send("GET", BLOCKED)) == expected
        assert code(limited.send("DELETE", f"{BLOCKED}/{owner.tenant.id}")) == expected
    assert reader.ok("GET", BLOCKED)["data"]["tenant_ids"] == [owner.tenant.id]


def test_a_share_left_by_an_add_cut_short_as_the_block_landed_ends_on_the_owners_retry(
    deps: Services, owner: Caller, reader: Caller
) -> None:
    """At least once: an add that died after writing its share but before its last check, while the block
    came, leaves a share; it is out of the recipient's listing, and the owner's retry (refused) removes it."""
    kb_id = owner.new_kb("half")
    reader.ok("POST", BLOCKED, {"tenant_id": owner.tenant.id})
    repo = deps.shares
    assert isinstance(repo, MemoryShareRepo)
    repo._rows[kb_id] = (owner.tenant.id, {reader.tenant.id})  # what the cut-short add wrote
    repo._reverse.setdefault(reader.tenant.id, set()).add(kb_id)
    assert _shared_ids(reader) == []
    assert owner.share(kb_id, reader).status_code == 404
    assert repo.tenants_of(kb_id) == []
    assert reader.send("GET", f"/knowledge-bases/{kb_id}").status_code == 404


def test_the_openapi_document_says_so(client: Client) -> None:
    document = client.http.get("/api/v1/openapi.json").json_body
    path = document["paths"]["/api/v1/shared-knowledge-bases/blocked-tenants"]
    assert path["post"]["x-scope"] == path["get"]["x-scope"] == "admin"
    assert "block_limit_reached" in path["post"]["responses"]["409"]["description"]
    assert "tenant_not_found" in path["post"]["responses"]["404"]["description"]
    unblock = document["paths"]["/api/v1/shared-knowledge-bases/blocked-tenants/{tenant_id}"]["delete"]
    assert unblock["x-scope"] == "admin" and "block_not_found" in unblock["responses"]["404"]["description"]
