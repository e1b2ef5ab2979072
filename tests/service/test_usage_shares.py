"""`metered_shares`: a message that works for several documents stores one entry per document (its own counts
and an even part of what the invocation spent besides), or the knowledge base's own entry when it worked for
none; keyed by message id and receive count, as the stage runner keys its entries."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib.bootstrap import Services
from chalicelib.domain import metering
from chalicelib.domain.types import Knowledge, KnowledgeType
from chalicelib.services.usage import document_share, kb_usage_id, metered_shares

CONTEXT = SimpleNamespace(memory_limit_in_mb=1024)


def event(tries: int = 1, message_id: str = "m-1") -> dict[str, Any]:
    record = {"messageId": message_id, "body": "{}", "attributes": {"ApproximateReceiveCount": str(tries)}}
    return {"Records": [record]}


def doc(knowledge_id: str, attempt: int = 2) -> Knowledge:
    return Knowledge(id=knowledge_id, tenant_id="t-1", kb_id="kb-1", type=KnowledgeType.FILE, attempt=attempt)


def deliver(
    deps: Services, sqs_event: dict[str, Any], documents: list[Knowledge], kb_id: str = "kb-1"
) -> None:
    record = SQSRecord(sqs_event["Records"][0])
    with metered_shares(deps, "wiki", record, sqs_event, CONTEXT, kb_id=kb_id):
        metering.record(metering.SQS_REQUESTS, 4)  # work for no one document (a claim, a trigger)
        for n, knowledge in enumerate(documents, start=1):
            with document_share("wiki", knowledge):
                metering.record_tokens("chat/m", 100 * n, 10 * n)


def test_each_document_gets_its_own_counts_and_an_even_part_of_the_rest(deps: Services) -> None:
    deliver(deps, event(), [doc("k-1"), doc("k-2")])
    [first] = deps.usage.for_knowledge("k-1")
    [second] = deps.usage.for_knowledge("k-2")
    assert first.entry == "000002#wiki#m-1-1" and (first.kb_id, first.tenant_id) == ("kb-1", "t-1")
    assert first.counts[metering.token_counter("input", "chat/m")] == 100
    assert second.counts[metering.token_counter("output", "chat/m")] == 20
    # 4 SQS calls of the work and the batch's receive and delete (2), split in two; one Lambda request
    assert first.counts[metering.SQS_REQUESTS] == second.counts[metering.SQS_REQUESTS] == 3
    assert first.counts[metering.LAMBDA_REQUESTS] + second.counts[metering.LAMBDA_REQUESTS] == 1
    assert list(deps.usage.for_knowledge(kb_usage_id("kb-1"))) == []


def test_a_message_for_no_document_is_the_knowledge_bases_own(deps: Services) -> None:
    deliver(deps, event(), [])
    [own] = deps.usage.for_knowledge(kb_usage_id("kb-1"))
    assert own.entry == "000000#wiki#m-1-1" and own.kb_id == "kb-1"
    assert own.counts[metering.SQS_REQUESTS] == 6 and own.counts[metering.LAMBDA_REQUESTS] == 1


def test_without_a_knowledge_base_nothing_is_stored(deps: Services) -> None:
    deliver(deps, event(), [], kb_id="")
    assert list(deps.usage.for_kb("")) == []


def test_the_same_try_again_rewrites_its_entries_and_a_redelivery_adds_its_own(deps: Services) -> None:
    deliver(deps, event(), [doc("k-1")])
    deliver(deps, event(), [doc("k-1")])  # the same message and try (a Lambda retry of the batch)
    assert [e.entry for e in deps.usage.for_knowledge("k-1")] == ["000002#wiki#m-1-1"]
    deliver(deps, event(tries=2), [doc("k-1")])
    assert [e.entry for e in deps.usage.for_knowledge("k-1")] == ["000002#wiki#m-1-1", "000002#wiki#m-1-2"]


def test_a_document_worked_for_twice_in_one_message_is_one_entry(deps: Services) -> None:
    deliver(deps, event(), [doc("k-1"), doc("k-1")])
    [entry] = deps.usage.for_knowledge("k-1")
    assert entry.counts[metering.token_counter("input", "chat/m")] == 300  # 100 + 200
    assert entry.counts[metering.SQS_REQUESTS] == 6  # the whole rest: one document


def test_a_share_outside_a_shared_message_counts_where_the_caller_counts(deps: Services) -> None:
    with metering.metering() as meter, document_share("wiki", doc("k-1")):
        metering.record_tokens("chat/m", 5)
    assert meter.snapshot() == {metering.token_counter("input", "chat/m"): 5.0}
    assert deps.usage.for_knowledge("k-1") == []


def test_a_moved_documents_attempt_and_knowledge_base_are_its_rows(deps: Services) -> None:
    moved = replace(doc("k-1", attempt=7), kb_id="kb-2")
    deliver(deps, event(), [moved])
    [entry] = deps.usage.for_knowledge("k-1")
    assert entry.attempt == 7 and entry.kb_id == "kb-2"
