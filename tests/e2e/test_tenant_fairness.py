"""Issue 24, fairness between tenants (spec row 43): one tenant's backlog must not hold everyone's documents
first in, first out. Tenant A queues 200 documents, tenant B's one small document completes before A's
backlog is a quarter done: A has at most `tenant_pipeline_cap` documents in the pipeline, the rest wait
their turn behind B's."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api


def test_a_small_document_is_not_stuck_behind_another_tenants_backlog(
    api: Api, other_api: Api, runtime: LocalRuntime, services: Services
) -> None:
    services.replace_embedding_model(HashingEmbedding(32))
    services.settings = replace(services.settings, tenant_pipeline_cap=4, turn_wait_seconds=1)
    kb_a, kb_b = api.create_kb(), other_api.create_kb()
    backlog = [
        api.upload(kb_a["id"], f"note-{n}.md", f"# Note {n}\n\nTide table entry number {n}.\n".encode())
        for n in range(200)
    ]
    assert all(r.status_code == 200 for r in backlog)
    small = other_api.upload(
        kb_b["id"], "small.md", b"# Small\n\nA short note about the harbour.\n"
    ).json_body["data"]
    for _ in range(2000):
        runtime.poll_once()
        if other_api.knowledge(small["id"])["parse_status"] == "completed":
            break
    assert other_api.knowledge(small["id"])["parse_status"] == "completed"
    done_a = sum(
        1
        for r in backlog
        if services.knowledge.get(r.json_body["data"]["id"]).parse_status.value == "completed"  # type: ignore[union-attr]
    )
    assert done_a < 50, f"{done_a} of tenant A's 200 documents completed before tenant B's one"
    # the rest of A's backlog waits its turn, nothing lost: every document is queued or in the pipeline
    states = {services.knowledge.get(r.json_body["data"]["id"]).parse_status.value for r in backlog}  # type: ignore[union-attr]
    assert states <= {"pending", "processing", "finalizing", "completed"}


def test_a_tenant_alone_is_not_held_back_and_places_are_given_back(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    services.replace_embedding_model(HashingEmbedding(32))
    services.settings = replace(services.settings, tenant_pipeline_cap=2, turn_wait_seconds=1)
    kb = api.create_kb()
    rows = [
        api.upload(kb["id"], f"n{n}.md", f"# N{n}\n\nEntry {n}.\n".encode()).json_body["data"]
        for n in range(6)
    ]
    runtime.drain(timeout=180)
    assert all(api.knowledge(r["id"])["parse_status"] == "completed" for r in rows)
    tenant_id = rows[0]["tenant_id"]
    # every place was given back and nobody waits: the next documents go straight in
    door = services.tenants.pipeline_door(tenant_id)
    assert door.places == frozenset() and door.waiters == frozenset()
