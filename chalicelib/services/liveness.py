"""Is the row still this attempt's: read before a stage works (else the message is dropped) and again right
after it wrote (a deleted row's write is undone, so it never comes back into search)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.status import may_write
from chalicelib.domain.types import Knowledge, ParseStatus, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies


def live_knowledge(deps: Dependencies, message: StageMessage) -> Knowledge | None:
    """The row when this attempt may still write (processing, same attempt); None to drop the message."""
    knowledge = deps.knowledge.get(message.knowledge_id)
    if (
        knowledge is None
        or knowledge.attempt != message.attempt
        or knowledge.parse_status != ParseStatus.PROCESSING
    ):
        logger.info(
            "dropping a message: row missing, superseded or not processing",
            extra={"knowledge_id": message.knowledge_id, "attempt": message.attempt},
        )
        return None
    metering.attribute(knowledge.kb_id, knowledge.tenant_id)
    return knowledge


def kept_after_write(
    deps: Dependencies,
    knowledge: Knowledge,
    undo: Callable[[], Any],
    *,
    undo_moved: Callable[[Knowledge], Any] | None = None,
    undo_superseded: Callable[[], Any] | None = None,
) -> bool:
    """Re-reads the row right after a stage wrote for it. A row being deleted (or gone) gets `undo`, so a
    late write never resurrects a deleted document in search; a row moved to another knowledge base
    meanwhile gets `undo_moved` (with the row as it is now), as what was written under the old one is
    orphaned there; a cancelled or superseded attempt keeps what it wrote but goes no further (False),
    except that a superseded one gets `undo_superseded` when given (what it wrote after the newer attempt
    cleaned up would stay for good)."""
    row = deps.knowledge.get(knowledge.id)
    if row is None or row.parse_status == ParseStatus.DELETING:
        undo()
        logger.info("undid a write for a deleted knowledge", extra={"knowledge_id": knowledge.id})
        return False
    if row.kb_id != knowledge.kb_id:
        if undo_moved is not None:
            undo_moved(row)
        logger.info("a write landed after a move", extra={"knowledge_id": knowledge.id})
        return False
    if row.attempt != knowledge.attempt:
        if undo_superseded is not None:
            undo_superseded()
        return False
    return may_write(row.parse_status)
