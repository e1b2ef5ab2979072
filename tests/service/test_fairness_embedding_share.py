"""Past the door, one tenant's big documents cannot take every slot of the embedding stage (audit q10): a
fanned-out document runs one chain of slices per place it holds in its tenant's pipeline, so the tenant's
slices and documents together stay within its cap, below the stage's concurrency."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import Knowledge, KnowledgeBase
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key

from .conftest import upload
from .test_fairness_past_the_door import deliver_one, pump

CAP = 8
PARA = (
    "Paragraph {i} of document {d}: the keeper logs the weather at dawn and dusk and trims the wick at noon. "
    * 6
)


def big(deps: Services, kb: KnowledgeBase, d: int) -> Knowledge:
    text = "\n\n".join(f"## S{i}\n\n" + PARA.format(i=i, d=d) for i in range(30))
    return upload(deps, kb, f"a{d}.md", f"# A{d}\n\n{text}".encode())


def small(deps: Services, kb: KnowledgeBase, name: str) -> Knowledge:
    return upload(deps, kb, f"{name}.md", f"# {name}\n\nA short document called {name}.\n".encode())


def new_kb(deps: Services, name: str) -> KnowledgeBase:
    tenant, _ = create_tenant_with_key(deps, name)
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name))


def fan_out_settings(deps: Services) -> None:
    deps.settings = replace(
        deps.settings, embed_fanout_texts=2, embed_fanout_parallel=5, tenant_pipeline_cap=CAP
    )


def slices_waiting(queue: MemoryTaskQueue, knowledge: Knowledge) -> int:
    return sum(1 for m in queue.waiting("embedding") if m.json()["knowledge_id"] == knowledge.id)


def test_one_tenants_big_documents_hold_at_most_its_cap_of_the_embedding_stage(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    fan_out_settings(deps)
    kb_a, kb_b = new_kb(deps, "big"), new_kb(deps, "small")
    docs = [big(deps, kb_a, d) for d in range(CAP)]
    for doc in docs:  # the tenant fills its places
        deliver_one(deps, queue, "docreader", doc)
    for doc in docs:
        deliver_one(deps, queue, "chunking", doc)
        deliver_one(deps, queue, "embedding", doc)  # plans its slices
    other = small(deps, kb_b, "other")
    deliver_one(deps, queue, "docreader", other)
    deliver_one(deps, queue, "chunking", other)

    waiting = [m.json()["knowledge_id"] for m in queue.waiting("embedding")]
    ahead = waiting.index(other.id)
    assert ahead <= CAP, f"{ahead} messages of one tenant ahead of another's document"
    assert len(deps.tenants.pipeline_door(kb_a.tenant_id).places) == CAP


def test_documents_that_come_after_a_fan_out_wait_for_the_places_its_slices_hold(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    fan_out_settings(deps)
    kb = new_kb(deps, "one-by-one")
    docs = [big(deps, kb, d) for d in range(CAP)]
    for doc in docs:  # each gets as far as it can before the next comes
        for stage in ("docreader", "chunking", "embedding"):
            if any(m.json()["knowledge_id"] == doc.id for m in queue.waiting(stage)):
                deliver_one(deps, queue, stage, doc)
    due = [m for m in queue.waiting("embedding") if not m.delay_seconds]
    assert 0 < len(due) <= CAP
    assert len(deps.tenants.pipeline_door(kb.tenant_id).places) == CAP


def test_a_lone_big_document_runs_its_slices_in_parallel_and_gives_every_place_back(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    fan_out_settings(deps)
    kb = new_kb(deps, "alone")
    doc = big(deps, kb, 0)
    deliver_one(deps, queue, "docreader", doc)
    deliver_one(deps, queue, "chunking", doc)
    deliver_one(deps, queue, "embedding", doc)
    assert slices_waiting(queue, doc) == 5  # free places: the whole parallelism
    assert len(deps.tenants.pipeline_door(kb.tenant_id).places) == 5
    # the document's own lease is the one the door reads as its place
    held = deps.tenants.pipeline_door(kb.tenant_id).place_of(doc.id)
    assert held is not None and held.ticket == ""

    pump(deps, queue)

    row = deps.knowledge.get(doc.id)
    assert row is not None and row.processed_at is not None
    assert deps.tenants.pipeline_door(kb.tenant_id).places == frozenset()


def test_a_big_document_among_its_tenants_others_takes_only_the_free_places(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    fan_out_settings(deps)
    kb = new_kb(deps, "busy")
    docs = [big(deps, kb, 0)] + [small(deps, kb, f"s{d}") for d in range(CAP - 3)]
    for doc in docs:
        deliver_one(deps, queue, "docreader", doc)
    deliver_one(deps, queue, "chunking", docs[0])
    deliver_one(deps, queue, "embedding", docs[0])

    assert slices_waiting(queue, docs[0]) == 3  # its own place and the two free ones
    later = small(deps, kb, "later")
    deliver_one(deps, queue, "docreader", later)  # the tenant's places are all taken: it waits
    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(later.id) is None
    pump(deps, queue)
    row = deps.knowledge.get(later.id)
    assert row is not None and row.processed_at is not None
    assert deps.tenants.pipeline_door(kb.tenant_id).places == frozenset()
