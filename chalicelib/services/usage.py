"""Meters one record's work, stores what it spent as a usage entry (see `chalicelib.domain.metering`) and emits
its price as a metric."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.pricing import cost_lines, price_table
from chalicelib.observability import logger, stage_cost
from chalicelib.ports import Dependencies, UsageEntry


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
            share = 1 / max(1, len(event.get("Records") or ()))
            memory_gb = float(getattr(context, "memory_limit_in_mb", 0) or 0) / 1024
            if deps.settings.on_lambda:  # Lambda bills the invocation's duration
                seconds = time.monotonic() - started
            else:  # the work, not the waiting of a loaded machine (README, Cost)
                seconds = time.thread_time() - started_cpu + meter.offloaded_seconds
            meter.add(metering.LAMBDA_GB_SECONDS, seconds * memory_gb)
            meter.add(metering.LAMBDA_REQUESTS, share)
            meter.add(metering.SQS_REQUESTS, 2 * share)
            tries = record.attributes.approximate_receive_count or "1"
            counts = meter.snapshot()
            deps.usage.put(
                UsageEntry(
                    knowledge_id=knowledge_id,
                    entry=f"{attempt:06d}#{stage}#{record.message_id}-{tries}",
                    kb_id=meter.kb_id,
                    tenant_id=meter.tenant_id,
                    counts=counts,
                    created_at=now_iso(),
                )
            )
            emit_cost(deps, stage, counts)


def emit_cost(deps: Dependencies, stage: str, counts: Mapping[str, float]) -> None:
    """The try's price (the cost API's price table, model tokens included when priced) as a metric."""
    try:
        dollars = sum(line.dollars for line in cost_lines(counts, price_table(deps.settings.prices_file)))
        stage_cost(stage, dollars)
    except Exception:  # a bad price file or a metric must never change the work's outcome
        logger.exception("could not emit the stage's cost metric", extra={"stage": stage})
