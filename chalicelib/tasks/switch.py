"""A big document's switch (operations/knowledge_changes.py `edit`): its index entries set to what its row
says, a slice of chunk pages a delivery (services/document_switch.py), from the cursor the task saved.

The walk applies what the row says and where: its value and the knowledge base it is in now (a move with
reuse_vectors carries the entries as they are, so the walk follows the document there). The row is read
again before each page's write, and a walk whose row says something else (switched again by another
request, whose own task walks too; moved) writes nothing more: it stops, and its task's next delivery
starts it over as the row says then. So no write goes out on a read older than one page, whichever
delivery makes it (an SQS duplicate of a message walks beside the one that completes the task, and its
task's save is refused: it must not go on writing). The last row write (recorded before it, sent after it)
has a walk that begins after it and writes every page; what may land after that walk's write of a page is
at most one page of another walk, whose row read came before the row's write and whose write of that page
came after (a few milliseconds between the read and the write). A walk that ends reads the row again: one
switched or moved meanwhile starts over.

Each page's write is the same whoever repeats it, so a duplicate delivery or a retry only repeats pages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

from chalicelib.domain.errors import StageError
from chalicelib.domain.types import Chunk, EnableStatus, Knowledge, ParseStatus, Task
from chalicelib.ports import Dependencies, IndexWriteError
from chalicelib.services.document_switch import entry_switch
from chalicelib.tasks.reembed import RetryTaskLater

#: chunk pages flipped per delivery, by time (the lifecycle function's timeout is 300 s)
SLICE_SECONDS = 60.0
#: the task's params: the value its walk applies, the knowledge base it applies it in (the task's own
#: before this was kept), the chunk id it goes on after, and how often it waited for a move's carry
APPLYING, IN, AFTER, WAITED = "applying", "in", "after", "carry_waits"
#: a move writes the row into its target, then carries the entries, then the chunk rows: a page whose chunk
#: rows are still in another knowledge base has its entries on their way (or there still); the walk waits
#: this long, at most MAX_CARRY_WAITS times (a move that died half-way is not waited for without end)
CARRY_WAIT_SECONDS = 30
MAX_CARRY_WAITS = 20


def switch_work(deps: Dependencies, task: Task) -> Iterator[tuple[str, Any]]:
    for item in task.items[task.done :]:
        yield item, lambda item=item: _walk_slice(deps, task, item)


def _applies(row: Knowledge | None) -> tuple[bool, str] | None:
    """What the row says its entries are, and the knowledge base they are in; None when they are no longer
    a switch's to set: the row deleted, being deleted, or reparsed (the new attempt's indexing writes them
    as the row says)."""
    if row is None or row.parse_status not in (ParseStatus.COMPLETED, ParseStatus.FINALIZING):
        return None
    return row.enable_status == EnableStatus.ENABLED, row.kb_id


def _walk_slice(deps: Dependencies, task: Task, knowledge_id: str) -> None:
    applies = _applies(deps.knowledge.get(knowledge_id))
    if applies is None:
        return
    enabled, kb_id = applies
    kb = deps.kbs.get(kb_id)
    if kb is None:  # its delete takes the entries
        return
    entries = entry_switch(deps, kb)  # a Conflict (the model cannot be used) is the item's failure
    if entries is None:
        return
    if (task.params.get(APPLYING), task.params.get(IN, task.kb_id)) != applies:
        _start_over(task, applies)  # a new walk (the first, or the row switched or moved)

    def check(page: Sequence[Chunk]) -> None:
        """Before a page's write: the row still says what the walk applies (read a few milliseconds before
        the write), and the page's entries are where the row is."""
        now = _applies(deps.knowledge.get(knowledge_id))
        if now != applies:
            _start_over(task, now)
            raise RetryTaskLater("the document was switched or moved meanwhile: its walk starts over", 0)
        waited = int(task.params.get(WAITED, 0))
        if waited < MAX_CARRY_WAITS and any(chunk.kb_id != kb_id for chunk in page):
            _start_over(task, applies)
            task.params[WAITED] = waited + 1
            raise RetryTaskLater("a move is carrying the document's entries", CARRY_WAIT_SECONDS)

    deadline = time.monotonic() + SLICE_SECONDS
    try:
        after = entries.flip(
            deps,
            knowledge_id,
            enabled,
            after=task.params[AFTER],
            stop=lambda: time.monotonic() >= deadline,
            check=check,
        )
    except IndexWriteError as error:  # the task says why, without the engine's words
        raise StageError("the search index refused the change") from error
    if after is not None:
        task.params[AFTER] = after
        raise RetryTaskLater("the switch goes on in the next delivery", 0)
    again = _applies(deps.knowledge.get(knowledge_id))
    if again is not None and again != applies:  # a move's carry then found the entries as they were
        _start_over(task, again)
        raise RetryTaskLater("the document was switched or moved meanwhile: its entries are set again", 0)


def _start_over(task: Task, applies: tuple[bool, str] | None) -> None:
    """The task's next delivery walks from the first page, as `applies` says (None: as the row says then)."""
    if applies is None:
        task.params.pop(APPLYING, None)
    else:
        task.params[APPLYING], task.params[IN] = applies
    task.params[AFTER] = None
