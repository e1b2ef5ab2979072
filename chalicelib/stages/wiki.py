"""wiki queue: per knowledge base, debounced wiki ingest (spec §1.18).

A document's `wiki` subtask records an op (with its task token, so the document keeps one finalizing slot
until its pages are in) and triggers an ingest about 30 s later (`wiki_ingest_delay_seconds`). An ingest
claims at most 5 documents of the knowledge base, writes each one's pages as `wiki_page` chunks (indexed),
answers its token, and asks for more while ops are pending. A coalesced finalize, about 20 s after the last
ingest (`wiki_finalize_delay_seconds`), rebuilds the knowledge base's wiki index and the pages'
cross-links from the pages of the documents' current attempts (`finalize`). A delete or a reparse retracts
a document's pages (its chunks go with it) and triggers a finalize; a knowledge base's delete purges its
wiki, and pages written while their document moved are taken back from the old knowledge base. The
ingest releases a document's slot (and promotes it when it was the last) before it answers the token; a
failed document releases its slot through the state machine's catch.

Each claimed document stands on its own: a throttled or unavailable model puts its op back (pending) for an
ingest a minute later; a model that rejects the request or answers what cannot be read fails that document
only (a stable code on its span and token); anything else puts the op back and fails the message, so the
queue's retry claims it again, until its last try fails the document. A redelivered ingest keeps the pages
an earlier one wrote for the attempt instead of asking the model again.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, Field, ValidationError

from chalicelib.domain.process_config import resolve
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, ParseStatus, SpanStatus, Stage
from chalicelib.observability import logger
from chalicelib.ports import (
    Dependencies,
    IndexSpace,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
    WikiOp,
    WikiPageRecord,
)
from chalicelib.services.deadline import deadline_of, out_of_time, stage_deadline
from chalicelib.services.dispatch import WIKI_QUEUE as QUEUE
from chalicelib.services.dispatch import trigger_wiki
from chalicelib.services.indexing import take_back_chunks, write_extra_chunks
from chalicelib.services.slots import settle_slot
from chalicelib.services.storage import files_of
from chalicelib.services.usable import index_space_if_usable
from chalicelib.services.usage import document_share, metered_shares
from chalicelib.stages.messages import Subtask, SubtaskMessageModel
from chalicelib.stages.runner import (
    Skip,
    come_back_soon,
    parse_body,
    process_batch,
    receive_count,
    still_awaited,
)

BATCH = 5
#: a claim older than this was a worker that died (its Lambda times out at 300 s): the queue's next delivery
#: of the message (its visibility is 1800 s) claims the documents again
STALE_CLAIM_SECONDS = 10 * 60
WIKI_SEQ_BASE = 400_000
#: the document's counted subtask (postprocess.plan plans one, under this id)
SUBTASK_ID = "wiki"
#: the tokens of a knowledge base's ops are heartbeaten this often (the machine waits 3600 s without one):
#: once per knowledge base, not on every message, as a backlog of N ops has about N ingest messages
HEARTBEAT_EVERY_SECONDS = 10 * 60
#: a throttled or unavailable model: the next ingest comes this much later (WeKnora waits 60 s)
MODEL_BACKOFF_SECONDS = 60
#: what a token's failure and a span say, never the error's own text (it may carry the server's words)
FAILED = "wiki.failed"


class WikiMessage(BaseModel):
    kb_id: str = Field(min_length=1, max_length=100)
    action: str = Field(pattern="^(ingest|finalize)$")


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    def one(record: SQSRecord) -> None:
        try:
            message = parse_body(record.body, WikiMessage)
        except ValidationError as error:
            deps.queue.dead_letter(QUEUE, record.body, f"not a wiki message: {error.error_count()} error(s)")
            return
        # each ingested document's pages are its own usage entry; a finalize is the knowledge base's
        with metered_shares(deps, QUEUE, record, event, context, kb_id=message.kb_id):
            try:
                keep_alive(deps, message.kb_id)
                if message.action == "ingest":
                    last_try = receive_count(record) >= deps.settings.stage_max_receives
                    ingest(deps, message.kb_id, last_try=last_try)
                else:
                    finalize(deps, message.kb_id)
            except Exception:
                come_back_soon(deps, QUEUE, record)
                raise

    token = stage_deadline.set(deadline_of(context))  # a long finalize hands over (`out_of_time`)
    try:
        return process_batch(event, context, one)
    finally:
        stage_deadline.reset(token)


def keep_alive(deps: Dependencies, kb_id: str) -> None:
    """Every token the knowledge base's wiki holds (its ops, pending behind other ingests or claimed) is
    heartbeaten as the runner heartbeats a task's (`still_awaited`), at most every HEARTBEAT_EVERY_SECONDS:
    a long backlog (or a throttled model) keeps ops waiting past the machine's HeartbeatSeconds, and the
    work is alive. An op whose token the machine no longer waits for (it timed out and released the slot)
    is dropped, and its span says task_timeout."""
    ops = deps.wiki.ops(kb_id)
    if not ops or not deps.wiki.heartbeat_due(kb_id, HEARTBEAT_EVERY_SECONDS):
        return
    for op in ops:
        task = SubtaskMessageModel(
            task_token=op.token,
            knowledge_id=op.knowledge_id,
            attempt=op.attempt,
            subtask=Subtask(id=SUBTASK_ID, kind="wiki"),
        )
        if op.token and not still_awaited(deps, QUEUE, task, op.token):
            deps.wiki.finish_op(kb_id, op.knowledge_id, op.attempt)


def ingest(deps: Dependencies, kb_id: str, *, last_try: bool = False) -> None:
    kb = deps.kbs.get(kb_id)
    ops = deps.wiki.claim_ops(kb_id, BATCH, STALE_CLAIM_SECONDS)
    model_busy = False
    unexpected: Exception | None = None
    # The ops from `stopped` on go back to pending: past the time (a model call begun now would be cut off by
    # the Lambda's timeout, and the documents left claimed until the queue's redelivery, 30 min, a receive
    # spent each time) they wait for the follow-up ingest; after a store's error mid-batch (a throttled write)
    # the message's retry takes them (it would find them claimed, claim nothing and be consumed, and their
    # documents would wait for the state machine's timeout).
    stopped = 0
    try:
        for stopped, op in enumerate(ops):
            if stopped and out_of_time():
                break
            knowledge = deps.knowledge.get(op.knowledge_id)
            if (
                kb is None
                or knowledge is None
                or knowledge.attempt != op.attempt
                or knowledge.parse_status != ParseStatus.FINALIZING
            ):
                _answer(deps, op, {"skipped": True})
                continue
            try:
                with document_share(QUEUE, knowledge):  # the model's tokens for its pages are the document's
                    count = _pages(deps, knowledge, kb)
            except Skip:  # deleted, cancelled or superseded while its pages were written (they were undone)
                _answer(deps, op, {"skipped": True})
                continue
            except (ModelThrottled, ModelUnavailable):  # the model may do it later: the op waits for it
                deps.wiki.release_op(kb_id, op.knowledge_id, op.attempt)
                model_busy = True
                continue
            except ModelRequestError as error:  # this document gets no pages: its slot is released anyway
                _fail(deps, knowledge, op, error.code)
                continue
            except Exception as error:  # not ours to classify: the queue's retry tries again, up to its last
                # the traceback is logged redacted (observability): frames and types, not a server's words
                logger.exception(
                    "wiki pages failed",
                    extra={"knowledge_id": op.knowledge_id, "error": type(error).__name__},
                )
                if last_try:
                    _fail(deps, knowledge, op, FAILED)
                else:
                    deps.wiki.release_op(kb_id, op.knowledge_id, op.attempt)
                    unexpected = unexpected or error
                continue
            deps.tracker.subspan(
                knowledge, Stage.POSTPROCESS, "postprocess.wiki", SpanStatus.DONE, {"pages": count}
            )
            _answer(deps, op, {"pages": count})
        else:
            stopped = len(ops)
    finally:
        for left in ops[stopped:]:
            deps.wiki.release_op(kb_id, left.knowledge_id, left.attempt)
    if model_busy:  # one later ingest for everything pending, not the quick follow-up
        trigger_wiki(deps, kb_id, "ingest", delay_seconds=MODEL_BACKOFF_SECONDS)
    elif ops and unexpected is None and deps.wiki.pending(kb_id):
        trigger_wiki(deps, kb_id, "ingest", follow_up=True)
    if ops:
        trigger_wiki(deps, kb_id, "finalize")
    if unexpected is not None:
        raise unexpected


def _fail(deps: Dependencies, knowledge: Knowledge, op: WikiOp, code: str) -> None:
    """The op is done and the token fails (the state machine's catch releases the slot)."""
    deps.wiki.finish_op(op.kb_id, op.knowledge_id, op.attempt)
    deps.tracker.subspan(
        knowledge,
        Stage.POSTPROCESS,
        "postprocess.wiki",
        SpanStatus.FAILED,
        error_code=code,
        error_message=f"the wiki pages could not be written ({code})",
    )
    deps.workflow.task_failure(op.token, FAILED, code)


def _answer(deps: Dependencies, op: WikiOp, output: dict[str, Any]) -> None:
    """The document's slot (the last one promotes it), then the op, then the token: a retry of an ingest
    that died in between still finds the op, and the slot is counted once."""
    settle_slot(deps, op.knowledge_id, op.attempt, SUBTASK_ID)
    deps.wiki.finish_op(op.kb_id, op.knowledge_id, op.attempt)
    deps.workflow.task_success(op.token, output)


def _pages(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase) -> int:
    from chalicelib.enrich.wiki import MAX_PAGES, pages_for

    chat = deps.chat_model(resolve(kb, knowledge.process_overrides).chat_model_id)
    if chat is None:
        return 0
    slots = [_page_chunk_id(knowledge, n) for n in range(MAX_PAGES)]
    found = deps.chunks.get_many([(knowledge.id, chunk_id) for chunk_id in slots])
    # an earlier delivery wrote this attempt's pages (then died): they stand, so a second answer of the
    # model never leaves the first one's extra pages behind, and the model is not paid twice
    chunks = [found[(knowledge.id, chunk_id)] for chunk_id in slots if (knowledge.id, chunk_id) in found]
    if not chunks:
        parsed = files_of(deps, knowledge).url_for(
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
        )
        pages = pages_for(chat, knowledge.title, deps.files.read(parsed).decode("utf-8"))
        chunks = [
            Chunk(
                id=_page_chunk_id(knowledge, n),
                tenant_id=knowledge.tenant_id,
                kb_id=kb.id,
                knowledge_id=knowledge.id,
                seq=WIKI_SEQ_BASE + n,
                content=f"# {page.title}\n\n{page.content}",
                chunk_type=ChunkType.WIKI_PAGE,
                metadata={"attempt": knowledge.attempt, "wiki_title": page.title},
            )
            for n, page in enumerate(pages)
        ]

    def undo_moved(row: Knowledge) -> None:
        _take_back_moved_pages(deps, knowledge, kb, row, [c.id for c in chunks])

    if chunks and not write_extra_chunks(deps, knowledge, kb, chunks, undo_moved=undo_moved):
        raise Skip("the knowledge was deleted, cancelled, superseded or moved")
    deps.wiki.put_pages(
        kb.id,
        knowledge.id,
        [
            WikiPageRecord(knowledge.id, knowledge.title, str(c.metadata.get("wiki_title", "")), c.id)
            for c in chunks
        ],
    )
    return len(chunks)


def _page_chunk_id(knowledge: Knowledge, n: int) -> str:
    return f"{knowledge.id}-a{knowledge.attempt}-wiki{n:02d}"


def _take_back_moved_pages(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, row: Knowledge, chunk_ids: list[str]
) -> None:
    """A move landed while the pages were written: their entries leave the old knowledge base's index, where
    nothing would ever remove them, and the new one's (the move's repoint may have carried them there), and
    their chunks go. The moved document has no pages: its op is answered skipped."""
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))  # the pages were indexed in it
    take_back_chunks(deps, knowledge, chunk_ids, (deps.engine(kb.retrieval_engine), space))
    target = deps.kbs.get(row.kb_id)
    if target is None or not target.indexing_strategy.needs_embedding:
        return
    target_space = index_space_if_usable(deps, target)
    if target_space is not None:
        deps.engine(target.retrieval_engine).delete_by_ids(target_space, target.id, chunk_ids)


def finalize(deps: Dependencies, kb_id: str) -> None:
    """Coalesced per knowledge base: the index page and the cross-links, from the page records whose
    document is in the knowledge base and whose page chunk is there, of the document's current attempt. A
    page's links are written to its chunk only when they changed, as one metadata key set on the chunk as
    it is then (`set_metadata`): a chunk deleted, moved, reparsed or edited since it was read here is never
    written back as it was read. Out of time, a fresh finalize writes the links left."""
    from chalicelib.enrich.wiki import cross_links, current_pages, index_page

    if _closed(deps, kb_id):
        return  # its wiki goes with it: the knowledge base's delete purges it
    current = current_pages(deps, kb_id)
    present, rows, chunks = current.records, current.rows, current.chunks
    deps.wiki.put_index(kb_id, index_page([(r.document, r.title) for r in present]))
    if _closed(deps, kb_id):  # deleted (or being deleted) while this read: what this wrote goes too
        deps.wiki.delete_kb(kb_id)
        return
    links = cross_links(
        [r.title for r in present], [chunks[(r.knowledge_id, r.chunk_id)].content for r in present]
    )
    written = 0
    for record, targets in zip(present, links, strict=True):
        see_also = [present[t].title for t in targets]
        if (chunks[(record.knowledge_id, record.chunk_id)].metadata.get("see_also") or []) == see_also:
            continue  # unchanged (none yet reads as no links)
        if out_of_time():
            trigger_wiki(deps, kb_id, "finalize")
            logger.info("wiki finalize handed over", extra={"kb_id": kb_id, "links_written": written})
            return
        attempt = rows[record.knowledge_id].attempt
        if deps.chunks.set_metadata(
            record.knowledge_id, record.chunk_id, "see_also", see_also, kb_id=kb_id, attempt=attempt
        ):
            written += 1
    logger.info("wiki finalized", extra={"kb_id": kb_id, "pages": len(present), "links_written": written})


def _closed(deps: Dependencies, kb_id: str) -> bool:
    kb = deps.kbs.get(kb_id)
    return kb is None or kb.status == "deleting"
