"""Issue 12, cost metering: every stage counts what it really spends (AWS calls seen through botocore's
events, Lambda time, the execution's transitions from its history) and the cost routes price it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain import metering
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TEXT = b"# Lighthouse\n\n" + b"The keeper climbs the stairs at dusk and lights the lamp.\n\n" * 40


def quantities(report: dict[str, Any]) -> dict[str, float]:
    return {line["unit"]: line["quantity"] for line in report["lines"]}


def test_a_document_reports_what_each_stage_spent_and_its_price(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "lighthouse.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"

    response = api.get(f"/knowledge/{created['id']}/cost")
    assert response.status_code == 200
    report = response.json_body["data"]
    spent = quantities(report)
    for unit in (
        metering.SQS_REQUESTS,
        metering.DYNAMODB_READ_UNITS,
        metering.DYNAMODB_WRITE_UNITS,
        metering.LAMBDA_GB_SECONDS,
        metering.LAMBDA_REQUESTS,
    ):
        assert spent.get(unit, 0) > 0, unit
    # the execution has finished: its transitions were read from its history, once
    assert report["workflow_pending"] == 0
    # no images, one subtask (the extractive summary): Multimodal, PlanPostProcess, Enrich, RunSubtask; the
    # workers settle the row (finalizing, the slot, completed), not states of the machine
    assert spent[metering.SFN_TRANSITIONS] == 4
    again = api.get(f"/knowledge/{created['id']}/cost").json_body["data"]
    assert quantities(again)[metering.SFN_TRANSITIONS] == spent[metering.SFN_TRANSITIONS]
    # dollars are the quantities times the dated prices
    assert report["prices_as_of"]
    assert report["aws_dollars"] == pytest.approx(sum(line["dollars"] for line in report["lines"]), rel=1e-6)
    assert report["aws_dollars"] > 0
    # money without float noise: a unit price reads as the table writes it (2e-07, not 2.0000000000000002e-07)
    assert all(len(repr(line["unit_price"])) <= 14 for line in report["lines"]), report["lines"]
    assert {"docreader", "chunking", "embedding", "workflow"} <= set(report["by_stage"])

    # the same counts appear in the stage tree
    trace = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]["trace"]
    embedding = next(span for span in trace if span["span_id"] == "embedding")
    assert embedding["usage"][metering.LAMBDA_REQUESTS] > 0
    # and each stage's progress: done of total
    chunks = api.knowledge(created["id"])["chunk_count"]
    assert embedding["progress"]["done"] == embedding["progress"]["total"] == chunks
    assert embedding["progress"]["unit"] == "chunks" and embedding["progress"]["percent"] == 100.0
    postprocess = next(span for span in trace if span["span_id"] == "postprocess")
    assert postprocess["progress"]["done"] == postprocess["progress"]["total"] >= 1  # the summary


def test_the_meter_counts_the_calls_a_stage_makes(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The chunking stage writes its chunks to DynamoDB: the write units it reports are what DynamoDB
    answered for those writes (ConsumedCapacity), so more chunks cost more units."""
    kb = api.create_kb()
    small = api.upload(kb["id"], "small.md", b"# A\n\none short paragraph\n").json_body["data"]
    large = api.upload(kb["id"], "large.md", TEXT * 6).json_body["data"]
    runtime.drain(timeout=180)

    def chunking_writes(knowledge_id: str) -> float:
        entries = [e for e in services.usage.for_knowledge(knowledge_id) if e.stage == "chunking"]
        return sum(e.counts.get(metering.DYNAMODB_WRITE_UNITS, 0) for e in entries)

    chunks_small = api.knowledge(small["id"])["chunk_count"]
    chunks_large = api.knowledge(large["id"])["chunk_count"]
    assert chunks_large > chunks_small
    assert chunking_writes(large["id"]) > chunking_writes(small["id"]) > 0


def test_a_knowledge_base_costs_the_sum_of_its_documents(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    ids = [
        api.upload(kb["id"], f"doc-{n}.md", TEXT + f"\n\nnumber {n}\n".encode()).json_body["data"]["id"]
        for n in range(2)
    ]
    runtime.drain(timeout=180)
    documents = [api.get(f"/knowledge/{i}/cost").json_body["data"] for i in ids]
    total = api.get(f"/knowledge-bases/{kb['id']}/cost").json_body["data"]
    assert total["documents"] == 2
    assert total["aws_dollars"] == pytest.approx(sum(d["aws_dollars"] for d in documents))

    # a deleted document was still paid for
    deleted = api.client.http.delete(f"/api/v1/knowledge/{ids[0]}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code in (200, 202)
    runtime.drain(timeout=120)
    after = api.get(f"/knowledge-bases/{kb['id']}/cost").json_body["data"]
    assert after["aws_dollars"] >= total["aws_dollars"]


def test_an_operator_price_file_overrides_the_table(
    api: Api, runtime: LocalRuntime, services: Services, tmp_path: Path
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"as_of": "2030-01-01", metering.SQS_REQUESTS: 1.0}))
    services.settings = replace(services.settings, prices_file=str(prices))
    report = api.get(f"/knowledge/{created['id']}/cost").json_body["data"]
    assert report["prices_as_of"] == "2030-01-01"
    sqs = next(line for line in report["lines"] if line["unit"] == metering.SQS_REQUESTS)
    assert sqs["dollars"] == pytest.approx(sqs["quantity"])


def test_another_tenants_document_has_no_cost_to_show(
    api: Api, other_api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert other_api.get(f"/knowledge/{created['id']}/cost").status_code == 404
    assert other_api.get(f"/knowledge-bases/{kb['id']}/cost").status_code == 404


def test_an_attempt_that_ended_before_its_execution_is_not_pending_forever(
    api: Api, runtime: LocalRuntime
) -> None:
    """Issue 24, defect 4: a document that failed in the docreader never starts an execution; its cost and
    its knowledge base's total say no execution is pending, and the zero transitions are stored once."""
    kb = api.create_kb()
    broken = api.upload(kb["id"], "broken.pdf", b"%PDF-1.7\n this is not a pdf body").json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(broken["id"])["parse_status"] == "failed"
    for _ in range(2):
        report = api.get(f"/knowledge/{broken['id']}/cost").json_body["data"]
        assert report["workflow_pending"] == 0
        assert quantities(report).get(metering.SFN_TRANSITIONS, 0) == 0
    assert api.get(f"/knowledge-bases/{kb['id']}/cost").json_body["data"]["workflow_pending"] == 0
