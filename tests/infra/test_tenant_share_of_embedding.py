"""A tenant's documents and fanned-out slices together hold at most its pipeline places
(`services/fairness.chains_for_fan_out`), so the cap must stay below the embedding stage's concurrency:
then one tenant never takes every slot of it."""

from __future__ import annotations

from chalicelib.settings import Settings, load_settings

from .test_fanout_parameters import embedding_concurrency


def test_a_tenant_s_pipeline_cap_stays_below_the_embedding_stage_s_concurrency() -> None:
    assert (
        0 < Settings().tenant_pipeline_cap == load_settings({}).tenant_pipeline_cap < embedding_concurrency()
    )
