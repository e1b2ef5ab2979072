"""Per-attempt progress tree: a root span and the five stages, with cascades and heartbeats.

Stage dependencies follow the specification: docreader → chunking → {embedding, multimodal} → postprocess.
A failure cancels the stages that depend on it (UPSTREAM_FAILED) and closes the root as failed.
Span writes are best effort for callers: progress reporting must never fail a document. What is tolerated
is the span store failing a read or a write; a bug in the tracker's own logic raises like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.progress import IMAGE_SPAN_PREFIX, require_span_counters, stage_progress
from chalicelib.domain.types import ALL_STAGES, Knowledge, Span, SpanKind, SpanStatus, Stage
from chalicelib.observability import logger
from chalicelib.ports import KnowledgeRepo, SpanRepo

T = TypeVar("T")
ROOT = "root"
ROOT_NAME = "knowledge_processing"
DEPENDENTS: dict[Stage, tuple[Stage, ...]] = {
    Stage.DOCREADER: (Stage.CHUNKING, Stage.EMBEDDING, Stage.MULTIMODAL, Stage.POSTPROCESS),
    Stage.CHUNKING: (Stage.EMBEDDING, Stage.MULTIMODAL, Stage.POSTPROCESS),
    Stage.EMBEDDING: (Stage.POSTPROCESS,),
    Stage.MULTIMODAL: (),
    Stage.POSTPROCESS: (),
}
OPEN = (SpanStatus.PENDING, SpanStatus.RUNNING)
MAX_SPAN_NAME = 255


def _now() -> datetime:
    return datetime.now(UTC)


def _progress(stage: Stage, span: Span, children: list[Span]) -> dict[str, Any] | None:
    """The enrichment's progress is its planned subtasks closed so far (the stage span itself closes as
    soon as the plan is made); the multimodal stage's, its images closed so far (done, or given up) of the
    total its fan-out wrote; the other stages report done and total in their outputs."""
    outputs: Mapping[str, Any] = span.outputs
    finished = span.status in (SpanStatus.DONE, SpanStatus.SKIPPED)
    if stage == Stage.MULTIMODAL and "images_total" in outputs:
        images = [c for c in children if c.span_id.startswith(IMAGE_SPAN_PREFIX)]
        # closed by the postprocess plan: the image Map is over, every image answered (or timed out)
        closed = outputs["images_total"] if finished else sum(1 for c in images if c.status not in OPEN)
        updated = max((c.updated_at for c in images), default=span.updated_at)
        done = {**outputs, "images_done": closed}
        return stage_progress(stage.value, done, span.started_at, updated, finished)
    if stage == Stage.POSTPROCESS:
        planned = outputs.get("planned")
        if not isinstance(planned, list):
            return None
        closed = sum(1 for c in children if c.status not in OPEN)
        outputs = {"subtasks_total": len(planned), "subtasks_done": min(closed, len(planned))}
        finished = False
        updated = max((c.updated_at for c in children), default=span.updated_at)
        return stage_progress(stage.value, outputs, span.started_at, updated, finished)
    return stage_progress(stage.value, outputs, span.started_at, span.updated_at, finished)


class SpanStoreFailed(Exception):
    """The span store did not do a read or a write the tracker asked for (the store's error is the cause)."""


class SpanTracker:
    def __init__(self, spans: SpanRepo, knowledge: KnowledgeRepo):
        self.spans = spans
        self.knowledge = knowledge

    def _store(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One call of the span repository. Its adapter's errors have no port error of their own (PynamoDB's
        raise as they are), so every failure of the call is the store's; the tracker's logic is outside."""
        try:
            return call(*args, **kwargs)
        except Exception as error:
            raise SpanStoreFailed(f"span store: {type(error).__name__}") from error

    def _upsert(
        self,
        knowledge_id: str,
        attempt: int,
        span_id: str,
        *,
        kind: SpanKind,
        status: SpanStatus,
        parent_id: str = ROOT,
        inputs: Mapping[str, Any] | None = None,
        outputs: Mapping[str, Any] | None = None,
        error_code: str = "",
        error_message: str = "",
        listed: Mapping[str, Span] | None = None,
    ) -> Span:
        """Reads the span (unless the caller just read it among `listed`), applies the change and writes it."""
        span = (
            listed.get(span_id)
            if listed is not None
            else self._store(self.spans.get, knowledge_id, attempt, span_id)
        ) or Span(
            knowledge_id=knowledge_id,
            attempt=attempt,
            span_id=span_id,
            name=span_id[:MAX_SPAN_NAME],
            kind=kind,
            parent_id="" if span_id == ROOT else parent_id,
        )
        now = _now()
        if status == SpanStatus.RUNNING and span.started_at is None:
            span.started_at = now
        if status not in OPEN and (span.status != status or span.ended_at is None):  # when it ends, not after
            span.ended_at = now
            span.started_at = span.started_at or now
        span.status = status
        span.updated_at = now
        if inputs:
            span.inputs.update(inputs)
        if outputs:
            span.outputs.update(outputs)
        if error_code:
            span.error_code, span.error_message = error_code, error_message[:2000]
        self._store(self.spans.put, span)
        return span

    def _safely(self, action: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpanStoreFailed:  # the store's failure must never fail the document; a bug here raises
            logger.exception("span write failed", extra={"action": action})
            return None

    def begin_stage(self, k: Knowledge, stage: Stage, inputs: Mapping[str, Any] | None = None) -> None:
        self._safely("begin", self._begin, k, stage, inputs)

    def _begin(self, k: Knowledge, stage: Stage, inputs: Mapping[str, Any] | None) -> None:
        # One read for the root and the stage; the root is written once, when the first stage begins.
        spans = self._store(self.spans.get_many, k.id, k.attempt, (ROOT, stage.value))
        root = spans.get(ROOT)
        if root is None or root.status == SpanStatus.PENDING:
            self._upsert(k.id, k.attempt, ROOT, kind=SpanKind.ROOT, status=SpanStatus.RUNNING, listed=spans)
        self._stage(k, stage, SpanStatus.RUNNING, inputs=inputs, listed=spans)

    def end_stage(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any] | None = None) -> None:
        self._safely("end", self._stage, k, stage, SpanStatus.DONE, outputs=outputs)

    def progress(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None:
        """A heartbeat inside a long stage."""
        self._safely("progress", self._stage, k, stage, SpanStatus.RUNNING, outputs=outputs)

    def planned(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None:
        """A fan-out's planned totals: written by whichever delivery of the hand-over gets here (the same
        figures each time), running the stage if it is not closed yet, never reopening one that is."""
        self._safely("planned", self._planned, k, stage, outputs)

    def _planned(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None:
        span = self._store(self.spans.get, k.id, k.attempt, stage.value)
        status = span.status if span is not None and span.status not in OPEN else SpanStatus.RUNNING
        listed = {stage.value: span} if span is not None else {}
        self._upsert(
            k.id, k.attempt, stage.value, kind=SpanKind.STAGE, status=status, outputs=outputs, listed=listed
        )

    def counters(self, k: Knowledge, stage: Stage, counts: Mapping[str, int], *, reset: bool = False) -> None:
        """Adds to the stage's counters in one atomic write (concurrent slices; `reset`: sets them)."""
        require_span_counters(counts)  # a name that is no counter is the caller's bug: it raises here
        self._safely(
            "counters",
            self._store,
            self.spans.add_counters,
            k.id,
            k.attempt,
            stage.value,
            counts,
            reset=reset,
        )

    def skip_stage(self, k: Knowledge, stage: Stage, reason: str) -> None:
        self._safely("skip", self._stage, k, stage, SpanStatus.SKIPPED, outputs={"reason": reason})

    def _stage(self, k: Knowledge, stage: Stage, status: SpanStatus, **change: Any) -> Span:
        return self._upsert(k.id, k.attempt, stage.value, kind=SpanKind.STAGE, status=status, **change)

    def fail_stage(self, knowledge_id: str, attempt: int, stage: Stage, code: str, message: str) -> None:
        self._safely("fail", self._fail, knowledge_id, attempt, stage, code, message)

    def _fail(self, knowledge_id: str, attempt: int, stage: Stage, code: str, message: str) -> None:
        self._upsert(
            knowledge_id,
            attempt,
            stage.value,
            kind=SpanKind.STAGE,
            status=SpanStatus.FAILED,
            error_code=code,
            error_message=message,
        )
        dependents = [d.value for d in DEPENDENTS[stage]]
        existing = self._store(self.spans.get_many, knowledge_id, attempt, dependents) if dependents else {}
        for dependent in dependents:
            if dependent not in existing or existing[dependent].status in OPEN:
                self._upsert(
                    knowledge_id,
                    attempt,
                    dependent,
                    kind=SpanKind.STAGE,
                    status=SpanStatus.CANCELLED,
                    error_code=SpanErrorCode.UPSTREAM_FAILED,
                    error_message=f"{stage.value} failed",
                    listed=existing,
                )
        if stage in (Stage.DOCREADER, Stage.CHUNKING, Stage.EMBEDDING, Stage.POSTPROCESS):
            self._upsert(
                knowledge_id,
                attempt,
                ROOT,
                kind=SpanKind.ROOT,
                status=SpanStatus.FAILED,
                error_code=code,
                error_message=message,
            )

    def close_root(
        self, knowledge_id: str, attempt: int, status: SpanStatus, code: str = "", message: str = ""
    ) -> None:
        """Closes the root and every open span (completion, cancel, housekeeping)."""

        def close() -> None:
            listed = {span.span_id: span for span in self._store(self.spans.list, knowledge_id, attempt)}
            for span in listed.values():
                if span.span_id != ROOT and span.status in OPEN:
                    target = SpanStatus.CANCELLED if status != SpanStatus.DONE else SpanStatus.SKIPPED
                    self._upsert(
                        knowledge_id,
                        attempt,
                        span.span_id,
                        kind=span.kind,
                        status=target,
                        error_code=code,
                        error_message=message,
                        listed=listed,
                    )
            self._upsert(
                knowledge_id,
                attempt,
                ROOT,
                kind=SpanKind.ROOT,
                status=status,
                error_code=code,
                error_message=message,
                listed=listed,
            )

        self._safely("close", close)

    def subspan(
        self,
        k: Knowledge,
        parent: Stage,
        span_id: str,
        status: SpanStatus,
        outputs: Mapping[str, Any] | None = None,
        error_code: str = "",
        error_message: str = "",
    ) -> None:
        self._safely(
            "subspan",
            self._upsert,
            k.id,
            k.attempt,
            span_id,
            kind=SpanKind.SUBSPAN,
            status=status,
            parent_id=parent.value,
            outputs=outputs,
            error_code=error_code,
            error_message=error_message,
        )

    def view(self, k: Knowledge, attempt: int | None = None) -> dict[str, Any]:
        """The stage tree of one attempt, shaped as WeKnora's GET /knowledge/:id/spans returns it."""
        wanted = attempt or k.attempt
        spans = {s.span_id: s for s in self.spans.list(k.id, wanted)}
        ended = _ended(k, wanted, spans.get(ROOT))
        stages = []
        for stage in ALL_STAGES:
            span = spans.get(stage.value) or Span(k.id, wanted, stage.value, stage.value, SpanKind.STAGE)
            children = [s for s in spans.values() if s.parent_id == stage.value]
            if ended is not None:
                span = _closed(span, *ended)
                children = [_closed(c, *ended) for c in children]
            node = span.to_dict()
            node["children"] = [s.to_dict() for s in children]
            node["progress"] = _progress(stage, span, children)
            stages.append(node)
        current = _current_stage(stages)
        root = spans.get(ROOT)
        if root is not None and ended is not None and wanted < k.attempt:
            root = _closed(root, *ended)
        if (
            root is not None
            and root.status in OPEN
            and wanted == k.attempt
            and k.parse_status.value == "completed"
        ):
            # The state machine promotes the row to completed; the root's state follows from that fact.
            root.status = SpanStatus.DONE
            root.ended_at = k.updated_at
        last_error = next(
            (
                {"stage": s["span_id"], "code": s["error_code"], "message": s["error_message"]}
                for s in stages
                if s["status"] == SpanStatus.FAILED
            ),
            None,
        )
        return {
            "knowledge_id": k.id,
            "attempt": wanted,
            "latest_attempt": k.attempt,
            "current_attempt": k.attempt,
            "parse_status": k.parse_status.value,
            "current_stage": current,
            "root": root.to_dict() if root else None,
            "trace": stages,
            "last_error": last_error
            or ({"code": k.error_code, "message": k.error_message} if k.error_message else None),
        }


def _ended(k: Knowledge, attempt: int, root: Span | None) -> tuple[SpanStatus, str, str] | None:
    """How an attempt that can make no more progress ended, for the spans it left open: superseded by a
    later attempt, or closed (its root done, failed or cancelled). None while it is still going."""
    if attempt < k.attempt:
        return SpanStatus.CANCELLED, SpanErrorCode.SUPERSEDED.value, f"superseded by attempt {attempt + 1}"
    if root is None or root.status in OPEN:
        return None
    if root.status == SpanStatus.DONE:
        return SpanStatus.SKIPPED, "", ""
    if root.status == SpanStatus.FAILED:
        return SpanStatus.CANCELLED, SpanErrorCode.UPSTREAM_FAILED.value, "an earlier stage failed"
    return SpanStatus.CANCELLED, root.error_code, root.error_message


def _closed(span: Span, status: SpanStatus, code: str, message: str) -> Span:
    """An open span of an attempt that ended, shown as it ended (what was stored is not rewritten)."""
    if span.status not in OPEN:
        return span
    return replace(
        span, status=status, error_code=span.error_code or code, error_message=span.error_message or message
    )


def _current_stage(stages: list[dict[str, Any]]) -> str | None:
    """The stage running now; else the one that failed or was stopped; else the last one that ran."""
    for wanted in (SpanStatus.RUNNING, SpanStatus.FAILED):
        found = next((s["span_id"] for s in stages if s["status"] == wanted), None)
        if found is not None:
            return found
    stopped = next(
        (s["span_id"] for s in stages if s["status"] == SpanStatus.CANCELLED and s["started_at"] is not None),
        None,
    )
    if stopped is not None:
        return stopped
    return next((s["span_id"] for s in reversed(stages) if s["status"] == SpanStatus.DONE), None)
