"""What a document, or a knowledge base, cost: the metered usage entries priced with the price table.

Step Functions bills per state transition, which no worker sees; an execution's transitions are read from
its history once it has finished and stored as one more usage entry (`workflow`), the first time a cost is
asked for.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.ids import execution_name
from chalicelib.domain.pricing import cost_lines, is_model_tokens, price_table
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import Knowledge
from chalicelib.operations import kb_reports
from chalicelib.operations.kb_reports import COST, OverBound, bounded, fresh, stored_answer
from chalicelib.ports import Dependencies, UsageEntry
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.usage import carry_usage, kb_usage_id

WORKFLOW_STAGE = "workflow"
#: a knowledge base's report fills in at most this many documents' workflow transitions per request
KB_WORKFLOW_FILLS = 25
#: and carries at most this many moved documents' entries to where they are now (a move carries its own)
KB_USAGE_CARRIES = 25
#: the same in a refresh of a big knowledge base's report (the lifecycle function's 300 s: a fill reads an
#: execution's history, a carry rewrites a document's entries; the rest waits for the next refresh)
REFRESH_WORKFLOW_FILLS = 400
REFRESH_USAGE_CARRIES = 400


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
    counted = {e.attempt for e in entries if _workflow_entry(e.entry)}
    samples: dict[int, UsageEntry] = {}
    for entry in entries:
        if entry.attempt not in counted:
            samples.setdefault(entry.attempt, entry)
    added, pending = _fill_attempts(deps, knowledge_id, samples)
    return entries + added, pending


def _fill_attempts(
    deps: Dependencies, knowledge_id: str, samples: Mapping[int, UsageEntry]
) -> tuple[list[UsageEntry], int]:
    """The workflow entries of the attempts `samples` names (an entry of each: its knowledge base and
    tenant) whose execution has finished; and how many are still running."""
    pending = 0
    added = []
    row = deps.knowledge.get(knowledge_id) if samples else None
    for attempt in sorted(samples):
        name = execution_name(knowledge_id, attempt)
        transitions = deps.workflow.transitions(name)
        if transitions is None:
            if not _attempt_over(row, attempt) or deps.workflow.is_running(name):
                pending += 1
                continue
            transitions = 0  # the attempt ended (failed, cancelled, superseded) before it started one
        sample = samples[attempt]
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
    return added, pending


@dataclass
class Sums:
    """Usage counts added up: in all and by stage."""

    total: Counter[str] = field(default_factory=Counter)
    by_stage: defaultdict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))

    def add(self, entry: UsageEntry) -> None:
        self.total.update(entry.counts)
        self.by_stage[entry.stage].update(entry.counts)

    def merge(self, other: Sums) -> None:
        self.total.update(other.total)
        for stage, counts in other.by_stage.items():
            self.by_stage[stage].update(counts)


def priced(entries: Iterable[UsageEntry], table: Mapping[str, float | str]) -> dict[str, Any]:
    """Sums the entries and prices them: AWS lines, model-token lines apart, by stage."""
    sums = Sums()
    for entry in entries:
        sums.add(entry)
    return priced_sums(sums, table)


def priced_sums(sums: Sums, table: Mapping[str, float | str]) -> dict[str, Any]:
    total, by_stage = sums.total, sums.by_stage
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
    """What the knowledge base cost, read inline within kb_reports' bound: past it, the stored report of a
    refresh that read it whole (operations/kb_reports.py)."""
    kb = require_kb(deps, tenant_id, kb_id)
    as_of = now_iso()
    try:
        report = kb_cost_report(
            deps,
            kb.id,
            bounded(deps.usage.for_kb(kb.id), kb_reports.INLINE_USAGE_ENTRIES),
            fills=KB_WORKFLOW_FILLS,
            carries=KB_USAGE_CARRIES,
        )
    except OverBound:
        return stored_answer(deps, kb, COST)
    return fresh(report, as_of)


@dataclass
class _Spent:
    """One document's entries added up, and what its workflow fill needs."""

    sums: Sums = field(default_factory=Sums)
    #: the first entry of each attempt (its knowledge base and tenant, for a workflow entry)
    samples: dict[int, UsageEntry] = field(default_factory=dict)
    #: the attempts whose workflow entry is in
    counted: set[int] = field(default_factory=set)

    def add(self, entry: UsageEntry) -> None:
        self.sums.add(entry)
        self.samples.setdefault(entry.attempt, entry)
        if _workflow_entry(entry.entry):
            self.counted.add(entry.attempt)


def kb_cost_report(
    deps: Dependencies, kb_id: str, entries: Iterable[UsageEntry], *, fills: int, carries: int
) -> dict[str, Any]:
    """What the knowledge base cost from its usage `entries` (every one of `for_kb`; a request's are bounded,
    a refresh's are not): its documents' entries (a moved document's count where it is now: the report
    carries at most `carries` of them, as a move carries its own, `carry_usage`), its deleted documents'
    (still paid for, shown apart too) and its own work's (FAQ imports, wiki finalizes, lifecycle tasks;
    `kb_usage_id`), with at most `fills` documents' finished executions' transitions filled in. Reads the
    entries, then one batch read of the rows they name; writes only after the read. A document is kept as
    its sums, not its entries."""
    spent: dict[str, _Spent] = {}
    for entry in entries:
        spent.setdefault(entry.knowledge_id, _Spent()).add(entry)
    own_work = spent.pop(kb_usage_id(kb_id), None) or _Spent()
    rows = deps.knowledge.get_many(list(spent))
    documents, deleted = Sums(), Sums()
    deleted_count = documents_count = pending = filled = carried = 0
    for knowledge_id, own in spent.items():
        row = rows.get(knowledge_id)
        if row is not None and row.kb_id != kb_id:  # moved away before its entries were carried
            if carried < carries:
                carried += 1
                carry_usage(deps, deps.usage.for_knowledge(knowledge_id), row.kb_id)
            continue
        missing = set(own.samples) - own.counted
        if missing and filled < fills:
            filled += 1
            added, running = _fill_attempts(deps, knowledge_id, {a: own.samples[a] for a in missing})
            for entry in added:
                own.add(entry)
            pending += running
        elif missing:
            pending += len(missing)
        if row is None:
            deleted_count += 1
            deleted.merge(own.sums)
        else:
            documents_count += 1
            documents.merge(own.sums)
    table = price_table(deps.settings.prices_file)
    whole = Sums()
    for part in (documents, deleted, own_work.sums):
        whole.merge(part)
    report = priced_sums(whole, table)
    report.update(
        kb_id=kb_id,
        documents=documents_count,
        deleted_documents={"documents": deleted_count, **_dollars(priced_sums(deleted, table))},
        knowledge_base_work=_dollars(priced_sums(own_work.sums, table)),
        workflow_pending=pending,
        lambda_seconds_counted=lambda_duration_basis(deps),
    )
    return report


def _dollars(report: Mapping[str, Any]) -> dict[str, float]:
    return {"aws_dollars": report["aws_dollars"], "model_dollars": report["model_dollars"]}
