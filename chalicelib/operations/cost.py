"""What a document, or a knowledge base, cost: the metered usage entries priced with the price table.

Step Functions bills per state transition, which no worker sees; an execution's transitions are read from
its history once it has finished and stored as one more usage entry (`workflow`), the first time a cost is
asked for.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.ids import execution_name
from chalicelib.domain.pricing import cost_lines, is_model_tokens, price_table
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import Knowledge
from chalicelib.operations import kb_reports
from chalicelib.operations.kb_reports import COST, OverBound, inline_or_stored
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
#: usage entries a report's walk reads a page (one Query of the KB index)
USAGE_PAGE = 1000


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

    def to_json(self) -> dict[str, Any]:
        return {"total": dict(self.total), "by_stage": {k: dict(v) for k, v in self.by_stage.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Sums:
        sums = cls(Counter(data["total"]))
        for stage, counts in data["by_stage"].items():
            sums.by_stage[stage] = Counter(counts)
        return sums


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
    return inline_or_stored(
        deps,
        kb,
        COST,
        lambda: kb_cost_report(
            deps,
            kb.id,
            fills=KB_WORKFLOW_FILLS,
            carries=KB_USAGE_CARRIES,
            max_entries=kb_reports.INLINE_USAGE_ENTRIES,
        ),
    )


#: where a document of a walk is (`CostWalk.docs`): in the knowledge base, gone; else the id of the
#: knowledge base it moved to before its entries were carried
LIVE = 0
DELETED = 1
#: a document's state in a walk: [where, its tenant (an index of `tenants`), attempts seen, attempts with
#: their workflow entry] (the attempts as bit masks)
WHERE, TENANT, SEEN, COUNTED = range(4)


@dataclass
class CostWalk:
    """A knowledge base's cost report under way, read a page of usage entries at a time (from `cursor`):
    each entry is added, as it is read, to its group's sums (documents, deleted documents, the knowledge
    base's own work; a moved document's to none), its document classified the first time the walk meets it
    (one batch read of a page's new ids) and kept as a few small numbers, not its entries or its row. Once
    every entry is read, a pass over the documents fills finished executions' transitions and carries moved
    documents' entries (`finished` counts the documents it went through). Its JSON is a refresh's
    checkpoint (operations/kb_report_refresh.py), so a refresh goes on where one delivery stopped."""

    kb_id: str
    cursor: str | None = None
    walked: bool = False
    #: entries read
    entries: int = 0
    #: entries written after it (ISO) are left out: a refresh's walk, which may take hours, holds what was
    #: there when it began (its `as_of`; its own slices' usage among what it leaves out); '' for none
    until: str = ""
    docs: dict[str, list[Any]] = field(default_factory=dict)
    tenants: list[str] = field(default_factory=list)
    documents: Sums = field(default_factory=Sums)
    deleted: Sums = field(default_factory=Sums)
    own: Sums = field(default_factory=Sums)
    finished: int = 0
    filled: int = 0
    carried: int = 0
    pending: int = 0

    @property
    def done(self) -> bool:
        return self.walked and self.finished >= len(self.docs)

    def to_json(self) -> dict[str, Any]:
        return {
            "kb_id": self.kb_id,
            "cursor": self.cursor,
            "walked": self.walked,
            "entries": self.entries,
            "docs": self.docs,
            "tenants": self.tenants,
            "sums": [self.documents.to_json(), self.deleted.to_json(), self.own.to_json()],
            "finished": self.finished,
            "filled": self.filled,
            "carried": self.carried,
            "pending": self.pending,
            "until": self.until,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CostWalk:
        documents, deleted, own = (Sums.from_json(s) for s in data["sums"])
        return cls(
            kb_id=data["kb_id"],
            cursor=data["cursor"],
            walked=data["walked"],
            entries=data["entries"],
            docs=data["docs"],
            tenants=data["tenants"],
            documents=documents,
            deleted=deleted,
            own=own,
            finished=data["finished"],
            filled=data["filled"],
            carried=data["carried"],
            pending=data["pending"],
            until=str(data.get("until") or ""),  # (a checkpoint written before walks had it)
        )


def _never() -> bool:
    return False


def kb_cost_report(
    deps: Dependencies, kb_id: str, *, fills: int, carries: int, max_entries: int | None = None
) -> dict[str, Any]:
    """What the knowledge base cost, its whole walk in one go (`advance_cost`): OverBound past `max_entries`
    entries (a request's bound; a refresh walks in slices with the same functions)."""
    walk = CostWalk(kb_id)
    advance_cost(deps, walk, fills=fills, carries=carries, max_entries=max_entries)
    return cost_of(deps, walk)


def advance_cost(
    deps: Dependencies,
    walk: CostWalk,
    *,
    fills: int,
    carries: int,
    stop: Callable[[], bool] = _never,
    max_entries: int | None = None,
) -> bool:
    """Walks on until the walk is done (True) or `stop` says so after a page or a fill or carry (False):
    the knowledge base's documents' entries (a moved document's count where it is now: the report carries
    at most `carries` of them, as a move carries its own, `carry_usage`), its deleted documents' (still paid
    for, shown apart too) and its own work's (FAQ imports, wiki finalizes, lifecycle tasks; `kb_usage_id`),
    with at most `fills` documents' finished executions' transitions filled in. Writes only once every entry
    is read. OverBound when it reads past `max_entries`."""
    while not walk.walked:
        limit = USAGE_PAGE if max_entries is None else min(USAGE_PAGE, max_entries + 1 - walk.entries)
        page = deps.usage.kb_page(walk.kb_id, walk.cursor, limit)
        walk.entries += len(page.entries)
        if max_entries is not None and walk.entries > max_entries:
            raise OverBound
        _add_page(deps, walk, page.entries)
        walk.cursor = page.cursor
        walk.walked = page.cursor is None
        if stop():
            return walk.done
    for knowledge_id, state in islice(walk.docs.items(), walk.finished, None):
        walk.finished += 1
        if _finish(deps, walk, knowledge_id, state, fills=fills, carries=carries) and stop():
            return walk.done
    return True


def _add_page(deps: Dependencies, walk: CostWalk, entries: list[UsageEntry]) -> None:
    """A page's entries into their groups' sums; its documents the walk has not met classified first."""
    own_id = kb_usage_id(walk.kb_id)
    new = list(dict.fromkeys(e.knowledge_id for e in entries if e.knowledge_id not in walk.docs))
    new = [knowledge_id for knowledge_id in new if knowledge_id != own_id]
    rows = deps.knowledge.get_many(new) if new else {}
    for entry in entries:
        if walk.until and entry.created_at > walk.until:
            continue
        if entry.knowledge_id == own_id:
            walk.own.add(entry)
            continue
        state = walk.docs.get(entry.knowledge_id)
        if state is None:
            row = rows.get(entry.knowledge_id)
            where: int | str = DELETED if row is None else LIVE if row.kb_id == walk.kb_id else row.kb_id
            if entry.tenant_id not in walk.tenants:
                walk.tenants.append(entry.tenant_id)
            state = walk.docs[entry.knowledge_id] = [where, walk.tenants.index(entry.tenant_id), 0, 0]
        bit = 1 << entry.attempt
        state[SEEN] |= bit
        if _workflow_entry(entry.entry):
            state[COUNTED] |= bit
        if state[WHERE] == LIVE:
            walk.documents.add(entry)
        elif state[WHERE] == DELETED:
            walk.deleted.add(entry)
        # a moved document's entries count where it is now (carried below), not here


def _finish(
    deps: Dependencies, walk: CostWalk, knowledge_id: str, state: list[Any], *, fills: int, carries: int
) -> bool:
    """A document's fill or carry, if it has one; True when it read or wrote something."""
    where = state[WHERE]
    if isinstance(where, str):  # moved away before its entries were carried
        if walk.carried >= carries:
            return False
        walk.carried += 1
        # where it is now: a refresh's walk met it slices ago, and it may have moved again (back here, too)
        row = deps.knowledge.get(knowledge_id)
        if row is not None and row.kb_id != walk.kb_id:
            carry_usage(deps, deps.usage.for_knowledge(knowledge_id), row.kb_id)
        return True
    missing = state[SEEN] & ~state[COUNTED]
    if not missing:
        return False
    attempts = [a for a in range(missing.bit_length()) if missing >> a & 1]
    if walk.filled >= fills:
        walk.pending += len(attempts)
        return False
    walk.filled += 1
    tenant = walk.tenants[state[TENANT]]
    samples = {a: UsageEntry(knowledge_id, "", walk.kb_id, tenant, {}, "") for a in attempts}
    added, running = _fill_attempts(deps, knowledge_id, samples)
    for entry in added:
        (walk.documents if where == LIVE else walk.deleted).add(entry)
    walk.pending += running
    return True


def cost_of(deps: Dependencies, walk: CostWalk) -> dict[str, Any]:
    """The report of a walk that is done."""
    table = price_table(deps.settings.prices_file)
    whole = Sums()
    for part in (walk.documents, walk.deleted, walk.own):
        whole.merge(part)
    report = priced_sums(whole, table)
    wheres = [state[WHERE] for state in walk.docs.values()]
    report.update(
        kb_id=walk.kb_id,
        documents=wheres.count(LIVE),
        deleted_documents={"documents": wheres.count(DELETED), **_dollars(priced_sums(walk.deleted, table))},
        knowledge_base_work=_dollars(priced_sums(walk.own, table)),
        workflow_pending=walk.pending,
        lambda_seconds_counted=lambda_duration_basis(deps),
    )
    return report


def _dollars(report: Mapping[str, Any]) -> dict[str, float]:
    return {"aws_dollars": report["aws_dollars"], "model_dollars": report["model_dollars"]}
