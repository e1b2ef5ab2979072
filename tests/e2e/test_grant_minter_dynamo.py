"""A grant's minter (tenant and API key) round-trips through the resources table (moto), and a grant stored
without one (written before minters were recorded) reads back as having none."""

from __future__ import annotations

import uuid
from datetime import timedelta

from service.resource_contract import _now, resource

from chalicelib.bootstrap import Services
from chalicelib.domain.resources import AccessGrant, token_hash


def test_a_grant_keeps_its_minter_and_an_older_one_has_none(module_services: Services) -> None:
    from chalicelib.domain.resources import GrantMinter  # absent before minters were recorded

    catalog = module_services.resources
    res = catalog.register(resource(str(uuid.uuid4())))
    expires = _now() + timedelta(seconds=900)
    minted, older = token_hash(uuid.uuid4().hex), token_hash(uuid.uuid4().hex)
    minter = GrantMinter("tenant-b", "ab" * 32)
    catalog.put_grant(AccessGrant(minted, res.id, res.tenant_id, "download", _now(), expires, minter))
    catalog.put_grant(AccessGrant(older, res.id, res.tenant_id, "download", _now(), expires))
    found, found_older = catalog.get_grant(minted), catalog.get_grant(older)
    assert found is not None and found.minted_by == minter
    assert found_older is not None and found_older.minted_by is None
