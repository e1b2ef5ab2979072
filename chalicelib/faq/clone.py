"""Cloning an FAQ knowledge base (spec §1.25 for FAQ): a diff by content hash between the source's entries and
the target's. A target entry whose content matches a source entry is kept and only takes the source's state
(enabled, tags, answer-all); a source entry with no match is copied under a deterministic id (task, source
entry), so a redelivered slice rewrites the same copy; a target entry with no match goes.

A copy reserves its questions in the target (reservations.py; the holder is the copy's id, so a copy made
again claims its own reservations again) before its row is written, and a deleted target entry gives its
back. A copy whose question an entry of the target took meanwhile (a create through the API after the plan)
is not written: its item fails with the reason and the task goes on. A copy counts its bytes on the tenant's
storage quota before its row is written (one conditional add each: `services/quotas.take_storage`), and one
that does not fit is not written: its item fails (`storage_quota_exceeded`, the span code `quota_exceeded`).

A sync writes each kept entry only over the row as the plan read it (`put_entry`, by its `updated_at`): an
entry written meanwhile (an edit through the API) is read again and synced over what it is now while it still
holds the source's content; one deleted meanwhile, or edited to other content, is left as its writer left it
(the item fails, naming it). A sync changes no text, so the row keeps what it counted.

A clone takes no FAQ import lease, so the target's delete does not wait for it: each sync and copy batch reads
the target (strongly consistent) before it writes and again after its last write. A target being deleted by
then may have been purged before the batch wrote (its delete saw none of it): the batch takes back what it
wrote (a copy's index entries, rows and what they counted, reservations; tags) and fails; a target still open
then is purged after every write of the batch, by a delete that begins later.

Copies are embedded through the embedding cache: the same texts under the same model are cache hits, so a
clone costs no model calls unless the target embeds with another model.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from chalicelib.domain.errors import Forbidden, PermanentStageError, SpanErrorCode
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase, Task, utcnow
from chalicelib.faq.entries import FaqIndex, all_entries, give_back_storage, later_than
from chalicelib.faq.import_claims import counting, save_indexed
from chalicelib.faq.keyed import tag_links
from chalicelib.faq.reservations import claim, release_entries, unconfirmed
from chalicelib.ports import Dependencies
from chalicelib.ports.faq import EntryWriteRefused
from chalicelib.services.quotas import take_storage
from chalicelib.tasks.move_clone import is_open

#: entries per task item: one row write, one index write
BATCH = 50
#: the item that closes the FAQ pass of a clone task (a later slice does not plan it again)
DONE_ITEM = "faq:synced"
_COPY_NAMESPACE = uuid.UUID("3c9e51a2-7d40-4b8e-a6f1-0e2d9b7c5a13")
#: writes of one sync over an entry the API keeps writing meanwhile, before it is left as that writer left it
SYNC_TRIES = 3
TARGET_CLOSED = "the target knowledge base was deleted while the clone ran"

Work = tuple[str, Callable[[], None]]


def faq_copy_id(task_id: str, entry_id: str) -> str:
    return str(uuid.uuid5(_COPY_NAMESPACE, f"{task_id}/{entry_id}"))


def _state(entry: FaqEntry) -> tuple[bool, tuple[str, ...], bool]:
    return entry.is_enabled, tuple(entry.tags), entry.answer_all


@dataclass
class FaqClonePlan:
    copies: list[FaqEntry] = field(default_factory=list)
    #: (target entry, source entry) pairs of the same content whose state differs
    syncs: list[tuple[FaqEntry, FaqEntry]] = field(default_factory=list)
    deletes: list[FaqEntry] = field(default_factory=list)


def plan_faq_clone(
    deps: Dependencies, task: Task, source: KnowledgeBase, target: KnowledgeBase
) -> FaqClonePlan:
    """The multiset diff by content hash. Source entries an import is still writing (not indexed) are not
    the source's content yet; a target entry left unindexed by a crashed copy of this task is copied again."""
    wanted: dict[str, list[FaqEntry]] = {}
    for entry in sorted(all_entries(deps, source.id), key=lambda e: (e.created_at, e.id)):
        if entry.indexed:
            wanted.setdefault(entry.content_hash, []).append(entry)
    plan = FaqClonePlan()
    have: dict[str, list[FaqEntry]] = {}
    for entry in sorted(all_entries(deps, target.id), key=lambda e: (e.created_at, e.id)):
        if entry.indexed:
            have.setdefault(entry.content_hash, []).append(entry)
        else:
            plan.deletes.append(entry)
    for content_hash, targets in have.items():
        sources = wanted.get(content_hash, [])
        for kept, src in zip(targets, sources, strict=False):
            if _state(kept) != _state(src):
                plan.syncs.append((kept, src))
        plan.deletes += targets[len(sources) :]
    for content_hash, sources in wanted.items():
        plan.copies += sources[len(have.get(content_hash, [])) :]
    return plan


def faq_clone_work(
    deps: Dependencies, task: Task, source: KnowledgeBase, target: KnowledgeBase
) -> Iterator[Work]:
    """One pass over the diff, a batch per item; a slice that ends midway plans again from what is left."""
    if DONE_ITEM in task.items:
        return
    plan = plan_faq_clone(deps, task, source, target)
    index = FaqIndex(deps, target)
    for start in range(0, len(plan.deletes), BATCH):
        batch = plan.deletes[start : start + BATCH]
        item = f"faq-delete:{batch[0].id}"
        task.items.append(item)
        yield item, partial(_delete, deps, index, target, batch)
    for start in range(0, len(plan.syncs), BATCH):
        pairs = plan.syncs[start : start + BATCH]
        item = f"faq-sync:{pairs[0][0].id}"
        task.items.append(item)
        yield item, partial(_sync, deps, index, target, pairs)
    for start in range(0, len(plan.copies), BATCH):
        batch = plan.copies[start : start + BATCH]
        item = f"faq-copy:{batch[0].id}"
        task.items.append(item)
        yield item, partial(_copy, deps, index, task, target, batch)
    task.items.append(DONE_ITEM)
    yield DONE_ITEM, _nothing


def _nothing() -> None:
    """The pass is complete: recorded so a later slice of the task does not plan it again."""


def _delete(deps: Dependencies, index: FaqIndex, target: KnowledgeBase, entries: Sequence[FaqEntry]) -> None:
    ids = [e.id for e in entries]
    index.remove_entries(ids)  # index entries first: a crash leaves rows to delete again, never ghost hits
    give_back_storage(deps, target.tenant_id, deps.faq.delete_entries(target.id, ids))
    release_entries(deps, target.id, list(entries))


def _sync(
    deps: Dependencies, index: FaqIndex, target: KnowledgeBase, pairs: Sequence[tuple[FaqEntry, FaqEntry]]
) -> None:
    _require_open(deps, target)
    synced = [replace(kept, tags=list(src.tags)) for kept, src in pairs]
    names = sorted({t for e in synced for t in e.tags})
    deps.faq.add_tags(target.id, names)
    if tag_links(synced):  # before the rows: a link without its use is dropped when read (keyed.py)
        deps.faq.link_tags(target.id, tag_links(synced))
    left = [reason for kept, src in pairs if (reason := _sync_one(deps, index, target, kept, src))]
    if not is_open(deps.kbs.get(target.id, consistent=True)):  # its purge may have gone before the tags
        _take_back_tags(deps, target, synced, names)
        raise PermanentStageError(TARGET_CLOSED)
    if left:
        raise PermanentStageError(
            f"{len(left)} of {len(pairs)} entries not synced, changed in the target meanwhile (left as they "
            f"are): {'; '.join(left[:5])}"
        )


def _sync_one(
    deps: Dependencies, index: FaqIndex, target: KnowledgeBase, kept: FaqEntry, src: FaqEntry
) -> str:
    """The source's state written over the entry as read; '' once it holds it, else why it was left."""
    current = kept
    for _ in range(SYNC_TRIES):
        synced = replace(
            current,
            is_enabled=src.is_enabled,
            tags=list(src.tags),
            answer_all=src.answer_all,
            updated_at=later_than(current.updated_at),
        )
        try:
            deps.faq.put_entry(synced, current)
        except EntryWriteRefused:
            now = deps.faq.get_entry(target.id, kept.id)
            if now is None:
                return f"{kept.standard_question!r} (deleted)"
            if now.content_hash != src.content_hash:
                return f"{kept.standard_question!r} (edited)"
            if _state(now) == _state(src):
                return ""
            current = now
            continue
        if current.is_enabled != synced.is_enabled:
            index.set_enabled(synced, list(index.ids(synced)))
        return ""
    return f"{kept.standard_question!r} (kept changing)"


def _require_open(deps: Dependencies, target: KnowledgeBase) -> None:
    """Nothing more written into a target whose delete has begun (strongly consistent: one just begun counts)."""
    if not is_open(deps.kbs.get(target.id, consistent=True)):
        raise PermanentStageError(TARGET_CLOSED)


def _take_back_tags(
    deps: Dependencies, target: KnowledgeBase, entries: Sequence[FaqEntry], names: list[str]
) -> None:
    """The tag names and links a batch wrote into a target being deleted (its purge may have run first)."""
    if tag_links(entries):
        deps.faq.unlink_tags(target.id, tag_links(entries))
    if names:
        deps.faq.remove_tags(target.id, names)


def _copy(
    deps: Dependencies, index: FaqIndex, task: Task, target: KnowledgeBase, batch: Sequence[FaqEntry]
) -> None:
    _require_open(deps, target)
    now = utcnow()
    copies = [
        replace(
            src,
            id=faq_copy_id(task.id, src.id),
            kb_id=target.id,
            tenant_id=target.tenant_id,
            indexed=False,
            import_task="",
            counted_bytes=src.content_bytes(),  # what it counts (_count), and a delete gives back
            created_at=now,
            updated_at=now,
        )
        for src in batch
    ]
    copies, claimed, refused = _reserve(deps, target, copies)
    with counting(deps, target) as counted:
        copies, over_quota = _count(deps, target, copies, claimed, counted)
        if copies:
            deps.faq.add_tags(target.id, sorted({t for e in copies for t in e.tags}))
            if tag_links(copies):
                deps.faq.link_tags(target.id, tag_links(copies))
            # unindexed until its index entries are written (see plan_faq_clone); a copy left so is deleted
            # by the next plan, which gives its count back
            deps.faq.put_entries(copies)
    refused += over_quota
    if copies:
        index.write_all(copies)
        for entry in copies:  # only over the row just written: a copy deleted meanwhile stays deleted
            save_indexed(deps, index, entry, claimed)
        for entry_id, keys in claimed.items():  # a deleted copy's were released (save_indexed)
            deps.faq.confirm_questions(target.id, entry_id, keys)
        # after the batch's last write: a delete begun since may have purged the target before those writes
        if not is_open(deps.kbs.get(target.id, consistent=True)):
            _take_back(deps, index, target, copies)
            raise PermanentStageError(TARGET_CLOSED)
    if over_quota:
        raise PermanentStageError(
            f"{len(refused)} of {len(batch)} entries not copied: {'; '.join(refused[:5])}",
            code=SpanErrorCode.QUOTA_EXCEEDED,
        )
    if refused:
        raise PermanentStageError(
            f"{len(refused)} of {len(batch)} entries not copied, their questions taken in the target "
            f"meanwhile: {'; '.join(refused[:5])}"
        )


def _take_back(
    deps: Dependencies, index: FaqIndex, target: KnowledgeBase, copies: Sequence[FaqEntry]
) -> None:
    """What a copy batch wrote into a target being deleted: index entries first, then the rows (what each
    counted given back once, whoever removes it: delete_entries), their reservations and tags."""
    ids = [e.id for e in copies]
    index.remove_entries(ids)
    give_back_storage(deps, target.tenant_id, deps.faq.delete_entries(target.id, ids))
    release_entries(deps, target.id, list(copies))
    _take_back_tags(deps, target, copies, sorted({t for e in copies for t in e.tags}))


def _count(
    deps: Dependencies,
    target: KnowledgeBase,
    copies: list[FaqEntry],
    claimed: dict[str, list[str]],
    counted: list[FaqEntry],
) -> tuple[list[FaqEntry], list[str]]:
    """The copies whose bytes now count on the tenant within its storage quota (one conditional add each,
    services/quotas.take_storage; collected in `counted`, import_claims.counting), and why the others are
    refused (their questions are free again)."""
    kept: list[FaqEntry] = []
    refused: list[str] = []
    for entry in copies:
        try:
            take_storage(deps, target.tenant_id, entry.counted_bytes, "the entry")
        except Forbidden as quota:
            deps.faq.release_questions(target.id, entry.id, claimed.pop(entry.id, []))
            refused.append(f"{entry.standard_question!r} ({quota.code}: {quota.message})")
            continue
        counted.append(entry)
        kept.append(entry)
    return kept, refused


def _reserve(
    deps: Dependencies, target: KnowledgeBase, copies: list[FaqEntry]
) -> tuple[list[FaqEntry], dict[str, list[str]], list[str]]:
    """The copies whose questions are now reserved for them, the keys claimed per copy (confirmed once
    written), and why the others are refused."""
    pending = unconfirmed(deps, target.id, copies)
    kept: list[FaqEntry] = []
    claimed: dict[str, list[str]] = {}
    refused: list[str] = []
    for entry in copies:
        wanted = pending[entry.id]
        _, clashes = claim(deps, target.id, entry.id, wanted)
        if clashes:
            deps.faq.release_questions(target.id, entry.id, list(wanted))
            clash = next(iter(clashes.values()))
            holder = clash.other.id if clash.other is not None else clash.holder.entry_id or "another"
            refused.append(f"{entry.standard_question!r} (question {clash.question!r}: entry {holder})")
            continue
        kept.append(entry)
        claimed[entry.id] = list(wanted)
    return kept, claimed, refused
