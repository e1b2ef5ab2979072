"""Stage spans in DynamoDB."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
)

from chalicelib.adapters.dynamo.tables import Models, _iso_or_none
from chalicelib.domain.clock import from_iso, to_iso
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


class DynamoSpanRepo:
    def __init__(self, models: Models):
        self.model = models.span

    @staticmethod
    def _key(attempt: int, span_id: str) -> str:
        return f"{attempt:06d}#{span_id}"

    def put(self, span: Span) -> None:
        self.model(
            span.knowledge_id,
            self._key(span.attempt, span.span_id),
            body=span_to_body(span),
            updated_at=to_iso(span.updated_at),
        ).save()

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        try:
            return span_from_body(
                self.model.get(knowledge_id, self._key(attempt, span_id), consistent_read=True).body
            )
        except DoesNotExist:
            return None

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        keys = [(knowledge_id, self._key(attempt, span_id)) for span_id in dict.fromkeys(span_ids)]
        spans = (span_from_body(item.body) for item in self.model.batch_get(keys, consistent_read=True))
        return {span.span_id: span for span in spans}

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        prefix = f"{attempt:06d}#"
        query = self.model.query(knowledge_id, self.model.span_key.startswith(prefix), consistent_read=True)
        return [span_from_body(item.body) for item in query]

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
