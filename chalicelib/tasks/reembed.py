"""Re-embedding a knowledge base into a new embedding model or retrieval engine (PUT /knowledge-bases/{id}
with `reembed: true`), on the lifecycle queue.

The new index is built beside the old one while search keeps answering from the old: every entry of every
document (or FAQ entry) is read back from the old space as it was indexed and embedded again into the new
space under the same id (an upsert: a redelivered slice rewrites the same entries). A document still on its
way is taken once it has settled, so nothing it writes later is missed; when every document is done the
knowledge base switches to the new model in one conditional write, and the old space's entries go.
A document whose indexing straddles the switch indexes itself again into the new space (see
`stages/embedding.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Task
from chalicelib.faq.entries import FAQ_KB_TYPE, all_entries
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexSpace, RetrieveEngine, iter_batches
from chalicelib.services.indexing import EmbeddingRun

Work = tuple[str, Callable[[], None]]
SWITCH_ITEM = "switch"
#: how long the task waits for documents still on their way before it looks again
WAIT_SECONDS = 60


class WaitForDocuments(Exception):
    """Documents of the knowledge base are still being ingested: look again after `WAIT_SECONDS`."""


class Target:
    """The old space (read) and the new one (written)."""

    def __init__(self, deps: Dependencies, kb: KnowledgeBase) -> None:
        old_model = deps.embedding_model(kb.embedding_model_id)
        self.new_model = deps.embedding_model(kb.reembed_to["embedding_model_id"])
        self.old_space, self.new_space = IndexSpace.of(old_model), IndexSpace.of(self.new_model)
        self.old_engine: RetrieveEngine = deps.engine(kb.retrieval_engine)
        self.new_engine: RetrieveEngine = deps.engine(kb.reembed_to.get("retrieval_engine", ""))


def _owners(deps: Dependencies, kb: KnowledgeBase) -> tuple[list[str], bool]:
    """The ids index entries are kept under (documents, or FAQ entries) that are ready to be re-embedded,
    and whether some are still on their way."""
    if kb.type == FAQ_KB_TYPE:
        return [entry.id for entry in all_entries(deps, kb.id) if entry.indexed], False
    rows = deps.knowledge.list_by_kb(kb.id, 1, 1_000_000).items
    settled = [r.id for r in rows if r.parse_status == ParseStatus.COMPLETED]
    return settled, any(is_in_flight(r.parse_status) for r in rows)


def reembed_work(deps: Dependencies, task: Task) -> Iterator[Work]:
    kb = deps.kbs.get(task.kb_id)
    if kb is None or kb.reembed_to.get("task_id") != task.id:
        if SWITCH_ITEM not in task.items:  # the knowledge base is gone, or another change replaced this one
            task.items.append(SWITCH_ITEM)
            yield SWITCH_ITEM, partial(_gone, task)
        return
    target = Target(deps, kb)
    done = set(task.items)
    owners, waiting = _owners(deps, kb)
    for owner in owners:
        if owner not in done:
            task.items.append(owner)
            yield owner, partial(_reembed_owner, deps, kb, target, owner)
    if waiting:
        raise WaitForDocuments(f"documents of knowledge base {kb.id} are still being ingested")
    task.items.append(SWITCH_ITEM)
    yield SWITCH_ITEM, partial(_switch, deps, task, target, owners)


def _gone(task: Task) -> None:
    raise PermanentStageError("the knowledge base is gone, or its re-embed was replaced by another change")


def _reembed_owner(deps: Dependencies, kb: KnowledgeBase, target: Target, owner: str) -> None:
    entries = target.old_engine.entries_of(target.old_space, kb.id, owner)
    for batch in iter_batches(entries, 64):
        texts = [entry.content for entry in batch]
        vectors = (
            EmbeddingRun(deps, target.new_model).embed(texts) if kb.indexing_strategy.vector_enabled else None
        )
        target.new_engine.batch_index(
            target.new_space,
            [replace(entry, vector=None if vectors is None else vectors[n]) for n, entry in enumerate(batch)],
        )


def _switch(deps: Dependencies, task: Task, target: Target, owners: list[str]) -> None:
    for _ in range(5):
        kb = deps.kbs.get(task.kb_id)
        if kb is None or kb.reembed_to.get("task_id") != task.id:
            raise PermanentStageError("the knowledge base is gone, or its re-embed was replaced")
        switched = replace(
            kb,
            embedding_model_id=kb.reembed_to["embedding_model_id"],
            retrieval_engine=kb.reembed_to.get("retrieval_engine", ""),
            reembed_to={},
        )
        if deps.kbs.update(switched) is not None:
            break
    else:
        raise PermanentStageError("the knowledge base kept changing: the switch did not happen")
    if target.old_space != target.new_space or target.old_engine.engine_name != target.new_engine.engine_name:
        for batch in iter_batches(owners, 100):
            target.old_engine.delete_by_knowledge(target.old_space, task.kb_id, list(batch))
    logger.info("re-embedded a knowledge base", extra={"kb_id": task.kb_id, "documents": len(owners)})
