"""The auto-tag message has no task token (it is outside the state machine's count), so nothing dropped a
duplicate: SQS's second delivery, or a planner retried after it queued the message, asked the chat model
again (paid) and wrote the auto-tag span over the first run's outputs. The tag is claimed once per attempt
on the row; a claim left by a worker that died is taken over after a bound."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, CreateTagRequest
from chalicelib.domain.clock import iso_before
from chalicelib.domain.types import Knowledge, ParseStatus, Tenant

from .conftest import drain, failed_ids, stage_handler, task_body, upload

SPAN = "postprocess.auto_tag"


@pytest.fixture
def llm(deps: Services) -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as scripted:
        use_models(deps, scripted)
        yield scripted


def planned(deps: Services, tenant: Tenant, tag_name: str, skip_if_tagged: bool) -> Knowledge:
    """A document through its plan: the auto-tag message is queued, the row finalizing."""
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.tags import create_tag

    enrichment = {"auto_tag_enabled": True, "auto_tag_skip_if_tagged": skip_if_tagged}
    kb = create_kb(
        deps, tenant.id, CreateKnowledgeBase(name="a", summary_model_id=CHAT, enrichment=enrichment)
    )
    create_tag(deps, tenant.id, kb.id, CreateTagRequest(name=tag_name))
    knowledge = upload(deps, kb)
    drain(deps)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("postprocess", task_body(knowledge, "plan"))
    queue.deliver("postprocess", stage_handler("postprocess"), deps)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.FINALIZING
    return row


def auto_tag_body(queue: MemoryTaskQueue) -> dict[str, Any]:
    [body] = [b for b in queue.bodies("enrichment") if b["subtask"]["kind"] == "auto_tag"]
    return dict(body)


def deliver_enrichment(deps: Services) -> list[str]:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    failures: list[str] = []
    while queue.waiting("enrichment"):
        failures += failed_ids(queue.deliver("enrichment", stage_handler("enrichment"), deps))
    return failures


def run_the_plan(deps: Services, workflow: MemoryWorkflow, knowledge: Knowledge) -> None:
    """The state machine's part: every planned subtask with its token, until the row completes."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    [plan] = workflow.answers_to("plan")
    for n, subtask in enumerate(plan.output["subtasks"]):
        queue.send_raw("enrichment", task_body(knowledge, f"sub{n}", subtask=subtask))
    assert deliver_enrichment(deps) == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED


def span_outputs(deps: Services, knowledge: Knowledge) -> dict[str, Any]:
    span = deps.spans.get(knowledge.id, knowledge.attempt, SPAN)
    assert span is not None
    return dict(span.outputs)


@pytest.mark.parametrize("tag_name,skip_if_tagged", [("Zebra", True), ("Lighthouses", False)])
@pytest.mark.parametrize("when", ["back_to_back", "after_the_end"])
def test_a_duplicate_auto_tag_asks_the_model_once_and_keeps_the_first_span(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ScriptedLLM,
    tag_name: str,
    skip_if_tagged: bool,
    when: str,
) -> None:
    """A tag the model does not choose (Zebra) leaves the document untagged, so `skip_if_tagged` did not stop
    the copy; one it chooses (Lighthouses) with the skip off did not either."""
    knowledge = planned(deps, tenant, tag_name, skip_if_tagged)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    body = auto_tag_body(queue)
    if when == "back_to_back":
        queue.send_raw("enrichment", body)  # SQS delivers it twice
        assert deliver_enrichment(deps) == []
        first = span_outputs(deps, knowledge)
        run_the_plan(deps, workflow, knowledge)
    else:
        assert deliver_enrichment(deps) == []
        run_the_plan(deps, workflow, knowledge)
        first = span_outputs(deps, knowledge)
        queue.send_raw("enrichment", body)
        assert deliver_enrichment(deps) == []
    assert llm.kinds().count("tags") == 1
    assert span_outputs(deps, knowledge) == first
    assert "tags" in first  # the first run's outputs, not a copy's reason


def test_a_claim_older_than_the_bound_is_taken_over(deps: Services, tenant: Tenant, llm: ScriptedLLM) -> None:
    """The worker that claimed the tag died (the row holds its claim, never finished): a copy within the
    bound leaves it to that worker, a copy after the bound tags the document."""
    from chalicelib.stages import enrichment

    knowledge = planned(deps, tenant, "Lighthouses", False)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    body = auto_tag_body(queue)
    queue.purge("enrichment")
    held = {"attempt": knowledge.attempt, "claimed_at": iso_before(10)}
    rows.write_fields(knowledge.id, enrichment={**knowledge.enrichment, enrichment.AUTO_TAG_CLAIM: held})
    queue.send_raw("enrichment", body)
    assert failed_ids(queue.deliver("enrichment", stage_handler("enrichment"), deps)) == []
    assert llm.kinds().count("tags") == 0
    assert deps.spans.get(knowledge.id, knowledge.attempt, SPAN) is None
    # it comes back once the claim would be stale: a holder that died without giving it back is replaced
    [again] = queue.waiting("enrichment")
    assert again.json() == body and 340 <= again.delay_seconds <= enrichment.STALE_AUTO_TAG_SECONDS
    queue.purge("enrichment")

    stale = {**held, "claimed_at": iso_before(enrichment.STALE_AUTO_TAG_SECONDS + 1)}
    rows.write_fields(knowledge.id, enrichment={**knowledge.enrichment, enrichment.AUTO_TAG_CLAIM: stale})
    queue.send_raw("enrichment", body)
    assert deliver_enrichment(deps) == []
    assert llm.kinds().count("tags") == 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and len(row.tag_ids) == 1
    assert span_outputs(deps, knowledge)["tags"] == 1

    queue.send_raw("enrichment", body)  # finished now: a later copy does nothing
    assert deliver_enrichment(deps) == []
    assert llm.kinds().count("tags") == 1


def test_an_auto_tag_before_the_plan_is_settled_comes_back(
    deps: Services, tenant: Tenant, llm: ScriptedLLM
) -> None:
    """Queued just before the plan is written over the row's `enrichment` map (which holds the claim): it
    neither claims nor asks the model while the row is processing, and is retried, not dropped."""
    knowledge = planned(deps, tenant, "Lighthouses", False)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    rows.write_fields(knowledge.id, parse_status=ParseStatus.PROCESSING)
    assert failed_ids(queue.deliver("enrichment", stage_handler("enrichment"), deps))
    assert llm.kinds().count("tags") == 0
    assert queue.bodies("enrichment")  # back on the queue
    rows.write_fields(knowledge.id, parse_status=ParseStatus.FINALIZING)
    assert deliver_enrichment(deps) == []
    assert llm.kinds().count("tags") == 1


def test_the_auto_tagger_stops_at_a_documents_tag_limit(
    deps: Services, tenant: Tenant, llm: ScriptedLLM
) -> None:
    """A document holding MAX_TAGS_PER_DOCUMENT tags gets no more from the model: past the bound a request is
    held to, its own tags could not be sent back in an edit (a 400)."""
    from chalicelib.domain.tags import MAX_TAGS_PER_DOCUMENT

    knowledge = planned(deps, tenant, "Lighthouses", False)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    full = [f"manual-{n}" for n in range(MAX_TAGS_PER_DOCUMENT)]
    rows.write_fields(knowledge.id, tag_ids=full)
    assert deliver_enrichment(deps) == []
    assert llm.kinds().count("tags") == 1  # the model chose Lighthouses
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.tag_ids == full
    assert span_outputs(deps, knowledge)["tags"] == 0
