"""An edited chunk's graph refresh whose graph store does not answer for all its tries: the message is work
outside the subtask count (no task token, no state machine Catch to hear of it), so its last failed try
leaves it to the enrichment DLQ, and an operator's redrive sends it again while its attempt stands (a
reviewer's proof: the message was consumed on its last try, and a redrive would have answered
`nothing_to_do` for the completed row: the old text's facts stayed in the graph for good). Such a letter
never restarts its document."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.dlq import redrive
from chalicelib.ports import ServiceUnreachable

from .conftest import ScriptedReader, drain, upload
from .test_enrichment_replies import ReplyingLLM, llm_kb
from .test_enrichment_replies import llm as llm
from .test_graph_chunk_edit import NEW_TEXT, _completed_with_graph, _deliver_enrichment, _edit, _queue

ENRICHMENT = "enrichment"


def _refresh_given_up(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> tuple[KnowledgeBase, Knowledge]:
    """A completed document with graph facts, one chunk edited, and the refresh's every try unanswered."""
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is not None  # only the old text's fact
    llm.replies["graph"] = json.dumps(NEW_TEXT)
    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    real = deps.graph.retract_chunks

    def down(*args: Any, **kwargs: Any) -> Any:
        raise ServiceUnreachable("graph table throttled")

    monkeypatch.setattr(deps.graph, "retract_chunks", down)
    _deliver_enrichment(deps)  # each of its tries fails
    monkeypatch.setattr(deps.graph, "retract_chunks", real)
    return kb, knowledge


def test_a_graph_refresh_that_ran_out_of_tries_is_dead_lettered_and_redriven(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb, knowledge = _refresh_given_up(deps, tenant, llm, monkeypatch)
    assert len(_queue(deps).dead_letters(ENRICHMENT)) == 1
    report = redrive(deps, ENRICHMENT, 10).as_dict()
    assert report["counts"] == {"resent": 1}
    _deliver_enrichment(deps)
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None  # the old text's facts went
    assert deps.graph.neighbourhood(kb.id, "Ferry").entity is not None  # the new text's came
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.attempt == knowledge.attempt  # the document was not restarted
    assert row.parse_status == ParseStatus.COMPLETED


def test_a_graph_refresh_letter_of_a_reparsed_document_is_dropped(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.tasks.reparse import reparse

    _kb, knowledge = _refresh_given_up(deps, tenant, llm, monkeypatch)
    reparse(deps, knowledge.tenant_id, knowledge.id, ReparseRequest())  # its new attempt reads it anew
    assert redrive(deps, ENRICHMENT, 10).as_dict()["counts"] == {"superseded": 1}
    assert not _queue(deps).dead_letters(ENRICHMENT) and not _queue(deps).waiting(ENRICHMENT)


def test_a_letter_outside_the_count_never_restarts_a_failed_document(
    deps: Services, kb: KnowledgeBase
) -> None:
    """Its work is a side job: the document's failure is its own stages' to redrive."""
    deps.replace_docreader(ScriptedReader(PermanentStageError("no text in this file")))
    doc = upload(deps, kb)
    drain(deps)
    failed = deps.knowledge.get(doc.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    subtask = {"id": "graph_refresh", "kind": "graph_chunk", "chunk_id": "c", "content_hash": "h"}
    body = {"tenant_id": doc.tenant_id, "knowledge_id": doc.id, "attempt": failed.attempt, "subtask": subtask}
    deps.queue.dead_letter(ENRICHMENT, json.dumps(body), "maxReceiveCount 4 exceeded")
    assert redrive(deps, ENRICHMENT, 10).as_dict()["counts"] == {"nothing_to_do": 1}
    after = deps.knowledge.get(doc.id)
    assert after is not None and (after.attempt, after.parse_status) == (failed.attempt, ParseStatus.FAILED)
    assert not _queue(deps).waiting(ENRICHMENT) and not _queue(deps).waiting("docreader")
