"""The resource catalog's contract, run on the in-memory fake (tests/service) and on DynamoDB (tests/e2e)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.resources import AccessGrant, Resource, resource_id_for, token_hash
from chalicelib.ports import ResourceCatalog


def _now() -> datetime:
    return from_iso(to_iso(datetime.now(UTC)))


def resource(owner: str, url: str = "", role: str = "original") -> Resource:
    url = url or f"s3://bucket/t/{owner}/{uuid.uuid4().hex}.pdf"
    return Resource(
        id=resource_id_for(url),
        url=url,
        tenant_id="tenant-a",
        owner_kind="knowledge",
        owner_id=owner,
        role=role,
        attempt=0,
        file_name="report.pdf",
        content_type="application/pdf",
        size=1234,
        created_at=_now(),
    )


class ResourceContract:
    def test_register_is_idempotent_and_keeps_the_first(self, catalog: ResourceCatalog) -> None:
        owner = str(uuid.uuid4())
        first = resource(owner)
        assert catalog.register(first) == first
        again = catalog.register(replace(first, file_name="other.pdf", size=1))  # a redelivery
        assert again == first
        assert catalog.get(first.id) == first
        assert catalog.owned_by(owner) == [first]
        assert catalog.get(resource_id_for("s3://bucket/never")) is None

    def test_mark_deleted_is_idempotent_and_keeps_the_first_time(self, catalog: ResourceCatalog) -> None:
        owner = str(uuid.uuid4())
        one, other = resource(owner), resource(owner, role="parsed")
        catalog.register(one)
        catalog.register(other)
        at = _now()
        catalog.mark_deleted(one.id, at)
        catalog.mark_deleted(one.id, at + timedelta(seconds=5))
        catalog.mark_deleted(resource_id_for("s3://bucket/missing"), at)  # a missing one: no error
        stored = catalog.get(one.id)
        assert stored is not None and stored.deleted and stored.deleted_at == at
        assert catalog.get(missing := resource_id_for("s3://bucket/missing")) is None, missing
        assert {r.id: r.deleted for r in catalog.owned_by(owner)} == {one.id: True, other.id: False}
        # registering a deleted resource again does not bring it back; restoring it does, once
        assert catalog.register(replace(one, deleted_at=None)).deleted
        catalog.restore(one.id)
        catalog.restore(one.id)
        catalog.restore(resource_id_for("s3://bucket/missing"))  # a missing one: no error, not made
        assert catalog.get(one.id) == one and catalog.get(resource_id_for("s3://bucket/missing")) is None

    def test_grants_are_found_by_their_hash_only(self, catalog: ResourceCatalog) -> None:
        owner = str(uuid.uuid4())
        res = catalog.register(resource(owner))
        token = uuid.uuid4().hex
        grant = AccessGrant(
            token_hash=token_hash(token),
            resource_id=res.id,
            tenant_id=res.tenant_id,
            purpose="download",
            created_at=_now(),
            expires_at=_now() + timedelta(seconds=60),
        )
        catalog.put_grant(grant)
        assert catalog.get_grant(token_hash(token)) == grant
        assert catalog.get_grant(token_hash(token + "x")) is None
        assert catalog.owned_by(owner) == [res]  # a grant is no resource of the owner
        assert catalog.get(f"grant#{token_hash(token)}") is None

    def test_get_many_answers_the_resources_found_deleted_ones_too_never_a_grant(
        self, catalog: ResourceCatalog
    ) -> None:
        owner = str(uuid.uuid4())
        live, gone = catalog.register(resource(owner)), catalog.register(resource(owner, role="parsed"))
        catalog.mark_deleted(gone.id, _now())
        token = uuid.uuid4().hex
        catalog.put_grant(
            AccessGrant(
                token_hash(token), live.id, live.tenant_id, "download", _now(), _now() + timedelta(seconds=60)
            )
        )
        missing = resource_id_for(f"s3://bucket/{uuid.uuid4().hex}")
        found = catalog.get_many([live.id, gone.id, live.id, missing, f"grant#{token_hash(token)}"])
        assert found == {live.id: live, gone.id: catalog.get(gone.id)}
        assert found[gone.id].deleted
        assert catalog.get_many([]) == {}
