"""A wiki-only knowledge base (vector and keyword indexing off, which the API accepts) through the public path:
the document goes through every stage and the state machine to completed with its wiki page, and search
answers an empty list (hybrid) or 400 `retriever_unavailable` (a retriever with no index), not a 500. Its
embedding stage used to fail every such document (the "indexing is off" answer had no `counts`)."""

from __future__ import annotations

import boto3
from scripted_llm import CHAT, ScriptedLLM

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api


def test_a_wiki_only_document_completes_and_search_answers_without_an_index(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(
        summary_model_id=CHAT,
        indexing_strategy={"vector_enabled": False, "keyword_enabled": False, "wiki_enabled": True},
    )
    created = api.upload(kb["id"], "ferry.md", b"# Ferry\n\n" + b"The North ferry leaves at eight. " * 20)
    assert created.status_code == 200, created.json_body
    knowledge_id = created.json_body["data"]["id"]
    runtime.drain(timeout=300)

    row = api.knowledge(knowledge_id)
    assert (row["parse_status"], row["error_message"]) == ("completed", ""), row
    assert row["pending_subtasks_count"] == 0 and sorted(row["enrichment"]["planned"]) == ["summary", "wiki"]
    sfn = boto3.client("stepfunctions")
    arn = services.workflow.state_machine_arn  # type: ignore[attr-defined]
    executions = [
        e
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
        if e["name"].startswith(knowledge_id)
    ]
    assert [e["status"] for e in executions] == ["SUCCEEDED"]
    wiki = api.get(f"/knowledge-bases/{kb['id']}/wiki").json_body["data"]
    assert [page["knowledge_id"] for page in wiki["pages"]] == [knowledge_id]

    search = f"/knowledge-bases/{kb['id']}/hybrid-search"
    hybrid = api.post(search, {"query_text": "North ferry"})
    assert (hybrid.status_code, hybrid.json_body["data"]) == (200, [])
    keyword = api.post(search, {"query_text": "North ferry", "retriever": "keyword"})
    assert (keyword.status_code, keyword.json_body["error"]["code"]) == (400, "retriever_unavailable")
    stats = api.get(f"/knowledge-bases/{kb['id']}/stats")
    assert stats.status_code == 200 and stats.json_body["data"]["parse_status"] == {"completed": 1}
