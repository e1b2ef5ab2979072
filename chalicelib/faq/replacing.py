"""A replace import's deletions (importing.py), in an order that loses no entry.

Entries no row names go when the rows start; an entry a new row takes the place of (the same standard
question, new content: `PlannedRow.replaces`) goes only once that row's batch is written and indexed, so at
every step at least one of the two is stored and found (both for a moment). The new entry takes over the
old one's question reservations (`Takeover`: reservations.claim's `yielding`) and the old one's count
(`move_count`: one conditional write, so an entries-API delete of the old entry meanwhile either came first
and the new entry counts in full, or gives back nothing), then is counted on the quota for what it adds
(import_claims.count_new). A row that fails, or an import that stops with rows not written, keeps their old
entries, holding their questions and their counts again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from chalicelib.domain.faq import FaqEntry
from chalicelib.faq.entries import give_back_storage, later_than
from chalicelib.faq.index import FaqIndex
from chalicelib.faq.reservations import claim, question_keys, release_entries
from chalicelib.faq.validation import Plan
from chalicelib.ports.faq import EntryWriteRefused

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
    have decided, counting its bytes again (`count_again`). Returns the entries it deleted and those it kept
    (the plan changed then)."""
    rows = [r for r in rows if r.replaces and r.replaces not in plan.kept]
    if not rows:
        return [], []
    if batch_done:
        written = {r.entry_id for r in rows if r.action == "add"}
    else:
        stored = deps.faq.get_entries(kb.id, [r.entry_id for r in rows])
        written = {i for i, entry in stored.items() if entry.indexed}
        unmove(deps, kb, {r.replaces: r.entry_id for r in rows if r.entry_id not in stored})
        # one not indexed goes (importing._purge_unindexed) with the count its old entry moved onto it
        count_again(deps, kb, [r.replaces for r in rows if r.entry_id in set(stored) - written])
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


def olds(
    deps: Dependencies, kb: KnowledgeBase, rows: Sequence[PlannedRow], waiting: set[str]
) -> dict[str, FaqEntry]:
    """Per new entry of `rows`, the entry it replaces as stored now (it goes after it): its count moves onto
    the new entry (`move_count`), as the plan counted its bytes free for it."""
    found = deps.faq.get_entries(kb.id, [r.replaces for r in rows if r.replaces in waiting])
    return {r.entry_id: found[r.replaces] for r in rows if r.replaces in found}


#: conditional writes a move tries while other writers change the old entry
MOVE_TRIES = 3


@dataclass(frozen=True)
class Move:
    """An old entry's count moved onto its replacement: the entry as the move left it (counting 0) and the
    bytes moved."""

    left: FaqEntry
    moved: int


def move_count(deps: Dependencies, old: FaqEntry, new_id: str) -> Move | None:
    """The old entry's count set to 0 in one conditional write, if its row is still the one read (its
    `updated_at`, which every write of a count renews; the move renews it too, so an update that read the
    row before is refused): a delete through the API came first (nothing moved, the replacement counts in
    full) or comes after (it gives back 0). A row changed meanwhile is read again. None: nothing moved (the
    old entry still counts its bytes, and gives them back when it goes)."""
    current: FaqEntry | None = old
    for _ in range(MOVE_TRIES):
        if current is None or not current.counted_bytes:
            return None
        left = replace(
            current, counted_bytes=0, count_moved_to=new_id, updated_at=later_than(current.updated_at)
        )
        try:
            deps.faq.put_entry(left, current)
        except EntryWriteRefused as refused:
            current = None if refused.gone else deps.faq.get_entry(old.kb_id, old.id)
            continue
        return Move(left, current.counted_bytes)
    return None


def give_back_moved(deps: Dependencies, tenant_id: str, move: Move | None, counted: int) -> None:
    """A replacement not written that counted `counted` bytes, `move`'s of them moved from its old entry:
    those go back onto the old entry if it is still as the move left it (one conditional write), the rest
    (all, when the entry was deleted or written meanwhile: that writer gave back or counted its own) off
    the tenant's usage. Given back once either way."""
    back = counted
    if move is not None:
        again = replace(
            move.left,
            counted_bytes=move.moved,
            count_moved_to="",
            updated_at=later_than(move.left.updated_at),
        )
        try:
            deps.faq.put_entry(again, move.left)
            back -= move.moved
        except EntryWriteRefused:
            pass  # gone (its delete gave back 0) or rewritten (counted from 0): the bytes are the tenant's
    if back:
        deps.tenants.add_usage(tenant_id, -back)


def unmove(deps: Dependencies, kb: KnowledgeBase, moved_to: dict[str, str]) -> None:
    """Old entries (-> their replacements, not stored) whose count a delivery moved and then died between the
    move and the count (a hard kill: no handler gave it back): the count goes back onto the old entry (one
    conditional write), the usage untouched (it still holds those bytes)."""
    for old in deps.faq.get_entries(kb.id, list(moved_to)).values() if moved_to else []:
        if old.counted_bytes or not old.count_moved_to or old.count_moved_to != moved_to[old.id]:
            continue
        again = replace(
            old, counted_bytes=old.content_bytes(), count_moved_to="", updated_at=later_than(old.updated_at)
        )
        try:
            deps.faq.put_entry(again, old)
        except EntryWriteRefused:
            continue  # deleted (it gave back 0: the replacement, when counted, counts in full) or rewritten


def count_again(deps: Dependencies, kb: KnowledgeBase, old_ids: Sequence[str]) -> None:
    """Old entries whose replacements were written but not indexed (those go, giving back what they count,
    the moved counts with them): each that counts 0 counts its bytes again (an entry counts its
    `content_bytes` or 0, after a move or when saved before entries counted, which counts from its next
    write on), one conditional write, added to the tenant's usage; one written meanwhile counted its own."""
    for old in deps.faq.get_entries(kb.id, old_ids).values() if old_ids else []:
        if old.counted_bytes:
            continue
        again = replace(
            old, counted_bytes=old.content_bytes(), count_moved_to="", updated_at=later_than(old.updated_at)
        )
        try:
            deps.faq.put_entry(again, old)
        except EntryWriteRefused:
            continue
        deps.tenants.add_usage(kb.tenant_id, again.counted_bytes)


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
