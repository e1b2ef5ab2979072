"""Issue 24, fairness between tenants (spec row 43): one tenant's backlog must not hold everyone's documents
first in, first out. Tenant A queues 200 documents, tenant B's one small document completes before A's
backlog is a quarter done: A has at most `tenant_pipeline_cap` documents in the pipeline, the rest wait
their turn behind B's."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge
from chalicelib.local.runtime import LocalRuntime
from chalicelib.stages import chunking

from .conftest import Api


def test_a_small_document_is_not_stuck_behind_another_tenants_backlog(
    api: Api, other_api: Api, runtime: LocalRuntime, services: Services
) -> None:
    services.replace_embedding_model(HashingEmbedding(32))
    services.settings = replace(services.settings, tenant_pipeline_cap=4, turn_wait_seconds=1)
    kb_a, kb_b = api.create_kb(), other_api.create_kb()
    backlog = [
        api.upload(kb_a["id"], f"note-{n}.md", f"# Note {n}\n\nTide table entry number {n}.\n".encode())
        for n in range(80)
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
    assert done_a < 20, f"{done_a} of tenant A's 80 documents completed before tenant B's one"
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


def _three_at_a_one_place_door(api: Api, runtime: LocalRuntime, services: Services) -> list[dict[str, Any]]:
    """One place per tenant and a backstop longer than the test, so a waiter comes in only when woken; the
    docreader alone reads all three messages first, so two of them wait while the first is in the pipeline."""
    services.replace_embedding_model(HashingEmbedding(32))
    services.settings = replace(
        services.settings, tenant_pipeline_cap=1, turn_wait_seconds=1, turn_backstop_seconds=900
    )
    kb = api.create_kb()
    rows = [
        api.upload(kb["id"], f"w{n}.md", f"# W{n}\n\nWaiting entry {n}.\n".encode()).json_body["data"]
        for n in range(3)
    ]
    docreader = runtime.poller("DocreaderStage")
    for _ in range(3):
        docreader.poll_once(wait_time_seconds=0)
    door = services.tenants.pipeline_door(rows[0]["tenant_id"])
    assert len(door.places) == 1 and len(door.waiters) == 2
    return rows


def _settled(api: Api, runtime: LocalRuntime, rows: list[dict[str, Any]]) -> list[str]:
    """Polls until every row is completed or failed (not `drain`: the waiters' backstops stay delayed)."""
    for _ in range(500):
        states = [api.knowledge(r["id"])["parse_status"] for r in rows]
        if set(states) <= {"completed", "failed"}:
            return states
        runtime.poll_once()
    return states


def test_an_indexed_document_wakes_the_next_waiter_of_its_tenant(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    # the embedding stage gives the place back and sends the waiter's message: its role must allow that
    # (the runtime fixture checks every call against the packaged roles)
    rows = _three_at_a_one_place_door(api, runtime, services)
    assert _settled(api, runtime, rows) == ["completed"] * 3


def test_a_document_failed_in_chunking_wakes_the_next_waiter_of_its_tenant(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_build = chunking.build_chunks

    def no_chunks_for_the_first(knowledge: Knowledge, markdown: str, config: Any) -> Any:
        return ([], {}) if knowledge.file_name == "w0.md" else real_build(knowledge, markdown, config)

    monkeypatch.setattr(chunking, "build_chunks", no_chunks_for_the_first)
    rows = _three_at_a_one_place_door(api, runtime, services)
    assert _settled(api, runtime, rows) == ["failed", "completed", "completed"]
