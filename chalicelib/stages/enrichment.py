"""enrichment queue: one state machine Map item per planned subtask — the summary, a window of 20 chunks'
questions, a window of 20 chunks' graph (larger windows, their model calls in parallel, past 8,000 chunks:
domain/plan.py) — plus work outside the count (auto-tag, a summary refresh, an edited chunk's graph facts).

A counted subtask's worker releases its slot once, whatever the outcome, right before it answers its token,
and the worker that releases the last slot promotes the row to `completed` (`slots.settle_slot`); a subtask
that fails or times out has its slot released by the state machine's Catch. A model that rejects a request
fails only its subtask (the span says so); throttling and outages are retried by the queue, and when the
tries run out the runner writes the span failed (a summary then fails with its fallback description); a
store that refuses a write for good fails its subtask at once too, its own code on the span. A questions
window keeps each chunk's questions, a graph window each call's facts, as they come, and both stop at the
Lambda deadline, a fresh message of the same token carrying on. Every write is keyed deterministically, so
a redelivered item rewrites what it wrote.

Over 600 lines, not split: `stages/` holds one module per queue, and this queue runs five kinds of work.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from chalicelib.domain.clock import from_iso, iso_before, now_iso, to_iso
from chalicelib.domain.errors import ContinueLater, WriteRefused
from chalicelib.domain.events import EventType, new_occurrence
from chalicelib.domain.ids import attempt_chunk_prefix
from chalicelib.domain.plan import TEXT_LIKE, WINDOW
from chalicelib.domain.process_config import EXTRACTIVE_SUMMARY, resolve
from chalicelib.domain.repetition import near_duplicates, words_of
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SpanStatus,
    Stage,
    SummaryStatus,
)
from chalicelib.ports import Dependencies, IndexSpace, ModelRequestError
from chalicelib.services.deadline import out_of_time
from chalicelib.services.dispatch import GRAPH_CHUNK, request_summary_refresh
from chalicelib.services.events import summary_changed, summary_decided_again
from chalicelib.services.indexing import index_as_the_document_is, question_entry, write_extra_chunks
from chalicelib.services.liveness import kept_after_write
from chalicelib.services.slots import settle_slot
from chalicelib.services.summary_failure import described_by_user, summarised_chunks, summary_given_up
from chalicelib.stages.messages import SubtaskMessageModel
from chalicelib.stages.runner import Skip, run_task, task_knowledge

if TYPE_CHECKING:
    from chalicelib.enrich.graph import Extraction

SUMMARY_SEQ = 200_000
#: a summary subtask's answer when the summary is made or failed already
SUMMARY_NOT_ASKED = {"summary_chars": 0, "reason": "no summary is asked for now (made already, or failed)"}
GRAPH_CHUNKS_PER_CALL = 5


class UnknownSubtask(ValueError):
    pass


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(
        deps, event, context, SubtaskMessageModel, run, "enrichment", settle=release, given_up=gave_up
    )


def release(deps: Dependencies, task: SubtaskMessageModel) -> None:
    """Before a counted subtask's answer: its slot, once (a refresh or a tag owns none)."""
    settle_slot(deps, task.knowledge_id, task.attempt, task.subtask.id)


def gave_up(deps: Dependencies, task: SubtaskMessageModel) -> None:
    """The last try failed (the runner wrote the span failed): a summary gets its failure rule at once,
    rather than staying `processing` until housekeeping's sweep."""
    if task.subtask.kind != "summary":
        return
    knowledge = deps.knowledge.get(task.knowledge_id)
    if knowledge is not None and knowledge.attempt == task.attempt:
        summary_given_up(deps, knowledge)


def run(deps: Dependencies, task: SubtaskMessageModel) -> dict[str, Any] | None:
    kind = task.subtask.kind
    counted = bool(task.task_token)
    # A counted subtask belongs to a finalizing attempt; a refresh or a tag also serves a completed one.
    states = (ParseStatus.FINALIZING,) if counted else (ParseStatus.FINALIZING, ParseStatus.COMPLETED)
    if kind == "auto_tag":  # queued by postprocess just before it sets finalizing: retried until then
        states = (ParseStatus.PROCESSING, *states)
    knowledge = task_knowledge(deps, task, *states)
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    span_id = task.span_id
    try:
        if kind == "summary":
            outputs = summary(deps, knowledge, kb)
            if outputs == SUMMARY_NOT_ASKED:  # a copy delivered again: its span stays as that run closed it
                return outputs
        elif kind in ("questions", "graph") and deps.knowledge.slot_released(
            knowledge.id, knowledge.attempt, task.subtask.id
        ):
            # a redelivery after the window was done and its slot released: asking again would pay for a
            # second answer (which would replace the first)
            raise Skip(f"this window's {kind} were made already for this attempt")
        elif kind == "questions":
            outputs = questions(deps, knowledge, kb, _window(task))
        elif kind == "graph":
            outputs = graph(deps, knowledge, kb, _window(task), task.subtask.id)
        elif kind == GRAPH_CHUNK:
            outputs = graph_chunk(deps, knowledge, kb, task.subtask.params)
        elif kind == "auto_tag":
            return _auto_tag_once(deps, task, knowledge, kb)
        elif kind == "wiki":
            from chalicelib.services.dispatch import enqueue_wiki

            enqueue_wiki(deps, knowledge, kb, task.task_token)
            return None  # the document's slot is released when its pages are in
        else:
            raise UnknownSubtask(f"unknown enrichment kind {kind!r}")
    except (ModelRequestError, WriteRefused) as error:
        # this subtask cannot be done (the model rejects it, or a store refuses what it made): recorded,
        # and the slot released
        if kind == "summary":
            summary_given_up(deps, knowledge)
        return _subtask_failed(deps, knowledge, span_id, error)
    deps.tracker.subspan(knowledge, Stage.POSTPROCESS, span_id, SpanStatus.DONE, outputs)
    return outputs


def _subtask_failed(
    deps: Dependencies, knowledge: Knowledge, span_id: str, error: ModelRequestError | WriteRefused
) -> dict[str, Any]:
    """The span says what could not do it, with the error's stable code only (its text may carry what the
    model's server said)."""
    cause = (
        "the chat model could not do this subtask"
        if isinstance(error, ModelRequestError)
        else "a store refused what this subtask made"
    )
    deps.tracker.subspan(
        knowledge,
        Stage.POSTPROCESS,
        span_id,
        SpanStatus.FAILED,
        error_code=error.code,
        error_message=f"{cause} ({error.code})",
    )
    return {"failed": error.code}


def _chunks(deps: Dependencies, knowledge: Knowledge) -> list[Chunk]:
    return [c for c in deps.chunks.list(knowledge.id) if c.metadata.get("attempt") == knowledge.attempt]


# ---------------------------------------------------------------- summary


def _summarised_from(knowledge: Knowledge) -> tuple[int, str, str]:
    """What a summary is made from besides the attempt's chunks: the row's title and metadata."""
    return knowledge.attempt, knowledge.title, json.dumps(knowledge.metadata, sort_keys=True, default=str)


def _sources(chunks: list[Chunk]) -> list[tuple[str, str, bool]]:
    """The revision and switch of every text-like chunk: a chunk edited, enabled or disabled while the model
    wrote (PUT /knowledge/{id}/chunks/{chunk_id}) makes the summary stale (spec §1.13)."""
    return sorted(
        (c.id, c.content_hash or c.content, c.is_enabled) for c in chunks if c.chunk_type in TEXT_LIKE
    )


def summary(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase) -> dict[str, Any]:
    """Spec §1.13: stored as the description and as an indexed `summary` chunk; dropped when the title or
    the metadata changed while the model was writing it (a refresh then runs on the new content), or a new
    attempt began (the row's summary is then the new attempt's: this one leaves it be)."""
    from chalicelib.enrich.summary import SummaryNotMade, summarize, summary_input

    if not _claim_summary(deps, knowledge):
        # made or failed already: the worker that wrote it may have died before it announced it
        summary_decided_again(deps, deps.knowledge.get(knowledge.id), knowledge.attempt)
        return dict(SUMMARY_NOT_ASKED)
    chunks = _chunks(deps, knowledge)
    sources = _sources(chunks)
    by_kind = summarised_chunks(chunks)
    texts = [c.content for c in by_kind[ChunkType.TEXT]]
    inputs = summary_input(
        texts,
        [c.content for c in by_kind[ChunkType.IMAGE_CAPTION]],
        [c.content for c in by_kind[ChunkType.IMAGE_OCR]],
    )
    model_id = resolve(kb, knowledge.process_overrides).chat_model_id or EXTRACTIVE_SUMMARY
    chat = deps.chat_model(model_id)
    try:
        text = summarize(inputs, model_id, chat, knowledge.title)
    except SummaryNotMade as error:
        summary_given_up(deps, knowledge, texts)
        return {"summary_chars": 0, "reason": error.code}
    current = deps.knowledge.get(knowledge.id)
    if current is None or current.attempt != knowledge.attempt:
        # deleted, or a reparse began while the model wrote: the new attempt's summary is its own to make,
        # so this one neither refreshes it, fails it nor writes its description
        return {"summary_chars": 0, "reason": "the knowledge was deleted or superseded while summarised"}
    if current.kb_id != knowledge.kb_id:  # moved: made again in its new home
        request_summary_refresh(deps, current)
        return {"summary_chars": 0, "reason": "the document moved while it was summarised; refreshing"}
    if (
        _summarised_from(current) != _summarised_from(knowledge)
        or _sources(_chunks(deps, knowledge)) != sources
    ):
        request_summary_refresh(deps, knowledge)
        return {"summary_chars": 0, "reason": "the document changed while it was summarised; refreshing"}
    chunk = Chunk(
        id=f"{knowledge.id}-a{knowledge.attempt}-summary",
        tenant_id=knowledge.tenant_id,
        kb_id=kb.id,
        knowledge_id=knowledge.id,
        seq=SUMMARY_SEQ,
        content=f"# Summary\n\n{text}",
        chunk_type=ChunkType.SUMMARY,
        metadata={"attempt": knowledge.attempt, "model": model_id},
    )
    if near_duplicates(words_of(text), words_of("\n\n".join(texts))):
        # a short document's summary that only repeats its body: kept (the chunk, the description) but out of
        # search, where it would be the same hit twice
        chunk = replace(chunk, is_enabled=False, metadata={**chunk.metadata, "repeats_body": True})
    if not write_extra_chunks(deps, knowledge, kb, [chunk]):
        _summary_moved_away(deps, knowledge, kb, chunk)
        raise Skip("the knowledge was deleted, cancelled, superseded or moved")
    description = None if described_by_user(deps, knowledge) else text
    occurrence = new_occurrence()  # kept on the row: a redelivery announces the completion under its id
    if deps.knowledge.set_summary_status(  # from processing only: of two deliveries, one writes
        knowledge.id,
        SummaryStatus.COMPLETED.value,
        description=description,
        only_if=SummaryStatus.PROCESSING.value,
        attempt=knowledge.attempt,  # a reparse meanwhile: the new attempt's summary is not this one
        occurrence=occurrence,
    ):
        summary_changed(
            deps, knowledge, EventType.SUMMARY_COMPLETED, SummaryStatus.COMPLETED.value, occurrence
        )
    return {"summary_chars": len(text), "model": model_id}


def _summary_moved_away(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, chunk: Chunk) -> None:
    """A move that landed while the summary was written: its entry leaves the old knowledge base's index,
    its chunk follows the row, and a refresh indexes it in the new one."""
    row = deps.knowledge.get(knowledge.id)
    if row is None or row.kb_id == kb.id:
        return
    if kb.indexing_strategy.needs_embedding:
        space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
        deps.engine(kb.retrieval_engine).delete_by_ids(space, kb.id, [chunk.id])
    if row.attempt != knowledge.attempt:  # and superseded: the new attempt makes its own summary
        return
    deps.chunks.put_many([replace(chunk, kb_id=row.kb_id)])
    request_summary_refresh(deps, row)


def _claim_summary(deps: Dependencies, knowledge: Knowledge) -> bool:
    """pending → processing, or processing kept (an earlier delivery died while writing it); False when the
    summary is made or failed already: a redelivered subtask does not make it again (it announces it again,
    under the same id: `summary_decided_again`).
    A refresh asks again by setting it pending. Only while the row is at this attempt: a superseded
    attempt's worker never takes the new attempt's summary."""
    return any(
        deps.knowledge.set_summary_status(
            knowledge.id, SummaryStatus.PROCESSING.value, only_if=status.value, attempt=knowledge.attempt
        )
        for status in (SummaryStatus.PENDING, SummaryStatus.PROCESSING)
    )


# ---------------------------------------------------------------- questions


T = TypeVar("T")
R = TypeVar("R")

#: model calls at once in a window the plan grew (a very large document): its subtask reads size / WINDOW
#: times as many chunks in the same Lambda timeout; a window of WINDOW chunks calls one at a time, as before
MAX_PARALLEL_CALLS = 8


def _calls(
    call: Callable[[T], R], items: Sequence[T], window_size: int, *, until_deadline: bool = False
) -> list[R]:
    """`call` over `items`, in order; in parallel (bounded) when the window is larger than WINDOW. The first
    error is raised, as a loop would. `until_deadline` (each call stores its own result): once the
    invocation is out of time no further call starts (the first always does, so every invocation makes
    progress) and ContinueLater is raised for a fresh message to carry on."""
    workers = min(MAX_PARALLEL_CALLS, max(1, window_size // WINDOW))
    started = itertools.count()

    def guarded(item: T) -> R:
        if until_deadline and next(started) > 0 and out_of_time():
            raise ContinueLater("the invocation is out of time: a fresh message carries on the window")
        return call(item)

    if workers == 1:
        return [guarded(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="enrich") as pool:
        # a pool thread starts with an empty context: the meter and the deadline go along (a copy per call)
        futures = [pool.submit(copy_context().run, guarded, item) for item in items]
        return [future.result() for future in futures]


def _window(task: SubtaskMessageModel) -> range:
    """The chunk positions a questions or graph subtask reads (window × size, size WINDOW unless the plan
    grew it for a large document)."""
    window, size = int(task.subtask.params.get("window", 0)), int(task.subtask.params.get("size", WINDOW))
    return range(window * size, (window + 1) * size)


def questions(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, window: range) -> dict[str, Any]:
    """Spec §1.15: each text chunk of the window gets N questions (its neighbours as context), kept in its
    metadata and indexed as extra entries that point at it; a chunk that changed meanwhile keeps none.

    Each chunk's questions are stored as soon as the model gives them, and a chunk that has them is not
    asked again: a throttle's deferral, a continuation past the deadline or a retry pays only for the
    chunks still to do. The window's entries are indexed once every chunk has its questions."""
    from chalicelib.chunker import index_text
    from chalicelib.enrich.questions import generate
    from chalicelib.services.embedding_runs import embed_texts

    effective = resolve(kb, knowledge.process_overrides)
    chat = deps.chat_model(effective.chat_model_id)
    if chat is None:
        return {"questions": 0, "reason": "no chat model configured"}
    texts = sorted(
        (c for c in _chunks(deps, knowledge) if c.chunk_type == ChunkType.TEXT), key=lambda c: c.start_at
    )

    def ask(i: int) -> list[str]:
        found = generate(
            chat,
            document=knowledge.title,
            previous=texts[i - 1].content if i > 0 else "",
            passage=texts[i].content,
            following=texts[i + 1].content if i + 1 < len(texts) else "",
            count=effective.question_count,
        )
        # the window's checkpoint (False: the chunk left this attempt or knowledge base; the end sees to it)
        deps.chunks.set_metadata(
            knowledge.id, texts[i].id, "questions", found, kb_id=kb.id, attempt=knowledge.attempt
        )
        return found

    positions = range(window.start, min(window.stop, len(texts)))
    asked = {texts[i].id: _stored_questions(texts[i]) for i in positions}
    todo = [i for i in positions if asked[texts[i].id] is None]
    asked |= {
        texts[i].id: found
        for i, found in zip(todo, _calls(ask, todo, len(window), until_deadline=True), strict=True)
    }
    current = {c.id: c for c in _chunks(deps, knowledge)}
    updated: list[Chunk] = []
    kept = 0
    entries: list[tuple[Chunk, int, str]] = []
    for chunk in texts[window.start : window.stop]:
        now = current.get(chunk.id)
        if now is None or now.content_hash != chunk.content_hash:  # its revision changed: drop them
            continue
        questions_of = asked[chunk.id] or []
        kept += 1
        if now.metadata.get("questions") != questions_of:  # mostly stored already, by `ask`
            now.metadata["questions"] = questions_of
            updated.append(now)
        entries += [(now, n, q) for n, q in enumerate(questions_of)]
    for chunk in updated:  # one key on the row as stored now: a switch or an edit since is not undone
        deps.chunks.set_metadata(
            knowledge.id,
            chunk.id,
            "questions",
            chunk.metadata["questions"],
            kb_id=kb.id,
            attempt=knowledge.attempt,
        )
    if entries and kb.indexing_strategy.needs_embedding:
        model = deps.embedding_model(kb.embedding_model_id)
        space = IndexSpace.of(model)
        engine = deps.engine(kb.retrieval_engine)
        contents = [index_text(knowledge.title, "", q) for _, _, q in entries]
        vectors = (
            embed_texts(deps, kb.tenant_id, model, contents) if kb.indexing_strategy.vector_enabled else None
        )
        written = [
            question_entry(
                kb.id,
                knowledge.id,
                chunk.id,
                n,
                contents[k],
                None if vectors is None else vectors[k],
                chunk.is_enabled,
            )
            for k, (chunk, n, _q) in enumerate(entries)
        ]
        index_as_the_document_is(deps, knowledge, engine, space, written)

        def take_back_written() -> None:
            engine.delete_by_ids(space, kb.id, [e.id for e in written])

        if not kept_after_write(
            deps,
            knowledge,
            lambda: engine.delete_by_knowledge(space, kb.id, [knowledge.id]),
            undo_moved=lambda _row: take_back_written(),
            # a reparse's attempt cleared the index before these were written and would never clean them
            undo_superseded=take_back_written,
        ):
            raise Skip("the knowledge was deleted, cancelled, superseded or moved")
    return {"questions": len(entries), "chunks": kept}


def _stored_questions(chunk: Chunk) -> list[str] | None:
    """The questions an earlier delivery of this attempt stored on the chunk (an edit of its text drops
    them: operations/chunks), or None when it has none yet."""
    stored = chunk.metadata.get("questions")
    return [str(q) for q in stored] if isinstance(stored, list) else None


# ---------------------------------------------------------------- graph


def graph_window_key(attempt: int, subtask_id: str, batch: int = 0) -> str:
    """Names the facts of one model call of a window in the graph: a redelivery of the same subtask of the
    same attempt (its first run died before the call was marked done) replaces them with its own answer.
    The first call keeps the window's own key, so a window whose facts an earlier release wrote under it
    as one record has them replaced too."""
    return f"a{attempt}.{subtask_id}" + (f".b{batch}" if batch else "")


#: a chunk's metadata key that says the model call of its graph batch (starting at it) is done, with what it
#: found: the window's checkpoint, written after the facts. Internal (a leading `_`): never in the tenant's
#: view of the chunk, and an edit of the chunk's text drops it (operations/chunks.py)
GRAPH_DONE = "_graph_done"


def graph(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, window: range, subtask_id: str
) -> dict[str, Any]:
    """Spec §1.16: entities and relations of a window of text-like chunks, several chunks per model call.

    Each call's facts are stored as soon as the model gives them, under their own key, and the call's first
    chunk marked done: a continuation past the Lambda deadline, a deferral or a retry asks only for the
    calls still to do."""
    from chalicelib.enrich.graph import extract

    effective = resolve(kb, knowledge.process_overrides)
    chat = deps.chat_model(effective.chat_model_id)
    if chat is None:
        return {"entities": 0, "reason": "no chat model configured"}
    text_like = sorted(
        (c for c in _chunks(deps, knowledge) if c.chunk_type in TEXT_LIKE),
        key=lambda c: (c.chunk_type != ChunkType.TEXT, c.seq),
    )
    selected = text_like[window.start : window.stop]
    batches = [
        selected[at : at + GRAPH_CHUNKS_PER_CALL] for at in range(0, len(selected), GRAPH_CHUNKS_PER_CALL)
    ]

    def read(n: int) -> dict[str, int]:
        batch = batches[n]
        entities, relations = _facts(
            batch, extract(chat, [c.content for c in batch], effective.graph_relation_types)
        )
        deps.graph.add_window(
            kb.id,
            knowledge.id,
            graph_window_key(knowledge.attempt, subtask_id, n),
            [c.id for c in batch],
            entities,
            relations,
        )
        done = {"entities": len(entities), "relations": len(relations)}
        # the checkpoint (False: the chunk left this attempt or knowledge base; the liveness check sees to it)
        deps.chunks.set_metadata(
            knowledge.id, batch[0].id, GRAPH_DONE, done, kb_id=kb.id, attempt=knowledge.attempt
        )
        return done

    found = {n: _graph_done(batch[0]) for n, batch in enumerate(batches)}
    todo = [n for n, done in found.items() if done is None]
    try:
        found |= dict(zip(todo, _calls(read, todo, len(window), until_deadline=True), strict=True))
    except ContinueLater:  # what this invocation wrote is checked as a finished window's is
        _graph_kept(deps, knowledge, kb)
        raise
    _graph_kept(deps, knowledge, kb)
    return {
        "entities": sum((done or {}).get("entities", 0) for done in found.values()),
        "relations": sum((done or {}).get("relations", 0) for done in found.values()),
        "chunks": len(selected),
    }


def _facts(
    batch: Sequence[Chunk], extracted: Sequence[Extraction]
) -> tuple[list[tuple[str, list[str], str]], list[tuple[str, str, str, str]]]:
    """The graph port's entities and relations of one model call, each tagged with its chunk's id."""
    entities: list[tuple[str, list[str], str]] = []
    relations: list[tuple[str, str, str, str]] = []
    for chunk, found in zip(batch, extracted, strict=True):
        entities += [(e.name, e.attributes, chunk.id) for e in found.entities]
        relations += [(r.source, r.relation, r.target, chunk.id) for r in found.relations]
    return entities, relations


def _graph_done(chunk: Chunk) -> dict[str, int] | None:
    """What the graph call starting at this chunk found, when an earlier run of this attempt made it."""
    done = chunk.metadata.get(GRAPH_DONE)
    return {k: int(v) for k, v in done.items()} if isinstance(done, dict) else None


def _graph_kept(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase) -> None:
    """Skip (with the facts undone as the row needs) when the row was deleted, moved, cancelled or
    superseded while the model wrote."""
    if not kept_after_write(
        deps,
        knowledge,
        lambda: deps.graph.delete_knowledge(kb.id, knowledge.id),
        # the move retracts the document's graph from the old knowledge base; these came after it
        undo_moved=lambda _row: deps.graph.delete_knowledge(kb.id, knowledge.id),
    ):
        row = deps.knowledge.get(knowledge.id)
        if row is not None and row.attempt != knowledge.attempt:  # superseded while the model wrote: the
            # new attempt's plan cleared older facts already, so these would stay, pointing at old chunks
            deps.graph.keep_only_attempt(kb.id, knowledge.id, attempt_chunk_prefix(knowledge.id, row.attempt))
        raise Skip("the knowledge was deleted, cancelled or superseded")


#: a chunk edited again while its facts were being read is read again, at most this often in one delivery
GRAPH_CHUNK_ROUNDS = 3


def graph_chunk(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, params: dict[str, Any]
) -> dict[str, Any]:
    """An edited chunk's facts: those read from its old text leave the graph and, while the graph is on,
    its new text's are read (spec §1.16, per chunk). Retract, read, then add: a redelivery writes the same
    facts again (or the model's new answer instead), never both. A message sent for an earlier text is dropped:
    the later edit queued its own. A chunk edited again while the model read it is read again, as that
    edit's message may have written before this one."""
    from chalicelib.enrich.graph import extract

    chunk_id, sent_for = str(params.get("chunk_id", "")), str(params.get("content_hash", ""))
    chunk = _chunk_now(deps, knowledge, chunk_id)
    if chunk is None or chunk.content_hash != sent_for:
        raise Skip("the chunk was edited again or left the document: a later message reads it")
    effective = resolve(kb, knowledge.process_overrides)
    chat = deps.chat_model(effective.chat_model_id) if effective.graph_enabled else None
    entities: list[tuple[str, list[str], str]] = []
    relations: list[tuple[str, str, str, str]] = []
    for _ in range(GRAPH_CHUNK_ROUNDS):
        # the old text's facts go first: a model that refuses the new text (or whose tries run out) leaves
        # the chunk with none of its facts, never the old text's
        deps.graph.retract_chunks(kb.id, knowledge.id, [chunk.id])
        if chat is not None:
            extracted = extract(chat, [chunk.content], effective.graph_relation_types)
            entities, relations = _facts([chunk], extracted)
        deps.graph.add(kb.id, knowledge.id, entities, relations)
        _graph_kept(deps, knowledge, kb)
        now = _chunk_now(deps, knowledge, chunk.id)
        if now is None or now.content_hash == chunk.content_hash:
            return {"entities": len(entities), "relations": len(relations), "extracted": chat is not None}
        chunk = now
    # still edited faster than it is read: none of its facts rather than an earlier text's
    deps.graph.retract_chunks(kb.id, knowledge.id, [chunk.id])
    return {"entities": 0, "relations": 0, "extracted": False}


def _chunk_now(deps: Dependencies, knowledge: Knowledge, chunk_id: str) -> Chunk | None:
    """The attempt's chunk as stored now (None: gone, or not one of this attempt's)."""
    if not chunk_id.startswith(attempt_chunk_prefix(knowledge.id, knowledge.attempt)):
        return None
    return deps.chunks.get_many([(knowledge.id, chunk_id)]).get((knowledge.id, chunk_id))


# ---------------------------------------------------------------- auto-tag (outside the count)

AUTO_TAG_INPUT_CHARS = 16_000
#: the row's `enrichment` key of this attempt's auto-tag claim
AUTO_TAG_CLAIM = "auto_tag"
#: a claim not finished after this long was a worker that died (the function stops at 300 s); less than
#: the queue's visibility timeout (1,800 s), so the dead worker's redelivered message takes it over
STALE_AUTO_TAG_SECONDS = 360


class AutoTagNotPlannedYet(RuntimeError):
    """The row is still processing: its plan, written over the `enrichment` map that holds the claim, is not
    settled yet (the message is queued just before). The message fails and comes back."""


class AutoTagHeld(Exception):
    """Another copy holds this attempt's auto-tag claim; it would be stale in `stale_in_seconds`."""

    def __init__(self, stale_in_seconds: float) -> None:
        super().__init__(f"the auto-tag claim is held (stale in {stale_in_seconds:.0f} s)")
        self.stale_in_seconds = stale_in_seconds


def _auto_tag_once(
    deps: Dependencies, task: SubtaskMessageModel, knowledge: Knowledge, kb: KnowledgeBase
) -> dict[str, Any]:
    """Once per attempt (the message has no token, so SQS's duplicates and a planner's retry all reach
    here): the copy that finds the claim finished neither asks the model nor rewrites the span; one that
    finds it held comes back once it would be stale (its holder may have died without giving it back:
    the copy then takes it over), so the tag is neither done twice nor lost."""
    span_id = task.span_id
    try:
        claimed = _claim_auto_tag(deps, knowledge)
    except AutoTagHeld as held:
        # a copy delayed until the claim would be stale (SQS delays up to 900 s), this one consumed
        delay = min(900, max(1, int(held.stale_in_seconds) + 5))
        deps.queue.send_raw(
            "enrichment", task.model_dump(mode="json", exclude_defaults=True), delay_seconds=delay
        )
        raise Skip(
            f"this attempt's auto-tag is held by another worker: looked at again in {delay} s"
        ) from None
    try:
        try:
            outputs = auto_tag(deps, knowledge, kb)
        except ModelRequestError as error:  # cannot be done with this model: done, failed
            failed = _subtask_failed(deps, knowledge, span_id, error)
            _finish_auto_tag(deps, knowledge, claimed, done=True)
            return failed
    except Skip:  # the row moved on: this attempt's tag is settled
        _finish_auto_tag(deps, knowledge, claimed, done=True)
        raise
    except Exception:  # retried (a throttle's deferral, a transient error): the retry claims it at once
        _finish_auto_tag(deps, knowledge, claimed, done=False)
        raise
    deps.tracker.subspan(knowledge, Stage.POSTPROCESS, span_id, SpanStatus.DONE, outputs)
    _finish_auto_tag(deps, knowledge, claimed, done=True)
    return outputs


def _claim_auto_tag(deps: Dependencies, knowledge: Knowledge) -> dict[str, Any]:
    """The row's `enrichment` map with this attempt's claim in it, written only over the map as read (one
    conditional write): of two copies, one claims. Skip when it is finished, or held and not stale."""
    if knowledge.parse_status == ParseStatus.PROCESSING:
        raise AutoTagNotPlannedYet(f"the plan of {knowledge.id} is not settled yet")
    held = knowledge.enrichment.get(AUTO_TAG_CLAIM)  # the row as the task just read it
    if isinstance(held, dict) and held.get("attempt") == knowledge.attempt:
        if held.get("done"):
            raise Skip("this attempt's auto-tag was done already")
        claimed_at = str(held.get("claimed_at", ""))
        if claimed_at > iso_before(STALE_AUTO_TAG_SECONDS):
            age = (datetime.now(UTC) - from_iso(claimed_at)).total_seconds()
            raise AutoTagHeld(STALE_AUTO_TAG_SECONDS - age)
    claim = {"attempt": knowledge.attempt, "claimed_at": now_iso()}
    claimed = {**knowledge.enrichment, AUTO_TAG_CLAIM: claim}
    if (
        deps.knowledge.update_fields(
            knowledge.id,
            {"enrichment": claimed},
            expect={"enrichment": knowledge.enrichment, "attempt": knowledge.attempt},
        )
        is None
    ):  # another copy claimed it meanwhile (or the row moved on: the copy then skips)
        raise AutoTagHeld(STALE_AUTO_TAG_SECONDS)
    return claimed


def _finish_auto_tag(
    deps: Dependencies, knowledge: Knowledge, claimed: dict[str, Any], *, done: bool
) -> None:
    """Marks the claim done, or gives it back; only while the map is as this claim left it (a worker that
    took a stale claim over owns it now)."""
    mark = {**claimed[AUTO_TAG_CLAIM], "done": True}
    finished = (
        {**claimed, AUTO_TAG_CLAIM: mark}
        if done
        else {key: value for key, value in claimed.items() if key != AUTO_TAG_CLAIM}
    )
    deps.knowledge.update_fields(
        knowledge.id, {"enrichment": finished}, expect={"enrichment": claimed, "attempt": knowledge.attempt}
    )


def auto_tag(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase) -> dict[str, Any]:
    """Spec §1.14: up to `max_tags` of the knowledge base's own tags, chosen by the chat model with a
    confidence of at least 0.75; only relations the document does not have yet are added."""
    from chalicelib.enrich.auto_tag import choose
    from chalicelib.services.tagging import DELETING, add_tags, untag

    effective = resolve(kb, knowledge.process_overrides)
    if not effective.auto_tag_enabled or kb.type != "document":
        return {"tags": 0, "reason": "auto-tagging is off"}
    if effective.auto_tag_skip_if_tagged and knowledge.tag_ids:
        return {"tags": 0, "reason": "the document already has tags"}
    chat = deps.chat_model(effective.chat_model_id)
    if chat is None:
        return {"tags": 0, "reason": "no chat model configured"}
    tags = [t for t in deps.tags.list_kb(kb.id) if t.status != DELETING]
    if not tags:
        return {"tags": 0, "reason": "the knowledge base has no tags"}
    chosen = choose(chat, [t.name for t in tags], _auto_tag_input(deps, knowledge), effective.max_tags)
    current = deps.knowledge.get(knowledge.id)
    if current is None or current.parse_status == ParseStatus.DELETING:
        raise Skip("the knowledge was deleted")
    if current.kb_id != kb.id:  # moved while the model chose: these are the old knowledge base's tags
        raise Skip("the knowledge moved to another knowledge base")
    added = add_tags(deps, current, [tags[i].id for i in chosen])
    # read after the write: a tag whose delete began while the model chose is taken off again (a delete
    # that begins after this read finds the relation in its sweep)
    gone = [t for t in added if (tag := deps.tags.get(kb.id, t)) is None or tag.status == DELETING]
    for tag_id in gone:
        untag(deps, kb.id, tag_id, current.id, to_iso(current.created_at))
    added = [t for t in added if t not in gone]

    def untag_moved(row: Knowledge) -> None:
        """The move landed between the check and the write: the old knowledge base's tags come off."""
        if any(t in row.tag_ids for t in added):
            deps.knowledge.update_fields(row.id, {"tag_ids": [t for t in row.tag_ids if t not in added]})
        if added:
            deps.tags.unrelate(kb.id, row.id, to_iso(row.created_at), added)

    if not kept_after_write(
        deps, knowledge, lambda: deps.tags.remove_knowledge(knowledge.id), undo_moved=untag_moved
    ):
        raise Skip("the knowledge was deleted, cancelled, superseded or moved")
    return {"tags": len(added), "chosen": [tags[i].name for i in chosen]}


def _auto_tag_input(deps: Dependencies, knowledge: Knowledge) -> str:
    """Name, summary, then text, OCR and caption chunks in document order, at most 16,000 characters."""
    parts = [f"Name: {knowledge.title or knowledge.file_name}"]
    current = deps.knowledge.get(knowledge.id)
    if current is not None and current.description:
        parts.append(f"Summary: {current.description}")
    chunks = sorted(
        (c for c in _chunks(deps, knowledge) if c.chunk_type in TEXT_LIKE), key=lambda c: (c.start_at, c.seq)
    )
    parts += [c.content for c in chunks]
    return "\n\n".join(parts)[:AUTO_TAG_INPUT_CHARS]
