"""A replace import's deletions (importing.py), in an order that loses no entry.

Entries no row names go when the rows start; an entry a new row takes the place of (the same standard
question, new content: `PlannedRow.replaces`) goes only once that row's batch is written and indexed, so at
every step at least one of the two is stored and found (both for a moment). The new entry takes over the
old one's question reservations (`Takeover`: reservations.claim's `yielding`) and is counted on the quota
for what it adds over the old one's bytes, which the plan counted as free for it (import_claims.count_new).
A row that fails, or an import that stops with rows not written, keeps their old entries, holding their
questions again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chalicelib.faq.entries import give_back_storage
from chalicelib.faq.index import FaqIndex
from chalicelib.faq.reservations import claim, question_keys, release_entries
from chalicelib.faq.validation import Plan

if TYPE_CHECKING:
    from chalicelib.domain.types import KnowledgeBase, Task
    from chalicelib.faq.validation import PlannedRow
    from chalicelib.ports import Dependencies


def replaced(plan: Plan) -> set[str]:
    """The entries deleted only once the rows that take their places are written, less those kept because
    such a row failed."""
    return {r.replaces for r in plan.rows if r.replaces} - set(plan.kept)


def deleted(plan: Plan, done: int) -> int:
    """The plan's deletions made once `done` rows are: all but the entries replaced by rows still to do
    and those kept for their failed rows."""
    waiting = {r.replaces for r in plan.rows[done:] if r.replaces} | set(plan.kept)
    return len([i for i in plan.delete if i not in waiting])


def delete_unreplaced(deps: Dependencies, kb: KnowledgeBase, index: FaqIndex, plan: Plan, batch: int) -> None:
    """The plan's deletions no row replaces (they go first, `batch` at a time)."""
    later = replaced(plan)
    now = [i for i in plan.delete if i not in later]
    for start in range(0, len(now), batch):
        delete(deps, kb, index, now[start : start + batch])


def delete(deps: Dependencies, kb: KnowledgeBase, index: FaqIndex, ids: Sequence[str]) -> None:
    """Vectors first (a crash leaves rows to delete again, never ghost hits), then the rows; what the rows
    this removed held and counted is given back (an earlier try's are not again; a question a replacement
    took over stays its own, as a release is the holder's only)."""
    if not ids:
        return
    index.remove_entries(ids)
    gone = deps.faq.delete_entries(kb.id, ids)
    release_entries(deps, kb.id, gone)  # (a row deleted by an earlier try: taken over when claimed)
    give_back_storage(deps, kb.tenant_id, gone)


def settle(
    deps: Dependencies,
    kb: KnowledgeBase,
    index: FaqIndex,
    plan: Plan,
    rows: Sequence[PlannedRow],
    *,
    batch_done: bool,
) -> tuple[list[str], list[str]]:
    """The old entries of `rows`: one whose replacement is written goes (a redelivery deletes none twice).
    `batch_done`: the rows' batch was carried out, so a row still `add` was written; else (an import that
    stopped) one is written when its entry is stored and indexed. An old entry whose replacement was not
    written (the import stopped first, or the row failed and a row before it took one of the entry's
    questions: `Takeover`) stays if it can hold its questions again (`_keep`), else goes, as the plan would
    have decided. Returns the entries it deleted and those it kept (the plan changed then)."""
    rows = [r for r in rows if r.replaces and r.replaces not in plan.kept]
    if not rows:
        return [], []
    if batch_done:
        written = {r.entry_id for r in rows if r.action == "add"}
    else:
        stored = deps.faq.get_entries(kb.id, [r.entry_id for r in rows])
        written = {i for i, entry in stored.items() if entry.indexed}
    replaced_now = [r.replaces for r in rows if r.entry_id in written]
    delete(deps, kb, index, replaced_now)
    kept, lost = _keep(deps, kb, plan, {r.replaces: r.entry_id for r in rows if r.entry_id not in written})
    delete(deps, kb, index, lost)
    return replaced_now + lost, kept


def _keep(
    deps: Dependencies, kb: KnowledgeBase, plan: Plan, left: dict[str, str]
) -> tuple[list[str], list[str]]:
    """Old entries (-> their replacements, not written) that stay, holding their questions again (those
    their replacements had taken over are taken back; kept by the plan, as it keeps an entry a failed row
    names: validation.py), unless another entry has one of them by now. Returns those kept and those
    that lost a question (to be deleted)."""
    kept: list[str] = []
    lost: list[str] = []
    for entry in deps.faq.get_entries(kb.id, list(left)).values() if left else []:
        wanted = question_keys(entry)
        _, clashes = claim(deps, kb.id, entry.id, wanted, {left[entry.id]})
        if clashes:
            deps.faq.release_questions(kb.id, entry.id, [k for k in wanted if k not in clashes])
            lost.append(entry.id)
            continue
        deps.faq.confirm_questions(kb.id, entry.id, list(wanted))
        plan.kept.append(entry.id)
        kept.append(entry.id)
    return kept, lost


class Takeover:
    """The entries whose question reservations a batch's new entries take over (reservations.claim's
    `yielding`): those the plan's rows replace, less those kept. A row that fails while its batch is
    claimed (its standard question taken, or the quota: import_claims.hold_questions) gives its entry its
    questions back at once, before the rows after it claim theirs: those rows lose them (`partial`) and
    the entry stays, as the plan decides (validation.plan_replace: a failed row's entry goes only if a row
    before it took one of its questions; such an entry stays here, and goes once the batch is done)."""

    def __init__(self, deps: Dependencies, kb: KnowledgeBase, plan: Plan) -> None:
        self._deps, self._kb, self._plan = deps, kb, plan
        self.ids = replaced(plan)

    def failed(self, row: PlannedRow) -> None:
        old = row.replaces
        if old in self.ids and _keep(self._deps, self._kb, self._plan, {old: row.entry_id})[0]:
            self.ids.discard(old)


def freed(
    deps: Dependencies, kb: KnowledgeBase, rows: Sequence[PlannedRow], waiting: set[str]
) -> dict[str, int]:
    """Per new entry of `rows`, the bytes the entry it replaces still counts (it goes after it): the plan
    counted them as free for it (import_claims.count_new)."""
    olds = deps.faq.get_entries(kb.id, [r.replaces for r in rows if r.replaces in waiting])
    return {r.entry_id: olds[r.replaces].counted_bytes for r in rows if r.replaces in olds}


def stopped(deps: Dependencies, kb: KnowledgeBase, task: Task, plan: Plan | None) -> None:
    """An import that ended before its last rows (failed for good): the entries those rows were to replace
    stay, holding their questions again; one whose replacement a batch that died wrote goes. What it
    deletes and keeps is added to the task's progress (saved after it, then the last import's result).
    `plan`: the import's, read back from its object when not given (None before it was planned)."""
    plan_url = str(task.params.get("plan_url", ""))
    if plan is None and plan_url and deps.inbox.exists(plan_url):
        plan = Plan.from_json(json.loads(deps.inbox.read(plan_url)))
    if plan is not None and task.done < len(plan.rows):
        gone, kept = settle(deps, kb, FaqIndex(deps, kb), plan, plan.rows[task.done :], batch_done=False)
        progress = task.progress  # it counted the plan's deletions and keeps up to its last batch
        progress["deleted"] = int(progress.get("deleted", 0)) + len(gone)
        progress["kept_for_failed_rows"] = int(progress.get("kept_for_failed_rows", 0)) + len(kept)
