"""What a document, or a knowledge base, cost: the metered usage entries priced with the price table.

Step Functions bills per state transition, which no worker sees; an execution's transitions are read from
its history once it has finished and stored as one more usage entry (`workflow`), the first time a cost is
asked for.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.ids import execution_name
from chalicelib.domain.pricing import cost_lines, is_model_tokens, price_table
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies, UsageEntry
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.usage import carry_usage, kb_usage_id

WORKFLOW_STAGE = "workflow"
#: a knowledge base's report fills in at most this many documents' workflow transitions per request
KB_WORKFLOW_FILLS = 25
#: and carries at most this many moved documents' entries to where they are now (a move carries its own)
KB_USAGE_CARRIES = 25


def _workflow_entry(entry_key: str) -> bool:
    return entry_key.split("#")[1] == WORKFLOW_STAGE


def _attempt_over(row: Knowledge | None, attempt: int) -> bool:
    """No execution can start for this attempt any more: the row is gone, has a later attempt, or this
    attempt ended. (An execution starts once indexing is done, so a live attempt may still start one.)"""
    return row is None or row.attempt > attempt or not is_in_flight(row.parse_status)


def fill_workflow_usage(
    deps: Dependencies, knowledge_id: str, entries: list[UsageEntry]
) -> tuple[list[UsageEntry], int]:
    """Adds the transitions of every attempt whose execution has finished and is not yet counted.
    Returns the entries and how many attempts are still running (their transitions come later)."""
    attempts = {e.attempt for e in entries}
    counted = {e.attempt for e in entries if _workflow_entry(e.entry)}
    pending = 0
    added = []
    row = deps.knowledge.get(knowledge_id) if attempts - counted else None
    for attempt in sorted(attempts - counted):
        name = execution_name(knowledge_id, attempt)
        transitions = deps.workflow.transitions(name)
        if transitions is None:
            if not _attempt_over(row, attempt) or deps.workflow.is_running(name):
                pending += 1
                continue
            transitions = 0  # the attempt ended (failed, cancelled, superseded) before it started one
        sample = next(e for e in entries if e.attempt == attempt)
        entry = UsageEntry(
            knowledge_id,
            f"{attempt:06d}#{WORKFLOW_STAGE}#execution",
            sample.kb_id,
            sample.tenant_id,
            {metering.SFN_TRANSITIONS: float(transitions)},
            now_iso(),
        )
        deps.usage.put(entry)  # same key every time: a second report rewrites the same entry
        added.append(entry)
    return entries + added, pending


def priced(entries: Iterable[UsageEntry], table: Mapping[str, float | str]) -> dict[str, Any]:
    """Sums the entries and prices them: AWS lines, model-token lines apart, by stage."""
    total: Counter[str] = Counter()
    by_stage: dict[str, Counter[str]] = defaultdict(Counter)
    for entry in entries:
        total.update(entry.counts)
        by_stage[entry.stage].update(entry.counts)
    aws = [line for line in cost_lines(total, table) if not is_model_tokens(line.counter)]
    tokens = [line for line in cost_lines(total, table) if is_model_tokens(line.counter)]
    return {
        "currency": "USD",
        "prices_as_of": str(table.get("as_of", "")),
        "aws_dollars": round(sum(line.dollars for line in aws), 10),
        "model_dollars": round(sum(line.dollars for line in tokens), 10),
        "lines": [
            {
                "unit": line.counter,
                "quantity": line.quantity,
                "unit_price": float(f"{line.unit_price:.12g}"),  # 2e-07, not 2.0000000000000002e-07
                "dollars": round(line.dollars, 10),  # no float noise in money
            }
            for line in aws
        ],
        "model_tokens": [
            {
                "unit": line.counter,
                "quantity": line.quantity,
                "unit_price": float(f"{line.unit_price:.12g}"),  # 2e-07, not 2.0000000000000002e-07
                "dollars": round(line.dollars, 10),  # no float noise in money
            }
            for line in tokens
        ],
        "by_stage": {
            stage: round(sum(line.dollars for line in cost_lines(counts, table)), 10)
            for stage, counts in sorted(by_stage.items())
        },
    }


def lambda_duration_basis(deps: Dependencies) -> str:
    """What the Lambda GB-seconds were counted from (services/usage.py `metered_invocation`)."""
    if deps.settings.on_lambda:
        return "duration: each invocation's run time, as Lambda bills it"
    return (
        "work: each local invocation's CPU time, with that of its pool threads, embedding worker processes and "
        "child processes (a loaded machine does not raise it); Lambda would bill the duration"
    )


def knowledge_cost(deps: Dependencies, tenant_id: str, knowledge_id: str) -> dict[str, Any]:
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    entries, pending = fill_workflow_usage(deps, knowledge.id, deps.usage.for_knowledge(knowledge.id))
    report = priced(entries, price_table(deps.settings.prices_file))
    report.update(
        knowledge_id=knowledge.id,
        attempts=sorted({e.attempt for e in entries}),
        workflow_pending=pending,
        lambda_seconds_counted=lambda_duration_basis(deps),
    )
    return report


def kb_cost(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    """What the knowledge base cost: its documents' entries (a moved document's count where it is now: the
    move carries them, `carry_usage`), its deleted documents' (still paid for, shown apart too) and its own
    work's (FAQ imports, wiki finalizes, lifecycle tasks; `kb_usage_id`). One read of its entries and one
    batch read of the rows they name."""
    require_kb(deps, tenant_id, kb_id)
    by_knowledge: dict[str, list[UsageEntry]] = defaultdict(list)
    for entry in deps.usage.for_kb(kb_id):
        by_knowledge[entry.knowledge_id].append(entry)
    own_work = by_knowledge.pop(kb_usage_id(kb_id), [])
    rows = deps.knowledge.get_many(list(by_knowledge))
    documents: list[UsageEntry] = []
    deleted: list[UsageEntry] = []
    deleted_count = documents_count = pending = fills = carries = 0
    for knowledge_id, own in by_knowledge.items():
        row = rows.get(knowledge_id)
        if row is not None and row.kb_id != kb_id:  # moved away before its entries were carried
            if carries < KB_USAGE_CARRIES:
                carries += 1
                carry_usage(deps, own, row.kb_id)
            continue
        missing = {e.attempt for e in own} - {e.attempt for e in own if _workflow_entry(e.entry)}
        if missing and fills < KB_WORKFLOW_FILLS:
            fills += 1
            own, running = fill_workflow_usage(deps, knowledge_id, own)
            pending += running
        elif missing:
            pending += len(missing)
        if row is None:
            deleted_count += 1
            deleted.extend(own)
        else:
            documents_count += 1
            documents.extend(own)
    table = price_table(deps.settings.prices_file)
    report = priced(documents + deleted + own_work, table)
    report.update(
        kb_id=kb_id,
        documents=documents_count,
        deleted_documents={"documents": deleted_count, **_dollars(priced(deleted, table))},
        knowledge_base_work=_dollars(priced(own_work, table)),
        workflow_pending=pending,
        lambda_seconds_counted=lambda_duration_basis(deps),
    )
    return report


def _dollars(report: Mapping[str, Any]) -> dict[str, float]:
    return {"aws_dollars": report["aws_dollars"], "model_dollars": report["model_dollars"]}
