"""Putting work on its queue: a document's next stage (recorded on the row), and the enrichment work outside
the count (a summary refresh, auto-tag) and the wiki's triggers.

The record is what housekeeping reads to tell a row whose message is still waiting in a busy queue from a
row whose message is gone (its worker died on the last try, or the message went to the DLQ)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from chalicelib.domain.errors import ServiceUnavailable, SpanErrorCode
from chalicelib.domain.events import EventType
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Stage, StageMessage, SummaryStatus
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable, WikiOp
from chalicelib.services.backoff import send_briefly
from chalicelib.services.events import knowledge_changed
from chalicelib.services.fairness import queued_at_door
from chalicelib.services.stage_queue import enqueue


def enqueue_first_stage(
    deps: Dependencies, knowledge: Knowledge, stage: Stage = Stage.DOCREADER, *, marked: bool = False
) -> Knowledge:
    """`marked`: the row was inserted with its queue record (a new row), so it is not written again."""
    try:
        if stage == Stage.DOCREADER:
            queued_at_door(deps, knowledge.tenant_id)
        enqueue(
            deps, stage, StageMessage(knowledge.tenant_id, knowledge.id, knowledge.attempt), marked=marked
        )
    except Exception as error:  # any failure to enqueue leaves a failed row that reparse recovers
        logger.exception("enqueue failed", extra={"knowledge_id": knowledge.id})
        fail_not_queued(
            deps, knowledge, f"could not enqueue processing ({type(error).__name__}); reparse to retry"
        )
    return knowledge


def fail_not_queued(deps: Dependencies, knowledge: Knowledge, message: str) -> None:
    """An attempt whose first stage could not be queued fails with `enqueue_failed` (a reparse or a redrive
    starts it again), announced when this write failed it; `knowledge` is updated to say so."""
    failed = deps.knowledge.mark_failed(
        knowledge.id, knowledge.attempt, message, SpanErrorCode.ENQUEUE_FAILED
    )
    knowledge.parse_status = ParseStatus.FAILED
    knowledge.error_message = message
    knowledge.error_code = SpanErrorCode.ENQUEUE_FAILED
    if failed:
        knowledge_changed(
            deps,
            knowledge,
            EventType.KNOWLEDGE_FAILED,
            error_code=SpanErrorCode.ENQUEUE_FAILED,
            error_message=message,
        )


# ---------------------------------------------------------------- enrichment outside the count


@contextlib.contextmanager
def refresh_refusal_answered(saved: str) -> Iterator[None]:
    """A request that queues a refresh after writing what it changed (`saved`: what stands): a queue that
    does not take it (after `send_briefly`'s tries) answers 503 `queue_unavailable`, and the same request
    sent again queues it again."""
    try:
        yield
    except ServiceUnreachable as error:
        raise ServiceUnavailable(
            f"the enrichment queue is not answering; {saved}: send the same request again",
            code="queue_unavailable",
        ) from error


def request_summary_refresh(deps: Dependencies, knowledge: Knowledge) -> bool:
    """A summary outside the count (POST /knowledge/{id}/summary/refresh, an edit, stale content), for
    `knowledge`'s attempt only: when the row is missing or at another attempt (a reparse came), its summary
    is that attempt's to make, so nothing is marked or queued. Whether the refresh was asked for. Tried
    briefly (`send_briefly`: an edit's answer waits on it); raises ServiceUnreachable when the queue never
    took it. The summary stays pending then (another request may have queued it meanwhile, so it is not put
    back): asked again, it is sent again; never asked again, housekeeping gives it up."""
    if not deps.knowledge.set_summary_status(
        knowledge.id, SummaryStatus.PENDING.value, attempt=knowledge.attempt
    ):
        return False
    body = _outside_the_count(knowledge, {"id": "summary_refresh", "kind": "summary"})
    send_briefly(lambda: deps.queue.send_raw("enrichment", body), deps.sleep)
    return True


#: the subtask (outside the count) an edit of a chunk's text queues: stages/enrichment.graph_chunk
GRAPH_CHUNK = "graph_chunk"


def request_graph_refresh(deps: Dependencies, knowledge: Knowledge, chunk_id: str, content_hash: str) -> None:
    """The graph facts read from an edited chunk's old text go, and its new text's come when the graph is on.
    Queued whatever the knowledge base says now, as facts may stand from when its graph was on. Keyed by the
    new text's hash, so a later edit's message does the work of an earlier one (and sending it again is
    harmless). Tried briefly (`send_briefly`: an API answer waits on it); raises ServiceUnreachable
    when the queue never took it."""
    subtask = {"id": "graph_refresh", "kind": GRAPH_CHUNK, "chunk_id": chunk_id, "content_hash": content_hash}
    body = _outside_the_count(knowledge, subtask)
    send_briefly(lambda: deps.queue.send_raw("enrichment", body), deps.sleep)


def request_auto_tag(deps: Dependencies, knowledge: Knowledge) -> None:
    """Queued when the plan is made; it owns no slot of the count (spec §1.14)."""
    deps.queue.send_raw("enrichment", _outside_the_count(knowledge, {"id": "auto_tag", "kind": "auto_tag"}))


def _outside_the_count(knowledge: Knowledge, subtask: dict[str, str]) -> dict[str, Any]:
    """An enrichment message for work outside the subtask count, at the knowledge's attempt."""
    return {
        "tenant_id": knowledge.tenant_id,
        "knowledge_id": knowledge.id,
        "attempt": knowledge.attempt,
        "subtask": subtask,
    }


# ---------------------------------------------------------------- the wiki queue (per knowledge base, debounced)

WIKI_QUEUE = "wiki"
#: an ingest that leaves ops pending asks for the next one this soon (the batch is already gathered)
FOLLOW_UP_DELAY_SECONDS = 5


def enqueue_wiki(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, token: str) -> None:
    """The enrichment worker's part: the op and a delayed ingest trigger. The token is answered when the
    document's pages are in, by the ingest (None: the runner must not answer it now)."""
    deps.wiki.put_op(WikiOp(kb.id, knowledge.id, knowledge.attempt, token))
    trigger_wiki(deps, kb.id, "ingest")


def trigger_wiki(
    deps: Dependencies, kb_id: str, action: str, follow_up: bool = False, delay_seconds: int | None = None
) -> None:
    """An ingest or a finalize of the knowledge base's wiki, after the settings' debounce (or
    `delay_seconds`)."""
    settings = deps.settings
    if delay_seconds is not None:
        delay = delay_seconds
    elif action == "finalize":
        delay = settings.wiki_finalize_delay_seconds
    else:
        delay = settings.wiki_ingest_delay_seconds
        if follow_up:
            delay = min(delay, FOLLOW_UP_DELAY_SECONDS)
    deps.queue.send_raw(WIKI_QUEUE, {"kb_id": kb_id, "action": action}, delay_seconds=delay)


def retract_wiki(deps: Dependencies, kb: KnowledgeBase, knowledge_id: str) -> None:
    """On delete: the document's page records go (its chunks go with the document) and the index follows."""
    deps.wiki.delete_pages(kb.id, knowledge_id)
    if kb.indexing_strategy.wiki_enabled:
        trigger_wiki(deps, kb.id, "finalize")
