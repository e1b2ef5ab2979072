"""A replace import's deletions (importing.py), in an order that loses no entry.

Entries no row names go when the rows start; an entry a new row takes the place of (the same standard
question, new content: `PlannedRow.replaces`) goes only once that row's entry is written and indexed, so at
every step one of the two is stored and found. The new entry takes over the old one's question
reservations (reservations.claim's `yielding`) and is counted on the quota for its growth over the old
one's bytes, which the plan counted as free for it (import_claims.count_new). An import that stops with
rows not written keeps their old entries, holding their questions again.
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
) -> bool:
    """The old entries of `rows`: one whose replacement is written goes (a redelivery deletes none twice).
    `batch_done`: the rows' batch was carried out, so a row still `add` was written; else (an import that
    stopped) one is written when its entry is stored and indexed. An old entry whose replacement was not
    written (the row failed while the import ran, or the import stopped first) stays, as the plan keeps one
    a failed row names (validation.py), holding its questions again (those its replacement had taken over
    are taken back), unless another entry has one of them by now: then it goes, as the plan would have
    decided. Returns whether the plan changed (an entry kept)."""
    rows = [r for r in rows if r.replaces and r.replaces not in plan.kept]
    if not rows:
        return False
    if batch_done:
        written = {r.entry_id for r in rows if r.action == "add"}
    else:
        stored = deps.faq.get_entries(kb.id, [r.entry_id for r in rows])
        written = {i for i, entry in stored.items() if entry.indexed}
    delete(deps, kb, index, [r.replaces for r in rows if r.entry_id in written])
    left = {r.replaces: r.entry_id for r in rows if r.entry_id not in written}
    lost: list[str] = []
    kept = False
    for entry in deps.faq.get_entries(kb.id, list(left)).values() if left else []:
        wanted = question_keys(entry)
        _, clashes = claim(deps, kb.id, entry.id, wanted, {left[entry.id]})
        if clashes:
            deps.faq.release_questions(kb.id, entry.id, [k for k in wanted if k not in clashes])
            lost.append(entry.id)
            continue
        deps.faq.confirm_questions(kb.id, entry.id, list(wanted))
        plan.kept.append(entry.id)
        kept = True
    delete(deps, kb, index, lost)
    return kept


def freed(
    deps: Dependencies, kb: KnowledgeBase, rows: Sequence[PlannedRow], waiting: set[str]
) -> dict[str, int]:
    """Per new entry of `rows`, the bytes the entry it replaces still counts (it goes after it): the plan
    counted them as free for it (import_claims.count_new)."""
    olds = deps.faq.get_entries(kb.id, [r.replaces for r in rows if r.replaces in waiting])
    return {r.entry_id: olds[r.replaces].counted_bytes for r in rows if r.replaces in olds}


def stopped(deps: Dependencies, kb: KnowledgeBase, task: Task, plan: Plan | None) -> None:
    """An import that ended before its last rows (failed for good): the entries those rows were to replace
    stay, holding their questions again; one whose replacement a batch that died wrote goes. `plan`: the
    import's, read back from its object when not given (None before it was planned)."""
    plan_url = str(task.params.get("plan_url", ""))
    if plan is None and plan_url and deps.inbox.exists(plan_url):
        plan = Plan.from_json(json.loads(deps.inbox.read(plan_url)))
    if plan is not None and task.done < len(plan.rows):
        settle(deps, kb, FaqIndex(deps, kb), plan, plan.rows[task.done :], batch_done=False)
