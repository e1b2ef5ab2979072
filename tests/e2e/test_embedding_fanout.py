"""Issue 27 through the local stack (moto's DynamoDB, SQS and Step Functions): a document of several embedding
slices is fanned out, every slice indexes its own chunks, and the stage hands over to the state machine
once, with the span's counters exact."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import boto3

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace

from .conftest import Api

SLICE = 16
DOC = "# Ledger\n\n" + "\n\n".join(
    f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
    for i in range(120)
)


def stage(api: Api, knowledge_id: str, name: str) -> dict[str, Any]:
    trace = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
    return next(s for s in trace if s["span_id"] == name)


def test_a_document_of_several_slices_is_fanned_out_and_settled_once(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    model = HashingEmbedding(64)
    services.replace_embedding_model(model)
    services.settings = replace(
        services.settings, embed_fanout_texts=SLICE, embed_fanout_parallel=3, embed_batch_size=8
    )
    kb = api.create_kb(chunking_config={"chunk_size": 110, "chunk_overlap": 0})
    created = api.upload(kb["id"], "ledger.md", DOC.encode()).json_body["data"]
    runtime.drain(timeout=240)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed", knowledge
    chunks = knowledge["chunk_count"]
    chunking = stage(api, created["id"], "chunking")["outputs"]
    texts = chunking["texts_total"]
    slices = math.ceil(chunking["seq_end"] / SLICE)
    assert slices >= 5 and texts >= 100
    embedding = stage(api, created["id"], "embedding")
    outputs = embedding["outputs"]
    assert embedding["status"] == "done"
    assert outputs["slices_total"] == outputs["slices_done"] == slices
    assert outputs["entries_indexed"] == outputs["texts_total"] == texts
    assert outputs["texts_embedded"] + outputs["cache_hits"] == texts
    assert embedding["progress"]["done"] == embedding["progress"]["total"] == texts
    assert "slices" not in outputs
    # every text chunk indexed once, and the summary chunk enrichment wrote after the hand-over
    assert chunks == texts
    assert services.engine().count(IndexSpace.of(model), kb["id"], created["id"]) == texts + 1
    row = services.knowledge.get(created["id"])
    assert row is not None and row.embed_slices_pending == -1 and row.embed_plan == 1001  # handed over
    assert len(_executions(services, created["id"])) == 1  # handed over once


def _executions(services: Services, knowledge_id: str) -> list[dict[str, Any]]:
    sfn = boto3.client("stepfunctions")
    arn = services.workflow.state_machine_arn  # type: ignore[attr-defined]
    return [
        e
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
        if e["name"].startswith(knowledge_id)
    ]
