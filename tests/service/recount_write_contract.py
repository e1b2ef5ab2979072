"""The recount's write (`update_fields(..., storage_size=, within_quota=False)`): bytes stored already are
counted whatever the quota, the row's size and the usage in one write as any counted write. Asserted on the
in-memory fakes (tests/service) and on DynamoDB (tests/e2e, moto)."""

from __future__ import annotations

from chalicelib.ports import KnowledgeRepo, TenantRepo

from .counted_update_contract import _row, _state


class RecountWriteContract:
    def test_a_recount_counts_past_the_quota_and_only_from_the_size_read(
        self, knowledge: KnowledgeRepo, tenants: TenantRepo
    ) -> None:
        written = _row(knowledge, tenants, quota=500, used=450, size=100)
        counted = knowledge.update_fields(
            written.id, {}, expect={"storage_size": 100}, storage_size=900, within_quota=False
        )
        assert counted is not None and counted.storage_size == 900
        assert _state(knowledge, tenants, written) == (900, 1250)  # past the quota: stored already
        # the same recount again finds the size moved: nothing counted twice
        again = knowledge.update_fields(
            written.id, {}, expect={"storage_size": 100}, storage_size=900, within_quota=False
        )
        assert again is None and _state(knowledge, tenants, written) == (900, 1250)
        back = knowledge.update_fields(
            written.id, {}, expect={"storage_size": 900}, storage_size=300, within_quota=False
        )
        assert back is not None and _state(knowledge, tenants, written) == (300, 650)
