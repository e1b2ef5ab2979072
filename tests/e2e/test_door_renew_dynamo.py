"""Renewing a pipeline place's lease on the DynamoDB tenants table (moto): the held member is replaced only
while the row lists it, so a renewal never takes back a place that was given back or struck."""

from __future__ import annotations

import uuid

from chalicelib.bootstrap import Services
from chalicelib.domain.door import Place


def test_a_place_is_renewed_only_while_its_row_lists_it(module_services: Services) -> None:
    tenants = module_services.tenants
    tenant_id = str(uuid.uuid4())
    held, renewed = Place("doc", 100.0, "t1"), Place("doc", 5000.0, "t1")
    assert tenants.take_pipeline_place(tenant_id, held.member, 1, frozenset(), "")
    assert tenants.renew_pipeline_place(tenant_id, held.member, renewed.member)
    assert tenants.pipeline_door(tenant_id).places == {renewed.member}
    tenants.strike_pipeline_entries(tenant_id, frozenset({renewed.member}), frozenset())
    assert not tenants.renew_pipeline_place(tenant_id, renewed.member, Place("doc", 9000.0, "t1").member)
    assert tenants.pipeline_door(tenant_id).places == frozenset()
