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
from chalicelib.faq.entries import FaqIndex, all_entries, give_back_storage
from chalicelib.faq.import_claims import counting, save_indexed
from chalicelib.faq.keyed import tag_links
from chalicelib.faq.reservations import claim, release_entries, unconfirmed
from chalicelib.ports import Dependencies
from chalicelib.services.quotas import take_storage

#: entries per task item: one row write, one index write
BATCH = 50
#: the item that closes the FAQ pass of a clone task (a later slice does not plan it again)
DONE_ITEM = "faq:synced"
_COPY_NAMESPACE = uuid.UUID("3c9e51a2-7d40-4b8e-a6f1-0e2d9b7c5a13")

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
    synced = [
        replace(
            kept,
            is_enabled=src.is_enabled,
            tags=list(src.tags),
            answer_all=src.answer_all,
            updated_at=utcnow(),
        )
        for kept, src in pairs
    ]
    deps.faq.add_tags(target.id, sorted({t for e in synced for t in e.tags}))
    if tag_links(synced):
        deps.faq.link_tags(target.id, tag_links(synced))
    deps.faq.put_entries(synced)
    for (kept, _), entry in zip(pairs, synced, strict=True):
        if kept.is_enabled != entry.is_enabled:
            index.set_enabled(entry, list(index.ids(entry)))


def _copy(
    deps: Dependencies, index: FaqIndex, task: Task, target: KnowledgeBase, batch: Sequence[FaqEntry]
) -> None:
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
