"""Blocks on the DynamoDB adapter (the tenants table on moto): the ShareRepo block contract, a block that
lands while a share is being added (the share never survives it), and the routes end to end."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from chalice.test import Client
from service.share_block_contract import ShareBlockContract

from chalicelib.adapters.dynamo.tenants import DynamoShareRepo
from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import ShareRepo
from e2e.conftest import V1, Api

BLOCKED = "/shared-knowledge-bases/blocked-tenants"


class TestDynamoShareBlocks(ShareBlockContract):
    @pytest.fixture
    def shares(self, module_services: Services) -> ShareRepo:
        return module_services.shares


def _new_id() -> str:
    return str(uuid.uuid4())


def _block_before(
    repo: DynamoShareRepo, step: str, reader: str, owner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The block lands just before the add's `step` (its first write `_list`, or its last `_relist`)."""
    original: Callable[..., Any] = getattr(repo, step)
    landed: list[list[str] | None] = []

    def block_first(*args: Any) -> Any:
        if not landed:
            landed.append(repo.block(reader, owner))
        return original(*args)

    monkeypatch.setattr(repo, step, block_first)


@pytest.mark.parametrize("step", ["_list", "_relist"])
def test_a_block_landing_while_a_share_is_added_leaves_no_share(
    module_services: Services, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """Before the add's first write, the add is refused; between its share item's write and its last one,
    the block's read may miss the share (before) or remove it (after): either way the add undoes it and
    answers False, and nothing is shared."""
    repo = module_services.shares
    assert isinstance(repo, DynamoShareRepo)
    owner, reader, kb_id = _new_id(), _new_id(), _new_id()
    _block_before(repo, step, reader, owner, monkeypatch)
    assert repo.add(owner, kb_id, reader, cap=5) is False
    monkeypatch.undo()
    assert repo.tenants_of(kb_id) == []
    assert repo.shared_with(reader) == []
    assert repo.blocked(reader) == [owner]


def test_a_block_that_read_the_reverse_entry_before_the_share_item_was_written(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The narrowest order: the add's reverse entry is written, the block is written and reads the share
    item before the add writes it (the block removes nothing), then the add writes its share item: its
    last write is refused and it undoes the share."""
    repo = module_services.shares
    assert isinstance(repo, DynamoShareRepo)
    owner, reader, kb_id = _new_id(), _new_id(), _new_id()
    listed: Callable[..., bool] = repo._list
    removed: list[list[str] | None] = []

    def list_then_block(*args: Any) -> bool:
        done = listed(*args)
        removed.append(repo.block(reader, owner))
        return done

    monkeypatch.setattr(repo, "_list", list_then_block)
    assert repo.add(owner, kb_id, reader) is False
    monkeypatch.undo()
    assert removed == [[]]  # the block found no share item listing the reader yet
    assert repo.tenants_of(kb_id) == [] and repo.shared_with(reader) == []


def test_blocks_end_to_end(client: Client, services: Services) -> None:
    """Through the Chalice test client on moto: a block removes the owner's shares in one call, refuses the
    next share as for an unknown tenant, is listed, and an unblock lets the owner share again."""
    owner_tenant, owner_key = create_tenant_with_key(services, "owner")
    reader_tenant, reader_key = create_tenant_with_key(services, "reader")
    owner, reader, owner_id = Api(client, owner_key), Api(client, reader_key), owner_tenant.id
    kbs = [owner.create_kb()["id"] for _ in range(3)]
    for kb_id in kbs:
        shared = owner.post(f"/knowledge-bases/{kb_id}/shares", {"tenant_id": reader_tenant.id})
        assert shared.status_code == 201, shared.json_body
    listed = reader.get("/knowledge-bases").json_body["data"]
    assert sorted(kb["id"] for kb in listed if kb["tenant_id"] == owner_id) == sorted(kbs)

    blocked = reader.post(BLOCKED, {"tenant_id": owner_id})
    assert blocked.status_code == 200, blocked.json_body
    assert blocked.json_body["data"] == {
        "tenant_id": owner_id,
        "blocked": True,
        "removed_kb_ids": sorted(kbs),
    }
    assert [
        kb for kb in reader.get("/knowledge-bases").json_body["data"] if kb["tenant_id"] == owner_id
    ] == []
    assert reader.get(f"/knowledge-bases/{kbs[0]}").status_code == 404
    refused = owner.post(f"/knowledge-bases/{kbs[0]}/shares", {"tenant_id": reader_tenant.id})
    assert (refused.status_code, refused.json_body["error"]["code"]) == (404, "tenant_not_found")
    assert reader.post(BLOCKED, {"tenant_id": owner_id}).json_body["data"]["removed_kb_ids"] == []
    assert reader.get(BLOCKED).json_body["data"]["tenant_ids"] == [owner_id]

    unblocked = client.http.delete(f"{V1}{BLOCKED}/{owner_id}", headers={"X-API-Key": reader_key})
    assert unblocked.status_code == 200, unblocked.json_body
    assert reader.get(BLOCKED).json_body["data"]["tenant_ids"] == []
    again = owner.post(f"/knowledge-bases/{kbs[0]}/shares", {"tenant_id": reader_tenant.id})
    assert again.status_code == 201, again.json_body
    assert reader.get(f"/knowledge-bases/{kbs[0]}").status_code == 200
