"""An FAQ import's question reservations (reservations.py), batch by batch, before its rows are written.

The plan was made from the knowledge base as it was when the import started; the entries API may have
given one of its questions to an entry since. Each entry a batch writes claims its questions (the holder
is the entry's id: a new entry's is derived from the task and the row, so a redelivered batch claims its
own reservations again), and a question held by another entry is settled by the import's own rules, as
if the plan had seen that entry (validation.py):

- a new entry's standard question that became another entry's standard question: in `append`, the row is
  planned again as a merge into that entry (or a skip, or a reverted merge); in `replace`, the row fails;
- one that became a similar question (or an entry being saved holds it): the row fails (`conflict`);
- a similar question taken meanwhile is removed from the row (`partial`).

An entry a planned merge goes into may have been changed through the API since the plan read it: the row's
merge rule is applied again to the entry as it is now (`merge_again`), so the edit is kept, never written
over with the plan's copy; one the row no longer matches fails (`conflict`). The worker writes a merge only
if the entry is still the one it read (its `updated_at`); an edit saved while the batch embedded fails the
row (`conflict`) and keeps the edit.

The rows changed so are changed in the plan, which the worker stores again before it saves its progress:
counts, failures and the failed-rows CSV follow them, and a redelivered batch works from them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import Forbidden
from chalicelib.domain.faq_normalise import normalise
from chalicelib.faq.entries import later_than, take_back_rewrite
from chalicelib.faq.replacing import Move, give_back_moved, move_count
from chalicelib.faq.reservations import Clash, claim, question_key, question_keys, unconfirmed
from chalicelib.faq.validation import (
    CONFLICT,
    QUOTA,
    ImportRow,
    PlannedRow,
    entry_content,
    plan_append,
    plan_replace,
    storage_change,
)
from chalicelib.ports.faq import EntryWriteRefused
from chalicelib.services.quotas import take_storage

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry
    from chalicelib.domain.types import KnowledgeBase
    from chalicelib.faq.entries import FaqIndex
    from chalicelib.faq.replacing import Takeover
    from chalicelib.ports import Dependencies


@dataclass
class Write:
    """A planned row's entry as the batch writes it: `before` is the entry a merge rewrites (None: new)."""

    row: PlannedRow
    before: FaqEntry | None
    after: FaqEntry


Build = Callable[[PlannedRow, "FaqEntry | None"], "FaqEntry"]


@dataclass
class NewBytes:
    """A batch's new entries' bytes, counted within the quota (`count_new`) into `counted` (`counting`).
    `replaced`: per new entry, the entry it replaces (deleted once the batch is done: replacing.settle);
    `moved`: per new entry counted, that entry's count moved onto it (replacing.move_count)."""

    counted: list[FaqEntry]
    replaced: Mapping[str, FaqEntry]
    moved: dict[str, Move] = field(default_factory=dict)


def hold_questions(
    deps: Dependencies,
    kb: KnowledgeBase,
    mode: str,
    writes: Sequence[Write],
    build: Build,
    takeover: Takeover,
    new: NewBytes,
) -> tuple[list[Write], dict[str, list[str]], bool]:
    """Claims the questions of each write's entry not yet held for good by it (those of `takeover`'s
    entries, which a replace deletes once their replacements are written, are taken over), then counts a
    new entry's bytes (`count_new`), row by row: a row that fails gives its old entry back its questions
    before the next row claims (replacing.Takeover). Returns the writes to do (a row that failed or turned
    into a skip is left out; one turned into a merge comes with its target), the keys claimed per entry id
    (confirm them once the rows are saved), and whether a planned row changed."""
    todo = list(writes)
    pending = unconfirmed(deps, kb.id, [w.after for w in todo])
    out: list[Write] = []
    claimed: dict[str, list[str]] = {}
    changed = False
    while todo:
        write = todo.pop(0)
        after = write.after
        wanted = pending.pop(after.id, None)
        if wanted is None:  # a row planned again as a merge here
            wanted = unconfirmed(deps, kb.id, [after])[after.id]
        _, clashes = claim(deps, kb.id, after.id, wanted, takeover.ids)
        had = question_keys(write.before) if write.before is not None else {}
        clashes = {k: c for k, c in clashes.items() if k not in had}  # the entry's own, as it was: left alone
        standard = question_key(after.standard_question)
        if standard in clashes:  # (never a merge's: its standard question is its target's)
            deps.faq.release_questions(kb.id, after.id, list(wanted))
            changed = True
            target = _taken(write.row, clashes[standard], mode)
            if target is not None:
                todo.append(Write(write.row, target, build(write.row, target)))
            elif write.row.action == "fail":
                takeover.failed(write.row)
            continue
        if clashes:
            _drop(write, list(clashes.values()))
            changed = True
        claimed[after.id] = [k for k in wanted if k not in clashes]
        if write.before is None and not count_new(deps, kb, write, claimed, new):
            takeover.failed(write.row)
            changed = True
            continue
        out.append(write)
    return out, claimed, changed


def confirm_written(
    deps: Dependencies, kb_id: str, entries: Sequence[FaqEntry], yielding: Collection[str] = ()
) -> None:
    """Entries an earlier delivery of the batch wrote and indexed: their questions held for good (that
    delivery may have died before it confirmed them); a question another entry holds stays its own (one
    of `yielding`'s is taken over, as `hold_questions` does)."""
    for entry_id, wanted in unconfirmed(deps, kb_id, list(entries)).items():
        if wanted:
            _, clashes = claim(deps, kb_id, entry_id, wanted, yielding)
            deps.faq.confirm_questions(kb_id, entry_id, [k for k in wanted if k not in clashes])


def _holder(clash: Clash) -> str:
    if clash.other is not None:
        return f"entry {clash.other.id}"
    if clash.holder.entry_id:
        return f"entry {clash.holder.entry_id}, being saved"
    return "another entry"


def _taken(row: PlannedRow, clash: Clash, mode: str) -> FaqEntry | None:
    """A new entry's standard question taken since the plan: the row planned again against the entry that
    took it (append, a saved entry that has it as its standard question), else failed. Returns the entry a
    merge now goes into."""
    other = clash.other
    if (
        mode == "append"
        and row.action == "add"
        and other is not None
        and other.indexed
        and normalise(other.standard_question) == clash.question
    ):
        content = row.content
        again = plan_append(
            [
                ImportRow(
                    row=row.row,
                    question=content["standard_question"],
                    answers=list(content["answers"]),
                    similar=list(content["similar_questions"]),
                    negatives=list(content["negative_questions"]),
                    tags=list(content["tags"]),
                    answer_all=bool(content["answer_all"]),
                    disabled=not content["is_enabled"],
                    given=list(row.source.given),
                )
            ],
            [other],
            lambda _: row.entry_id,
        ).rows[0]
        row.action, row.entry_id, row.content = again.action, other.id, again.content
        row.reason, row.category = again.reason, again.category
        row.notes = [*row.notes, *again.notes]
        row.partial = row.partial or again.partial
        row.base = again.base
        return other if again.action == "merge" else None
    row.action, row.content, row.category = "fail", {}, CONFLICT
    row.reason = f"the question became a question of {_holder(clash)} while the import ran"
    return None


def _drop(write: Write, gone: Sequence[Clash]) -> None:
    """Similar questions taken meanwhile go from the entry and its planned row (partial)."""
    dropped = {clash.question for clash in gone}
    after = write.after
    after.similar_questions = [q for q in after.similar_questions if normalise(q) not in dropped]
    after.rehash()
    write.row.content = {
        **write.row.content,
        "similar_questions": list(after.similar_questions),
        "content_hash": after.content_hash,
    }
    write.row.partial = True
    write.row.notes = [
        *write.row.notes,
        *(
            f"similar question {clash.question!r} removed: it became a question of {_holder(clash)} "
            "while the import ran"
            for clash in gone
        ),
    ]


def changed_since_plan(row: PlannedRow, current: FaqEntry) -> bool:
    """The entry a merge (or skip) goes into was written since the plan read it, and not with the row's
    planned content (what an earlier delivery of this batch wrote)."""
    return bool(row.base) and row.base != to_iso(current.updated_at) and entry_content(current) != row.content


def merge_again(row: PlannedRow, current: FaqEntry, mode: str) -> bool:
    """The row's merge rule applied again, to its entry as it is now (validation.py, as if the plan had read
    this entry): in `append` the row's questions, answers and tags united with the entry's (the similar
    questions the plan removed stay removed); in `replace` its tags and switches, while the entry's content
    still equals the row's. A row the entry no longer matches fails (`conflict`). True when the row still
    writes into the entry (a merge)."""
    source = row.source
    if mode == "append":  # the plan's removals (a similar question of another entry) still hold
        kept = {normalise(q) for q in row.content.get("similar_questions", [])}
        source = ImportRow(**{**vars(source), "similar": [q for q in source.similar if normalise(q) in kept]})
    planner = plan_replace if mode == "replace" else plan_append
    again = planner([source], [current], lambda _: row.entry_id).rows[0]
    row.notes = [*row.notes, *again.notes]
    if again.action in ("merge", "skip", "fail") and again.entry_id == current.id:
        row.action, row.content, row.base = again.action, again.content, again.base
        row.reason, row.category = again.reason, again.category
        row.partial = row.partial or again.partial
        return row.action == "merge"
    row.action, row.content, row.category = "fail", {}, CONFLICT
    row.reason = f"entry {current.id} was changed while the import ran; the row no longer matches it"
    return False


def refused(row: PlannedRow, entry_id: str) -> None:
    """A merge whose entry was written (or deleted) by another writer while the batch embedded: the row
    fails, the other writer's entry stays."""
    row.action, row.content, row.category = "fail", {}, CONFLICT
    row.reason = f"entry {entry_id} was changed while the import merged into it; the row was not merged"


@contextmanager
def counting(deps: Dependencies, kb: KnowledgeBase, new: NewBytes | None = None) -> Iterator[list[FaqEntry]]:
    """The new entries counted (count_new, clone._count) until their rows are written, collected: a failure
    on the way (a count partway, a tag write, the row write) gives back what the rows not written counted
    (the counts moved from their old entries back onto them: replacing.give_back_moved), so the redelivery
    that counts them again counts them once (a row written keeps its count, for its purge). Leave the block
    once the rows are written."""
    new = new if new is not None else NewBytes([], {})
    counted = new.counted
    try:
        yield counted
    except BaseException:
        if counted:
            written = deps.faq.get_entries(kb.id, [e.id for e in counted])
            for entry in counted:
                if entry.id not in written:
                    give_back_moved(deps, kb.tenant_id, new.moved.get(entry.id), entry.counted_bytes)
        raise


def count_new(
    deps: Dependencies, kb: KnowledgeBase, write: Write, claimed: dict[str, list[str]], new: NewBytes
) -> bool:
    """A new entry's bytes counted within the tenant's quota (services/quotas.take_storage: one conditional
    write) into `new.counted`, before its row is written: the row records what it counted, so a purge of it
    (a batch that died before its index write, redone) gives exactly that back. The plan left room for it,
    but another writer (an import into another FAQ knowledge base, the entries API) may have taken it
    since: a row that no longer fits fails (`quota`) and its questions are free again (False). A new entry
    that replaces one takes its count over first (replacing.move_count), and only what it adds to it must
    fit: an old entry deleted through the API before the move moved nothing, and the new one counts in
    full (a credit read when the batch started let a usage, given back meanwhile, go over the quota)."""
    entry = write.after
    entry.counted_bytes = entry.content_bytes()
    old = new.replaced.get(entry.id)
    move = move_count(deps, old, entry.id) if old is not None else None
    moved = move.moved if move is not None else 0
    try:
        take_storage(deps, kb.tenant_id, entry.counted_bytes - moved, "the entry")
    except Forbidden as refusal:
        give_back_moved(deps, kb.tenant_id, move, moved)
        _over_quota(write.row, refusal)
        deps.faq.release_questions(kb.id, entry.id, claimed.pop(entry.id, []))
        return False
    except BaseException:
        give_back_moved(deps, kb.tenant_id, move, moved)
        raise
    new.counted.append(entry)
    if move is not None:
        new.moved[entry.id] = move
    return True


def _over_quota(row: PlannedRow, refusal: Forbidden) -> None:
    row.action, row.content, row.category = "fail", {}, QUOTA
    row.reason = refusal.message


def save_indexed(deps: Dependencies, index: FaqIndex, entry: FaqEntry, claimed: dict[str, list[str]]) -> None:
    """A new entry, indexed, written only over the row this batch wrote: an update through the API that
    read the unindexed row saved what it holds (it stays, counted from what the row counted); a delete
    meanwhile leaves nothing behind and gave back what the row counted (count_new)."""
    written = replace(entry, indexed=True, updated_at=later_than(entry.updated_at))
    try:
        deps.faq.put_entry(written, entry)
    except EntryWriteRefused as refused:
        if refused.gone:  # its index entries may have been written after the delete removed them
            index.remove_entries([entry.id])
            deps.faq.release_questions(entry.kb_id, entry.id, claimed.pop(entry.id, []))


def save_merge(deps: Dependencies, index: FaqIndex, write: Write, claimed: dict[str, list[str]]) -> bool:
    """A merge: the questions it adds indexed, then the row written only if the entry is still the one
    read (its `updated_at`), then the index entries it dropped removed. An entry written meanwhile (an
    update through the API while the batch embedded) is left as that writer saved it: the index entries
    this wrote go again, and the row fails (`refused`). False then."""
    before = write.before
    assert before is not None
    after = replace(write.after, indexed=True, updated_at=later_than(before.updated_at))
    after.counted_bytes = after.content_bytes()
    change = storage_change(before, after.counted_bytes)
    try:  # within the quota, in the add itself: the room the plan saw may have been taken since
        take_storage(deps, before.tenant_id, change.counts, "the entry's growth", grows_by=change.grows_by)
    except Forbidden as refusal:  # nothing of the entry changed: the questions it claimed are free again
        take_back_rewrite(deps, index, before.id, [], claimed.pop(after.id, []))
        _over_quota(write.row, refusal)
        return False
    counts = change.counts
    old, new = set(index.ids(before)), index.ids(after)
    added = [i for i in new if i not in old]
    try:
        index.write([(after, added)])
        deps.faq.put_entry(after, before)
    except EntryWriteRefused:
        deps.tenants.add_usage(before.tenant_id, -counts)
        take_back_rewrite(deps, index, before.id, added, claimed.pop(after.id, []))
        refused(write.row, before.id)
        return False
    except BaseException:  # not written (the embedding, the engine, the table): a redelivery counts it again
        deps.tenants.add_usage(before.tenant_id, -counts)
        raise
    index.remove_ids(sorted(old - set(new)))
    if before.is_enabled != after.is_enabled:
        index.set_enabled(after, [i for i in new if i in old])
    return True
