"""An edit whose graph refresh the enrichment queue does not take answers 503 `queue_unavailable` (the edit
saved), and the same request sent again queues the refresh: the old text's facts do not stay for good. The
send is tried a few times before the edit gives up; a text the parser made, sent unchanged, queues nothing."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chalicelib.adapters.memory import InstantSleep
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.domain.ids import content_hash
from chalicelib.domain.types import Tenant

from .test_enrichment_replies import ReplyingLLM, llm_kb
from .test_enrichment_replies import llm as llm
from .test_graph_chunk_edit import (
    NEW_TEXT,
    _completed_with_graph,
    _deliver_enrichment,
    _edit,
    _graph_messages,
    _queue,
)

FERRY = "The ferry calls at the harbour every day."


def test_the_same_edit_sent_again_queues_the_refresh_the_queue_did_not_take(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    llm.replies["graph"] = json.dumps(NEW_TEXT)
    _queue(deps).make_unavailable("enrichment")

    with pytest.raises(ServiceUnavailable) as refused:
        _edit(deps, knowledge, edited, FERRY)
    assert refused.value.status == 503 and refused.value.code == "queue_unavailable"
    stored = deps.chunks.get_many([(knowledge.id, edited.id)])[(knowledge.id, edited.id)]
    assert stored.content == FERRY  # the edit is saved
    assert _graph_messages(deps) == []

    _queue(deps).make_unavailable("enrichment", False)
    _edit(deps, knowledge, edited, FERRY)  # the client's retry
    [sent] = _graph_messages(deps)
    assert sent["subtask"]["chunk_id"] == edited.id and sent["subtask"]["content_hash"] == stored.content_hash
    assert _deliver_enrichment(deps) == []
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None  # only the old text had it
    ferry = deps.graph.neighbourhood(kb.id, "Ferry").entity
    assert ferry is not None and ferry.chunk_ids == [edited.id]


def test_a_send_the_queue_refuses_once_is_tried_again(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    _queue(deps).make_unavailable("enrichment")
    waits = InstantSleep()

    def back_after_a_wait(seconds: float) -> None:
        waits(seconds)
        _queue(deps).make_unavailable("enrichment", False)

    monkeypatch.setattr(deps, "sleeper", back_after_a_wait)
    _edit(deps, knowledge, edited, FERRY)
    assert len(waits.waits) == 1 and len(_graph_messages(deps)) == 1


def test_a_parsers_text_sent_unchanged_queues_no_refresh(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, parsed, _other = _completed_with_graph(deps, kb, llm)
    text = "The keeper tends the lamp."  # as the parser wrote it (no edge whitespace an edit would strip)
    deps.chunks.put_many([replace(parsed, content=text, content_hash=content_hash(text))])
    _edit(deps, knowledge, parsed, text)
    assert _graph_messages(deps) == []
