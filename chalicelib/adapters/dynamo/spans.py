"""Stage spans in DynamoDB."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
)

from chalicelib.adapters.dynamo.tables import Models, _iso_or_none
from chalicelib.domain.clock import from_iso, now_iso, to_iso
from chalicelib.domain.progress import SPAN_COUNTERS, require_span_counters
from chalicelib.domain.types import (
    Span,
    SpanKind,
    SpanStatus,
)


def span_to_body(span: Span) -> dict[str, Any]:
    body = asdict(span)
    for key in ("started_at", "ended_at", "updated_at"):
        body[key] = _iso_or_none(body[key])
    return body


def span_from_body(body: Mapping[str, Any]) -> Span:
    data = dict(body)
    data["kind"] = SpanKind(data["kind"])
    data["status"] = SpanStatus(data["status"])
    for key in ("started_at", "ended_at", "updated_at"):
        data[key] = from_iso(data[key]) if data.get(key) else None
    return Span(**data)


def span_from_item(item: Any) -> Span | None:
    """The span with its counters read into its outputs; None for counters without a span yet."""
    if item.body is None:
        return None
    span = span_from_body(item.body)
    if item.updated_at:  # a counter's ADD is a heartbeat too
        span.updated_at = max(span.updated_at, from_iso(item.updated_at))
    for name in SPAN_COUNTERS:
        value = getattr(item, f"n_{name}", None)
        if value is not None:
            span.outputs[name] = int(value)
    return span


class DynamoSpanRepo:
    def __init__(self, models: Models):
        self.model = models.span

    @staticmethod
    def _key(attempt: int, span_id: str) -> str:
        return f"{attempt:06d}#{span_id}"

    def put(self, span: Span) -> None:
        # An update, not a replacing put: the counters that slices ADD meanwhile are kept.
        m = self.model
        m(span.knowledge_id, self._key(span.attempt, span.span_id)).update(
            actions=[m.body.set(span_to_body(span)), m.updated_at.set(to_iso(span.updated_at))]
        )

    def add_counters(
        self, knowledge_id: str, attempt: int, span_id: str, counts: Mapping[str, int], *, reset: bool = False
    ) -> None:
        require_span_counters(counts)
        m = self.model
        actions: list[Any] = [m.updated_at.set(now_iso())]
        for name, value in counts.items():
            attribute = getattr(m, f"n_{name}")
            actions.append(attribute.set(int(value)) if reset else attribute.add(int(value)))
        # One UpdateItem: concurrent slices each add theirs, none reads and rewrites another's figure.
        m(knowledge_id, self._key(attempt, span_id)).update(actions=actions)

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        try:
            return span_from_item(
                self.model.get(knowledge_id, self._key(attempt, span_id), consistent_read=True)
            )
        except DoesNotExist:
            return None

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        keys = [(knowledge_id, self._key(attempt, span_id)) for span_id in dict.fromkeys(span_ids)]
        spans = (span_from_item(item) for item in self.model.batch_get(keys, consistent_read=True))
        return {span.span_id: span for span in spans if span is not None}

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        prefix = f"{attempt:06d}#"
        query = self.model.query(knowledge_id, self.model.span_key.startswith(prefix), consistent_read=True)
        return [span for item in query if (span := span_from_item(item)) is not None]

    def delete_all(self, knowledge_id: str) -> int:
        items = list(self.model.query(knowledge_id, attributes_to_get=["knowledge_id", "span_key"]))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)

    def latest_attempt(self, knowledge_id: str) -> int:
        for item in self.model.query(knowledge_id, scan_index_forward=False, limit=1):
            return int(item.span_key.split("#", 1)[0])
        return 0

    def last_activity_iso(self, knowledge_id: str) -> str | None:
        latest = None
        for item in self.model.query(knowledge_id, attributes_to_get=["updated_at", "span_key"]):
            if latest is None or item.updated_at > latest:
                latest = item.updated_at
        return latest
