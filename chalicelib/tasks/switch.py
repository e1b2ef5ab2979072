"""A big document's switch (operations/knowledge_changes.py `edit`): its index entries set to what its row
says, a slice of chunk pages a delivery (services/document_switch.py), from the cursor the task saved.

A walk ends only when the row says at its end what the walk applied: a row switched again meanwhile (by
another request, whose own task walks too) starts it over with the new value, so the last walk to end
leaves every entry as the row says, whatever order the walks' writes landed in. Each page's write is the
same whoever repeats it, so a duplicate delivery or a retry only repeats pages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from chalicelib.domain.errors import StageError
from chalicelib.domain.types import EnableStatus, Knowledge, ParseStatus, Task
from chalicelib.ports import Dependencies, IndexWriteError
from chalicelib.services.document_switch import entry_switch
from chalicelib.tasks.reembed import RetryTaskLater

#: chunk pages flipped per delivery, by time (the lifecycle function's timeout is 300 s)
SLICE_SECONDS = 60.0
#: the task's params: the value its walk applies, and the chunk id it goes on after
APPLYING, AFTER = "applying", "after"


def switch_work(deps: Dependencies, task: Task) -> Iterator[tuple[str, Any]]:
    for item in task.items[task.done :]:
        yield item, lambda item=item: _walk_slice(deps, task, item)


def _enabled(row: Knowledge | None, task: Task) -> bool | None:
    """What the row says its entries are, None when they are no longer this task's to set: the row deleted,
    being deleted, moved out (its delete or move carries its entries), or reparsed (the new attempt's
    indexing writes them as the row says)."""
    if (
        row is None
        or row.kb_id != task.kb_id
        or row.parse_status not in (ParseStatus.COMPLETED, ParseStatus.FINALIZING)
    ):
        return None
    return row.enable_status == EnableStatus.ENABLED


def _walk_slice(deps: Dependencies, task: Task, knowledge_id: str) -> None:
    enabled = _enabled(deps.knowledge.get(knowledge_id), task)
    kb = deps.kbs.get(task.kb_id)
    if enabled is None or kb is None:
        return
    entries = entry_switch(deps, kb)  # a Conflict (the model cannot be used) is the item's failure
    if entries is None:
        return
    if task.params.get(APPLYING) != enabled:  # a new walk (the first, or the row switched again)
        task.params[APPLYING], task.params[AFTER] = enabled, None
    deadline = time.monotonic() + SLICE_SECONDS
    try:
        after = entries.flip(
            deps, knowledge_id, enabled, after=task.params[AFTER], stop=lambda: time.monotonic() >= deadline
        )
    except IndexWriteError as error:  # the task says why, without the engine's words
        raise StageError("the search index refused the change") from error
    if after is not None:
        task.params[AFTER] = after
        raise RetryTaskLater("the switch goes on in the next delivery", 0)
    again = _enabled(deps.knowledge.get(knowledge_id), task)
    if again is not None and again != enabled:
        task.params[APPLYING], task.params[AFTER] = again, None
        raise RetryTaskLater("the document was switched again meanwhile: its entries are set again", 0)
