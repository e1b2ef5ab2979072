"""embedding queue: embed and index the attempt's chunks, enable the document, start its state machine.

WeKnora fails a whole document on one rate-limited batch and throws away every batch already embedded.
Here each finished batch is written to the embedding cache at once (the checkpoint), throttling backs off
with jitter and honours Retry-After, a long wait puts the stage back on its queue instead of failing it,
a stage near its Lambda deadline hands over to a fresh invocation, and a retried stage, a reparse or a
clone only embeds texts the cache does not already hold. When indexing fails for good, the attempt's
chunks and index entries are rolled back (spec §1.10).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from chalicelib.domain.errors import ContinueLater, PermanentStageError, SpanErrorCode
from chalicelib.domain.ids import execution_name, plan_key
from chalicelib.domain.metering import shown_model_id
from chalicelib.domain.process_config import describes_images, resolve
from chalicelib.domain.progress import SPAN_COUNTERS
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, SpanStatus, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexSpace, ServiceUnreachable, StorageQuotaExceeded
from chalicelib.services.derived_data import remove_derived_data
from chalicelib.services.fairness import (
    attempt_leaves_pipeline,
    chains_for_fan_out,
    keep_place,
    leave_pipeline,
)
from chalicelib.services.image_parents import bound_text_chunks
from chalicelib.services.indexing import ChunkTotals, Stopped, chunk_totals, index_knowledge, index_slice
from chalicelib.services.liveness import live_knowledge
from chalicelib.services.stage_queue import enqueue
from chalicelib.services.storage import image_manifest
from chalicelib.services.stored_size import derived_size, remove_attempt_outputs
from chalicelib.services.usable import require_usable_for_stage
from chalicelib.stages.runner import run_stage


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_stage(deps, Stage.EMBEDDING, event, context, run, rollback=rollback)


def run(deps: Dependencies, message: StageMessage) -> None:
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return
    keep_place(deps, knowledge)  # every slice and continuation: a long embedding keeps its tenant's place
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    if message.is_slice:
        run_slice(deps, message, knowledge, kb)
        return
    if knowledge.processed_at is not None:
        # The attempt was handed over already (this is a redelivered or retried message): running again
        # would re-enable a document disabled since and index what is indexed; what the hand-over may not
        # have finished (a crash before the state machine started) is done again instead.
        logger.info("embedding: the attempt is indexed already", extra={"knowledge_id": knowledge.id})
        if not deps.workflow.is_running(execution_name(knowledge.id, knowledge.attempt)):
            after_indexed(deps, knowledge, kb, image_manifest(deps, knowledge), None)
        return
    offset, cursor = message.offset, message.cursor or None
    totals: ChunkTotals | None = None  # read once per invocation: the planner's read serves the indexing
    if offset and cursor is None:
        # A hand-over from before slices carried a cursor (an index into a full listing): start over.
        # Safe: entries are upserted by chunk id and the texts' vectors come back from the cache.
        logger.info("embedding: a slice without a cursor starts over", extra={"knowledge_id": knowledge.id})
        offset = 0
    if offset == 0 and cursor is None:
        totals = chunk_totals(deps, knowledge) if kb.indexing_strategy.needs_embedding else None
        slices = planned_slices(deps, knowledge, kb, totals)
        if slices > 1:
            fan_out(deps, message, knowledge, kb, slices)
            return
        deps.tracker.begin_stage(knowledge, Stage.EMBEDDING, {"model": kb.embedding_model_id or "default"})
    try:
        indexed = index_knowledge(deps, knowledge, kb, offset, cursor, message.counts, totals)
    except Stopped as stopped:
        logger.info(str(stopped), extra={"knowledge_id": knowledge.id})
        attempt_leaves_pipeline(deps, knowledge.tenant_id, knowledge.id, knowledge.attempt)
        return
    if indexed.next_cursor is not None:
        raise ContinueLater(
            f"indexed {indexed.next_offset} of {indexed.outputs['texts_total']} texts",
            offset=indexed.next_offset,
            cursor=indexed.next_cursor,
            counts=indexed.counts,
        )
    if switched_model(deps, kb):
        # a re-embed switched the knowledge base while this document indexed into the old space
        raise ContinueLater(
            "the knowledge base switched its embedding model: indexing again", offset=0, cursor="", counts={}
        )
    hand_over(deps, knowledge, kb, indexed.outputs)


# ---------------------------------------------------------------- the fan-out (issue 27)
#
# A document of more text chunks than `embed_fanout_texts` is embedded as independent slices of that many
# chunk sequence numbers. The first delivery plans: one conditional write puts the slice count on the row
# (the plan's key: attempt * 1000 + generation), the earlier entries go, and the first slices are queued
# (P of them: at most `embed_fanout_parallel`, and one per place the document holds in its tenant's
# pipeline, the planner taking free ones, so a tenant's slices and documents stay within its cap; each
# finished slice queues the one P after it, P carried in the message). Each slice embeds and indexes its own
# chunks (read by key, entries upserted by chunk id), adds its figures to the span's counters and releases
# itself on the row: a conditional decrement with a per-slice marker, so a duplicate never counts twice. The
# slice that brings the count to 0 hands over to the state machine:
#
#     planner   plan(key, N) ─ delete old entries ─ send slices 0..P-1
#     slice 3   index seqs [3S, 4S) ─ send slice 3+P ─ release (N-k → N-k-1) ─ counters += its figures
#     slice 3'  (redelivered) index again (same entries) ─ release: marker present ─ nothing counted
#     slice 7   … ─ release (1 → 0) ─ mark indexed ─ end the span ─ start the state machine ─ finish (0 → -1)
#     slice 7'  (redelivered) finds -1: nothing; finds 0 (slice 7 died mid hand-over): hands over itself
#     reparse   attempt moves on ─ a slice of the old attempt finds no live row, or its release fails


def planned_slices(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, totals: ChunkTotals | None = None
) -> int:
    """How many slices this document's embedding is split into (1: the single chain of today); `totals`:
    the attempt's chunk totals, if the caller read them already."""
    if not kb.indexing_strategy.needs_embedding:
        return 1
    seq_end = (totals or chunk_totals(deps, knowledge)).seq_end
    if seq_end is None:  # chunked before chunking recorded its sequence numbers
        return 1
    return max(1, math.ceil(seq_end / deps.settings.embed_fanout_texts))


def slice_message(message: StageMessage, slices: int, index: int, size: int, stride: int = 0) -> StageMessage:
    return replace(
        message,
        plan=max(1, message.plan),
        slices=slices,
        slice_index=index,
        slice_size=size,
        slice_stride=stride,
        offset=0,
        cursor="",
        counts={},
        deferrals=0,
    )


def fan_out(
    deps: Dependencies, message: StageMessage, knowledge: Knowledge, kb: KnowledgeBase, slices: int
) -> None:
    """Plans the slices (once per plan key) and queues the first ones; a second delivery of the planning
    message queues them again (each slice counts once) unless every slice is already released."""
    size = deps.settings.embed_fanout_texts
    key = plan_key(message)
    model = require_usable_for_stage(deps, kb)
    wanted = min(slices, deps.settings.embed_fanout_parallel)
    planned = deps.knowledge.plan_embedding(knowledge.id, knowledge.attempt, key, slices)
    if planned:
        deps.tracker.begin_stage(
            knowledge,
            Stage.EMBEDDING,
            {"model": kb.embedding_model_id or "default", "slices": slices, "slice_size": size},
        )
        # the winner of the plan alone clears what an earlier run indexed, before any slice is queued
        deps.engine(kb.retrieval_engine).delete_by_knowledge(IndexSpace.of(model), kb.id, [knowledge.id])
        totals = chunk_totals(deps, knowledge)
        zero = dict.fromkeys(SPAN_COUNTERS, 0)
        deps.tracker.counters(knowledge, Stage.EMBEDDING, zero, reset=True)
        deps.tracker.progress(
            knowledge,
            Stage.EMBEDDING,
            {"chunks": totals.chunks, "texts_total": totals.texts, "slices_total": slices, **zero},
        )
    else:
        row = deps.knowledge.get(knowledge.id)
        if row is None or row.attempt != knowledge.attempt or row.embed_plan != key:
            logger.info("embedding: the plan moved on", extra={"knowledge_id": knowledge.id})
            return
        if row.embed_slices_pending <= 0:
            return  # every slice is released: the last one hands (or handed) over
    # one chain of slices per place the document holds in its tenant's pipeline (the plan's winner takes
    # free ones): one tenant's documents cannot take every slot of the stage
    stride = chains_for_fan_out(deps, knowledge, wanted, take=planned)
    for index in range(min(slices, stride)):
        enqueue(deps, Stage.EMBEDDING, slice_message(message, slices, index, size, stride))
    logger.info(
        "embedding: fanned out", extra={"knowledge_id": knowledge.id, "slices": slices, "slice_size": size}
    )


def run_slice(deps: Dependencies, message: StageMessage, knowledge: Knowledge, kb: KnowledgeBase) -> None:
    key = plan_key(message)
    if knowledge.embed_plan != key:
        logger.info("embedding: a slice of a superseded plan", extra={"knowledge_id": knowledge.id})
        return
    totals = chunk_totals(deps, knowledge)
    if knowledge.embed_slices_pending <= 0:
        # every slice is released: a late duplicate, which does nothing again (it would rewrite entries a
        # person may have switched off since), unless the last one died before it finished the hand-over
        if knowledge.embed_slices_pending == 0:
            settle_fan_out(deps, message, knowledge, kb, totals)
        return
    size = message.slice_size
    first = message.slice_index * size
    end = first + size if totals.seq_end is None else min(first + size, totals.seq_end)
    try:
        indexed = index_slice(deps, knowledge, kb, max(first, message.offset), end, message.counts)
    except Stopped as stopped:
        logger.info(str(stopped), extra={"knowledge_id": knowledge.id})
        attempt_leaves_pipeline(deps, knowledge.tenant_id, knowledge.id, knowledge.attempt)
        return
    counts = indexed.counts
    if indexed.next_offset is not None:
        raise ContinueLater(
            f"slice {message.slice_index} of {message.slices}: indexed up to sequence number "
            f"{indexed.next_offset} of [{first}, {end})",
            offset=indexed.next_offset,
            counts=counts,
        )
    # the stride the planner queued with (a message from before the stride travelled: the setting)
    stride = message.slice_stride or deps.settings.embed_fanout_parallel
    following = message.slice_index + stride
    if following < message.slices:  # queued before the release: a crash can only queue it twice
        enqueue(deps, Stage.EMBEDDING, slice_message(message, message.slices, following, size, stride))
    remaining = deps.knowledge.release_embed_slice(knowledge.id, knowledge.attempt, key, message.slice_index)
    if remaining is None:
        # A duplicate (counted before), or the row moved on; or the run that released the last slice died
        # before it handed over: then this one does (every step of the hand-over repeats safely).
        row = deps.knowledge.get(knowledge.id)
        if (
            row is None
            or row.attempt != knowledge.attempt
            or row.embed_plan != key
            or row.embed_slices_pending != 0
        ):
            return
        knowledge = row
    else:
        deps.tracker.counters(knowledge, Stage.EMBEDDING, {**counts, "slices_done": 1})
        if remaining > 0:
            return
    settle_fan_out(deps, message, knowledge, kb, totals)


def settle_fan_out(
    deps: Dependencies, message: StageMessage, knowledge: Knowledge, kb: KnowledgeBase, totals: ChunkTotals
) -> None:
    """Every slice is released: the document is indexed (or, after a model switch, indexed again)."""
    if switched_model(deps, kb):
        # indexed into the old space: a new plan (the next generation) indexes every slice again
        again = replace(slice_message(message, 0, 0, 0), plan=max(1, message.plan) + 1)
        enqueue(deps, Stage.EMBEDDING, again)
        return
    model = require_usable_for_stage(deps, kb)
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.EMBEDDING.value)
    figures = span.outputs if span is not None else {}
    hand_over(
        deps,
        knowledge,
        kb,
        {
            **{name: int(figures.get(name, 0)) for name in ("texts_embedded", "cache_hits", "batches")},
            "chunks": totals.chunks,
            "texts_total": totals.texts,
            # every slice is released, so every text is indexed (a crash between a release and its counters
            # may have lost that slice's figures, never its entries)
            "entries_indexed": totals.texts,
            "slices_total": message.slices,
            "slices_done": message.slices,
            "model": shown_model_id(model.model_id),
            "dimensions": model.dimensions,
            "engine": deps.engine(kb.retrieval_engine).engine_name,
        },
    )
    deps.knowledge.finish_embedding(knowledge.id, knowledge.attempt, plan_key(message))


# ---------------------------------------------------------------- the hand-over to the state machine


def switched_model(deps: Dependencies, kb: KnowledgeBase) -> bool:
    now = deps.kbs.get(kb.id)
    return now is not None and (now.embedding_model_id, now.retrieval_engine) != (
        kb.embedding_model_id,
        kb.retrieval_engine,
    )


#: images one execution describes (OCR, caption): each rides in the execution's data (256 KB with the plan)
#: and costs its Map history events (25,000 an execution); the others stay stored and linked in the text
MAX_DESCRIBED_IMAGES = 500
NOT_DESCRIBED = (
    f"a document's first {MAX_DESCRIBED_IMAGES} images are described; the rest stay linked in its text"
)


def hand_over(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, outputs: dict[str, Any]) -> None:
    """The document is indexed: enable it, end the span and start its state machine (once per attempt:
    the execution's name is the attempt's)."""
    images = image_manifest(deps, knowledge)
    if knowledge.processed_at is not None:  # marked by a try that died before the rest: not marked again
        after_indexed(
            deps, knowledge, kb, images, outputs
        )  # (that would re-enable a document disabled since)
        return
    try:
        indexed = deps.knowledge.mark_indexed(
            knowledge.id,
            knowledge.attempt,
            chunk_count=outputs["chunks"],
            storage_size=derived_size(deps, knowledge, images),
            completed=False,
            within_quota=True,
            add_file_size=True,  # the file's size as the write finds it: an edit may have changed it since
        )
    except StorageQuotaExceeded as error:
        # the document fails: its index entries are rolled back and, as for any attempt that fails before
        # it is indexed, its parse outputs removed (fail_knowledge); its file stays counted
        raise PermanentStageError(str(error), code=SpanErrorCode.QUOTA_EXCEEDED) from error
    if not indexed:
        logger.info("embedding: superseded or cancelled while indexing", extra={"knowledge_id": knowledge.id})
        return
    after_indexed(deps, knowledge, kb, images, outputs)


def after_indexed(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    images: list[dict[str, Any]],
    outputs: dict[str, Any] | None,
) -> None:
    """The hand-over's steps after the row was marked indexed, each idempotent: done again by a message
    of the attempt delivered once more (`outputs` None: the span keeps what the first run wrote)."""
    leave_pipeline(deps, knowledge.tenant_id, knowledge.id)  # indexed: the next document may come in
    deps.tracker.end_stage(knowledge, Stage.EMBEDDING, outputs)
    if knowledge.attempt > 1:
        remove_earlier_attempts(deps, knowledge, images)
    if not images:
        deps.tracker.skip_stage(knowledge, Stage.MULTIMODAL, "no images")
    distinct = _distinct_urls(images)
    described = distinct[:MAX_DESCRIBED_IMAGES]
    if len(distinct) > len(described):
        deps.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            "multimodal.not_described",
            SpanStatus.SKIPPED,
            {"images": len(distinct), "described": len(described), "reason": NOT_DESCRIBED},
        )
    if described:
        # before the Map starts, whose first image begins the stage (images_done is counted from their
        # spans); again by a delivery after a hand-over that died before it, never reopening a closed stage
        deps.tracker.planned(knowledge, Stage.MULTIMODAL, {"images_total": len(described)})
    # each image's bound text chunk, found in one pass here rather than by a listing per image task
    parents = (
        bound_text_chunks(deps, knowledge, [str(image["url"]) for image in described])
        if _described_at_all(kb, knowledge, described)
        else {}
    )
    deps.workflow.start(
        execution_name(knowledge.id, knowledge.attempt),
        {
            "knowledge_id": knowledge.id,
            "tenant_id": knowledge.tenant_id,
            "attempt": knowledge.attempt,
            "attempt_n": str(knowledge.attempt),
            "images": [
                {
                    "index": i,
                    "url": image["url"],
                    "ocr_done": bool(image.get("ocr_in_markdown")),
                    "original": bool(image.get("is_original")),
                    **({"parent_seq": parents[image["url"]].seq} if image["url"] in parents else {}),
                }
                for i, image in enumerate(described)
            ],
        },
    )


def _described_at_all(kb: KnowledgeBase, knowledge: Knowledge, images: list[dict[str, Any]]) -> bool:
    """Whether an image task will write chunks (`describes_images`): only then are the images' bound text
    chunks worth finding (a walk over the document's chunks)."""
    effective = resolve(kb, knowledge.process_overrides)
    return any(describes_images(effective, bool(image.get("is_original"))) for image in images)


def _distinct_urls(images: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The images once each: the page ranges of a large PDF each list an image they share (stored once, its
    key named by its bytes), which would be described, and its chunks written, once per range."""
    seen: set[str] = set()
    distinct = []
    for image in images:
        if str(image["url"]) not in seen:
            seen.add(str(image["url"]))
            distinct.append(image)
    return distinct


def remove_earlier_attempts(deps: Dependencies, knowledge: Knowledge, images: list[dict[str, Any]]) -> None:
    """Once a reparse's attempt is indexed, the earlier attempts' parse outputs are garbage (the row counts
    this attempt's now): removed, but for the images this attempt lists too (idempotent)."""
    keep = {str(image["url"]) for image in images}
    catalog = deps.resources.owned_by(knowledge.id)  # one read for every earlier attempt
    for attempt in range(1, knowledge.attempt):
        remove_attempt_outputs(deps, knowledge, attempt, keep, catalog=catalog)


def rollback(deps: Dependencies, message: StageMessage) -> bool:
    """Indexing failed for good: delete this attempt's chunks and index entries (spec §1.10). Not those of an
    attempt that was indexed since (a stray copy failing after another handed it over: False, its failure
    does not stand, the document goes on), nor a cancelled one's (a cancel keeps what was written)."""
    knowledge = deps.knowledge.get(message.knowledge_id)
    if knowledge is None or knowledge.attempt != message.attempt:
        return True  # gone or superseded: failing it changes nothing (its conditions fail)
    if knowledge.processed_at is not None:
        # handed over only once its state machine started (the hand-over's last step): a hand-over that
        # died before that (this very message's earlier try) still fails the attempt
        if knowledge.parse_status not in (ParseStatus.PENDING, ParseStatus.PROCESSING):
            return False
        try:
            return not deps.workflow.is_running(execution_name(knowledge.id, knowledge.attempt))
        except ServiceUnreachable:  # unanswered: housekeeping looks at the row again
            return False
    if knowledge.parse_status in _ROLLED_BACK:
        remove_derived_data(deps, knowledge)
    return True


#: the states in which a failed indexing takes its attempt's chunks and entries back
_ROLLED_BACK = frozenset({ParseStatus.PENDING, ParseStatus.PROCESSING, ParseStatus.FAILED})
