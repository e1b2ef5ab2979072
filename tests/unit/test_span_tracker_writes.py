"""What a stage's begin costs in span reads and writes: one read of two items, the stage span, and the root only when
the first stage begins (a read and a write saved per call site matter: every stage of every document)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemorySpanRepo
from chalicelib.domain.types import Knowledge, KnowledgeType, SpanStatus, Stage
from chalicelib.services import stage_spans
from chalicelib.services.stage_spans import ROOT, SpanTracker


class CountingSpans(MemorySpanRepo):
    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def put(self, span: Any) -> None:
        self.calls[f"put {span.span_id}"] += 1
        super().put(span)

    def get(self, *args: Any) -> Any:
        self.calls["get"] += 1
        return super().get(*args)

    def get_many(self, *args: Any) -> Any:
        self.calls["get_many"] += 1
        return super().get_many(*args)


def test_the_root_is_written_when_the_first_stage_begins_and_not_again() -> None:
    spans, knowledge = CountingSpans(), MemoryKnowledgeRepo()
    k = Knowledge(id="k1", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE)
    knowledge.insert(k)
    tracker = SpanTracker(spans, knowledge)

    tracker.begin_stage(k, Stage.DOCREADER, {"file": "a.txt"})
    assert spans.calls == Counter({"get_many": 1, "put root": 1, "put docreader": 1})
    tracker.end_stage(k, Stage.DOCREADER, {"pages": 1})
    spans.calls.clear()

    tracker.begin_stage(k, Stage.CHUNKING)
    assert spans.calls == Counter({"get_many": 1, "put chunking": 1})
    by_id = {s.span_id: s for s in spans.list("k1", 1)}
    assert by_id[ROOT].status == SpanStatus.RUNNING and by_id["chunking"].status == SpanStatus.RUNNING
    assert by_id["docreader"].inputs == {"file": "a.txt"} and by_id["docreader"].outputs == {"pages": 1}


def test_a_redelivered_begin_keeps_what_the_stage_span_holds() -> None:
    spans, knowledge = CountingSpans(), MemoryKnowledgeRepo()
    k = Knowledge(id="k1", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE)
    knowledge.insert(k)
    tracker = SpanTracker(spans, knowledge)
    tracker.begin_stage(k, Stage.EMBEDDING, {"first": True})
    first = spans.get("k1", 1, "embedding")
    tracker.progress(k, Stage.EMBEDDING, {"texts_embedded": 5})
    tracker.begin_stage(k, Stage.EMBEDDING, {"again": True})
    span = spans.get("k1", 1, "embedding")
    assert span.inputs == {"first": True, "again": True} and span.outputs == {"texts_embedded": 5}
    assert span.started_at == first.started_at


class FailingSpans(MemorySpanRepo):
    """A span store that does not answer (a throttled or unreachable table)."""

    def put(self, span: Any) -> None:
        raise ConnectionError("the table did not answer")

    def get_many(self, *args: Any) -> Any:
        raise ConnectionError("the table did not answer")


def test_a_span_store_that_fails_never_fails_the_document() -> None:
    knowledge = MemoryKnowledgeRepo()
    k = Knowledge(id="k1", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE)
    knowledge.insert(k)
    tracker = SpanTracker(FailingSpans(), knowledge)
    tracker.begin_stage(k, Stage.DOCREADER)
    tracker.fail_stage("k1", 1, Stage.DOCREADER, "unknown", "failed")
    tracker.subspan(k, Stage.POSTPROCESS, "postprocess.wiki", SpanStatus.DONE)


def test_a_bug_in_the_trackers_own_logic_raises_and_is_not_taken_for_a_store_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: every exception around a span write was logged and swallowed, our own bugs too."""
    knowledge = MemoryKnowledgeRepo()
    k = Knowledge(id="k1", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE)
    knowledge.insert(k)
    tracker = SpanTracker(MemorySpanRepo(), knowledge)

    def broken_clock() -> Any:
        raise TypeError("a bug in the tracker")

    monkeypatch.setattr(stage_spans, "_now", broken_clock)
    with pytest.raises(TypeError):
        tracker.begin_stage(k, Stage.DOCREADER)
    with pytest.raises(ValueError):  # a name that is no span counter: the caller's bug
        tracker.counters(k, Stage.EMBEDDING, {"no_such_counter": 1})
