"""Meters one record's work, stores what it spent as usage entries (see `chalicelib.domain.metering`) and emits
its price as a metric.

A stage message works for one document (`metered_invocation`). A message that works for several (a wiki
ingest, a slice of a re-embed) counts each document's own work apart (`document_share`) and splits what the
invocation spent besides evenly among them (`metered_shares`). Work for no document (an FAQ import, a wiki
finalize, a lifecycle task's bookkeeping) is the knowledge base's own: its entries are kept under
`kb_usage_id(kb_id)`, which no document has.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.pricing import cost_lines, price_table
from chalicelib.domain.types import Knowledge
from chalicelib.observability import logger, stage_cost
from chalicelib.ports import Dependencies, UsageEntry

#: a knowledge base's own entries are kept under this prefix and its id (documents' ids are uuids)
KB_USAGE_PREFIX = "kb#"
#: the attempt a knowledge base's own entries are written under (documents' attempts start at 1)
KB_USAGE_ATTEMPT = 0


def kb_usage_id(kb_id: str) -> str:
    """The knowledge id the knowledge base's own usage entries are kept under."""
    return f"{KB_USAGE_PREFIX}{kb_id}"


@contextmanager
def metered_invocation(
    deps: Dependencies,
    stage: str,
    knowledge_id: str,
    attempt: int,
    record: SQSRecord,
    event: dict[str, Any],
    context: Any,
) -> Iterator[metering.Meter]:
    """Counts the calls the enclosed work makes, then adds the invocation's share: Lambda GB-seconds of
    the record's own run time (on AWS its duration; locally, where a loaded machine would stretch that, the
    CPU time of its thread plus the work it handed to worker and child processes), and its share of the batch's invocation and of the event source's SQS
    receive and delete (one each per batch). Stored whether the work succeeded or not: a failed try is
    paid for too. Each try is its own entry (message id and receive count), so a redelivery adds one."""
    started, started_cpu = time.monotonic(), time.thread_time()
    with metering.metering() as meter:
        try:
            yield meter
        finally:
            _add_invocation(deps, meter, started, started_cpu, meter.offloaded_seconds, event, context)
            counts = meter.snapshot()
            deps.usage.put(
                UsageEntry(
                    knowledge_id=knowledge_id,
                    entry=_entry_key(attempt, stage, record),
                    kb_id=meter.kb_id,
                    tenant_id=meter.tenant_id,
                    counts=counts,
                    created_at=now_iso(),
                )
            )
            emit_cost(deps, stage, counts)


@dataclass(frozen=True)
class _Share:
    """What one document's own work in a shared invocation spent."""

    stage: str
    knowledge: Knowledge
    meter: metering.Meter


_open_shares: ContextVar[list[_Share] | None] = ContextVar("weknora_usage_shares", default=None)


@contextmanager
def metered_shares(
    deps: Dependencies,
    stage: str,
    record: SQSRecord,
    event: dict[str, Any],
    context: Any,
    *,
    kb_id: str = "",
) -> Iterator[metering.Meter]:
    """`metered_invocation` for a message that works for several documents: each `document_share` inside is
    its document's own entry, with an even part of what the invocation spent outside them (its Lambda time,
    the SQS calls, the reads of no one document). With no share, all of it is the knowledge base's own
    (`kb_id`, else the one the work named with `metering.attribute`). Keyed as `metered_invocation` keys
    them (message id and receive count), so a redelivery adds entries and a repeat of the same try does
    not."""
    started, started_cpu = time.monotonic(), time.thread_time()
    shares: list[_Share] = []
    token = _open_shares.set(shares)
    try:
        with metering.metering() as meter:
            try:
                yield meter
            finally:
                offloaded = meter.offloaded_seconds + sum(share.meter.offloaded_seconds for share in shares)
                _add_invocation(deps, meter, started, started_cpu, offloaded, event, context)
                _store_shares(deps, stage, record, meter, shares, kb_id or meter.kb_id)
    finally:
        _open_shares.reset(token)


@contextmanager
def document_share(stage: str, knowledge: Knowledge) -> Iterator[None]:
    """Inside `metered_shares`: the enclosed work is `knowledge`'s (its attempt, in the knowledge base its row
    names). Elsewhere nothing changes: the calls count wherever the caller counts them."""
    shares = _open_shares.get()
    if shares is None:
        yield
        return
    with metering.metering() as meter:
        try:
            yield
        finally:
            shares.append(_Share(stage, knowledge, meter))


def carry_usage(deps: Dependencies, entries: Iterable[UsageEntry], kb_id: str) -> int:
    """A moved document's entries, rewritten under the knowledge base it is in now (same keys: nothing is
    added): a knowledge base's cost is that of the documents it holds. Returns how many were rewritten."""
    carried = 0
    for entry in entries:
        if entry.kb_id != kb_id:
            deps.usage.put(replace(entry, kb_id=kb_id))
            carried += 1
    return carried


def _entry_key(attempt: int, stage: str, record: SQSRecord) -> str:
    tries = record.attributes.approximate_receive_count or "1"
    return f"{attempt:06d}#{stage}#{record.message_id}-{tries}"


def _add_invocation(
    deps: Dependencies,
    meter: metering.Meter,
    started: float,
    started_cpu: float,
    offloaded_seconds: float,
    event: dict[str, Any],
    context: Any,
) -> None:
    """The record's share of its invocation: Lambda time and request, the SQS receive and delete."""
    share = 1 / max(1, len(event.get("Records") or ()))
    memory_gb = float(getattr(context, "memory_limit_in_mb", 0) or 0) / 1024
    if deps.settings.on_lambda:  # Lambda bills the invocation's duration
        seconds = time.monotonic() - started
    else:  # the work, not the waiting of a loaded machine (README, Cost)
        seconds = time.thread_time() - started_cpu + offloaded_seconds
    meter.add(metering.LAMBDA_GB_SECONDS, seconds * memory_gb)
    meter.add(metering.LAMBDA_REQUESTS, share)
    meter.add(metering.SQS_REQUESTS, 2 * share)


def _store_shares(
    deps: Dependencies,
    stage: str,
    record: SQSRecord,
    meter: metering.Meter,
    shares: list[_Share],
    kb_id: str,
) -> None:
    common = Counter(meter.snapshot())  # what no share counted, the invocation's costs included
    own: dict[tuple[str, int], tuple[_Share, Counter[str]]] = {}
    for share in shares:  # a document worked on twice in one message is one entry
        key = (share.knowledge.id, share.knowledge.attempt)
        own.setdefault(key, (share, Counter()))[1].update(share.meter.snapshot())
    entries: list[UsageEntry] = []
    if own:
        part = {name: amount / len(own) for name, amount in common.items()}
        for share, counts in own.values():
            counts.update(part)
            entries.append(
                UsageEntry(
                    knowledge_id=share.knowledge.id,
                    entry=_entry_key(share.knowledge.attempt, share.stage, record),
                    kb_id=share.knowledge.kb_id,
                    tenant_id=share.knowledge.tenant_id,
                    counts=_rounded(counts),
                    created_at=now_iso(),
                )
            )
    elif kb_id:
        entries.append(
            UsageEntry(
                knowledge_id=kb_usage_id(kb_id),
                entry=_entry_key(KB_USAGE_ATTEMPT, stage, record),
                kb_id=kb_id,
                tenant_id=meter.tenant_id,
                counts=_rounded(common),
                created_at=now_iso(),
            )
        )
    else:  # an unreadable task or knowledge base: nothing to attribute the spend to
        logger.info("usage with no knowledge base left unstored", extra={"stage": stage})
    for entry in entries:
        deps.usage.put(entry)
    spent: Counter[str] = Counter(common)
    for share in shares:
        spent.update(share.meter.snapshot())
    emit_cost(deps, stage, _rounded(spent))


def _rounded(counts: Mapping[str, float]) -> dict[str, float]:
    return {name: round(value, 6) for name, value in counts.items() if value}


def emit_cost(deps: Dependencies, stage: str, counts: Mapping[str, float]) -> None:
    """The try's price (the cost API's price table, model tokens included when priced) as a metric."""
    try:
        dollars = sum(line.dollars for line in cost_lines(counts, price_table(deps.settings.prices_file)))
        stage_cost(stage, dollars)
    except Exception:  # a bad price file or a metric must never change the work's outcome
        logger.exception("could not emit the stage's cost metric", extra={"stage": stage})
