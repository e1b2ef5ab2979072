"""Re-embedding a knowledge base into a new embedding model or retrieval engine (PUT /knowledge-bases/{id}
with `reembed: true`), on the lifecycle queue.

The new index is built beside the old one while search keeps answering from the old: every entry of every
document (or FAQ entry) is read back from the old space as it was indexed and embedded again into the new
space under the same id (an upsert: a redelivered slice rewrites the same entries). A document still on its
way is taken once it has settled, so nothing it writes later is missed; when every document is done the
knowledge base switches to the new model in one conditional write, and the old space's entries go. The
old index stays the truth until then: right before the switch the new one is made equal to it (a document
deleted, reparsed, edited or switched off meanwhile changed only the old one).
A document whose indexing straddles the switch indexes itself again into the new space (see
`stages/embedding.py`); one that finished into the old space just before the switch is taken by the
clean-up after it.

Nothing is lost on the way: a provider that fails for a while (throttled, unavailable) retries the task
message later, and a document the new model refuses aborts the re-embed before the switch (the knowledge
base stays on its old model, the new entries go). A delivery that finds the switch written but its own
progress not saved finishes the clean-up instead of failing.

A re-embed is under way while the knowledge base's `reembed_to` names a task that is queued or running and
saved progress within the stale limit (`reembed_running`): move, clone and another model change wait for it
(409 `reembed_running`). One whose task ended without clearing it, or died (dead-lettered, its Lambda killed
and never retried), holds nothing: the next such request settles it (`settle_dead_reembed`, or the same in
`update_kb`'s own write), and the task's one more delivery takes its half-built index away.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import NoReturn

from chalicelib.domain.errors import (
    AppError,
    DeferredStageError,
    PermanentStageError,
    StageError,
    TransientStageError,
)
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import (
    OPEN_TASK_STATUSES,
    TERMINAL_STATUSES,
    Knowledge,
    KnowledgeBase,
    Task,
    TaskKind,
)
from chalicelib.faq.entries import FAQ_KB_TYPE, all_entries
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexSpace, RetrieveEngine, iter_batches
from chalicelib.services.embedding_runs import EmbeddingRun
from chalicelib.services.kb_rows import kb_rows
from chalicelib.services.usage import document_share
from chalicelib.tasks import deliver_again

Work = tuple[str, Callable[[], None]]
SWITCH_ITEM = "switch"
#: how long the task waits for documents still on their way before it looks again
WAIT_SECONDS = 60
#: how long it waits after the embedding provider failed for a while (unavailable, not throttled)
PROVIDER_RETRY_SECONDS = 30
#: deliveries in a row that may meet a failing provider before the re-embed gives up (and stays on the old)
MAX_PROVIDER_RETRIES = 20
#: task.params keys of the model and engine the knowledge base had when the re-embed started
FROM_MODEL, FROM_ENGINE = "from_embedding_model_id", "from_retrieval_engine"


class RetryTaskLater(Exception):
    """The task cannot go on now: save its progress and deliver its message again after `delay_seconds`."""

    def __init__(self, message: str, delay_seconds: float) -> None:
        super().__init__(message)
        self.delay_seconds = delay_seconds


class AnotherDeliveryCarriesOn(Exception):
    """Another delivery of the task (an SQS duplicate of its message) took its work on from here: this one
    stops with nothing saved and nothing sent (the lifecycle runner returns)."""


class WaitForDocuments(RetryTaskLater):
    """Documents of the knowledge base are still being ingested: look again after `WAIT_SECONDS`."""

    def __init__(self, message: str) -> None:
        super().__init__(message, WAIT_SECONDS)


class Target:
    """The old space (read) and the new one (written)."""

    def __init__(self, deps: Dependencies, old: tuple[str, str], new: tuple[str, str]) -> None:
        old_model = deps.embedding_model(old[0])
        self.new_model = deps.embedding_model(new[0])
        self.old_space, self.new_space = IndexSpace.of(old_model), IndexSpace.of(self.new_model)
        self.old_engine: RetrieveEngine = deps.engine(old[1])
        self.new_engine: RetrieveEngine = deps.engine(new[1])

    def moves(self) -> bool:
        """Whether the old entries live somewhere else than the new ones (else they were overwritten)."""
        return self.old_space != self.new_space or self.old_engine.engine_name != self.new_engine.engine_name


def reembed_running(deps: Dependencies, kb: KnowledgeBase) -> bool:
    """A re-embed is under way: its task is queued or running and saved progress within the stale limit
    (a running task saves at least every slice, and a waiting one every retry). One that ended without
    clearing it, or whose message was dead-lettered and saves nothing any more, no longer counts."""
    if not kb.reembed_to:
        return False
    task = deps.tasks.get(kb.reembed_to.get("task_id", ""))
    if task is None or task.status not in OPEN_TASK_STATUSES:
        return False
    return task.updated_at >= datetime.now(UTC) - timedelta(seconds=deps.settings.stale_after_seconds)


def dead_reembed(deps: Dependencies, kb: KnowledgeBase) -> str | None:
    """The task id of a re-embed that marks `kb` but is not under way (`reembed_running`), or None."""
    if not kb.reembed_to or reembed_running(deps, kb):
        return None
    return str(kb.reembed_to.get("task_id", ""))


def settle_dead_reembed(deps: Dependencies, kb: KnowledgeBase) -> KnowledgeBase:
    """`kb` with a dead re-embed's mark cleared (a live one, or none, leaves it as it is). It stays on its
    old model, which search used all along; the dead task runs once more and, finding itself replaced,
    takes its half-built index away (`_gone`), and can never switch any more."""
    for _ in range(5):
        dead_task = dead_reembed(deps, kb)
        if dead_task is None:
            return kb
        settled = deps.kbs.update(replace(kb, reembed_to={}))
        if settled is not None:
            if dead_task:
                deliver_again(deps, dead_task)
            return settled
        current = deps.kbs.get(kb.id, consistent=True)  # changed meanwhile: look again
        if current is None:
            return kb
        kb = current
    return kb


def _owners(deps: Dependencies, kb: KnowledgeBase) -> tuple[list[str], bool]:
    owners, waiting = _owner_rows(deps, kb)
    return list(owners), waiting


def _owner_rows(deps: Dependencies, kb: KnowledgeBase) -> tuple[dict[str, Knowledge | None], bool]:
    """The ids index entries are kept under (documents, or FAQ entries) that are ready to be re-embedded,
    each with its document's row (None for an FAQ entry, which is no document), and whether some are still
    on their way."""
    if kb.type == FAQ_KB_TYPE:
        return {entry.id: None for entry in all_entries(deps, kb.id) if entry.indexed}, False
    rows = list(kb_rows(deps, kb.id))
    # a failed or cancelled document may keep entries (a cancel keeps what was indexed): theirs move too
    settled: dict[str, Knowledge | None] = {r.id: r for r in rows if r.parse_status in TERMINAL_STATUSES}
    return settled, any(is_in_flight(r.parse_status) for r in rows)


def reembed_work(deps: Dependencies, task: Task) -> Iterator[Work]:
    kb = deps.kbs.get(task.kb_id)
    if kb is None or kb.status != "active" or kb.reembed_to.get("task_id") != task.id:
        if SWITCH_ITEM not in task.items:
            task.items.append(SWITCH_ITEM)
            if kb is not None and _switched(kb, task):  # the switch was written, this progress was not
                target = Target(deps, _from(task), _to(task))
                yield SWITCH_ITEM, partial(_clean_up, deps, task, target, task.items)
            else:  # the knowledge base is gone or going, or another change replaced this one
                yield SWITCH_ITEM, partial(_gone, deps, task, kb)
        return
    target = Target(deps, _from(task, kb), _to(task))
    owners, waiting = _owner_rows(deps, kb)
    done = set(task.items)
    for owner, row in owners.items():
        if owner not in done:
            # recorded once embedded: an owner a provider failure interrupts is taken again next time
            yield owner, partial(_reembed_recorded, deps, kb, target, task, owner, row)
    if waiting:
        raise WaitForDocuments(f"documents of knowledge base {kb.id} are still being ingested")
    yield SWITCH_ITEM, partial(_switch, deps, task, target)  # recorded once written


def _from(task: Task, kb: KnowledgeBase | None = None) -> tuple[str, str]:
    if FROM_MODEL in task.params:
        return str(task.params[FROM_MODEL]), str(task.params.get(FROM_ENGINE, ""))
    assert kb is not None  # a task started before the params named the old model: the row still does
    return kb.embedding_model_id, kb.retrieval_engine


def _to(task: Task) -> tuple[str, str]:
    return str(task.params["embedding_model_id"]), str(task.params.get("retrieval_engine", ""))


def _switched(kb: KnowledgeBase, task: Task) -> bool:
    """This re-embed's switch is written and nothing newer is under way (its clean-up is still due)."""
    return (
        FROM_MODEL in task.params
        and not kb.reembed_to
        and (kb.embedding_model_id, kb.retrieval_engine) == _to(task)
    )


def _gone(deps: Dependencies, task: Task, kb: KnowledgeBase | None) -> None:
    if FROM_MODEL in task.params and _half_built_index_is_orphaned(kb, task):
        target = Target(deps, _from(task), _to(task))
        if target.moves():  # nobody else will ever look at what this task wrote into the new space
            owners = [item for item in task.items if item != SWITCH_ITEM]
            for batch in iter_batches(owners, 100):
                target.new_engine.delete_by_knowledge(target.new_space, task.kb_id, list(batch))
    raise PermanentStageError("the knowledge base is gone, or its re-embed was replaced by another change")


def _half_built_index_is_orphaned(kb: KnowledgeBase | None, task: Task) -> bool:
    """The knowledge base is deleted (its delete never sees the new index), or this task's re-embed was
    replaced (it had died) by a change whose knowledge base neither uses nor builds the same target."""
    if kb is None or kb.status != "active":
        return True
    current = (kb.embedding_model_id, kb.retrieval_engine)
    building = (
        str(kb.reembed_to.get("embedding_model_id", "")),
        str(kb.reembed_to.get("retrieval_engine", "")),
    )
    return _to(task) not in (current, building)


def _reembed_recorded(
    deps: Dependencies, kb: KnowledgeBase, target: Target, task: Task, owner: str, row: Knowledge | None
) -> None:
    """`row`: the owner's document, as listed, whose own usage entry the work is (an FAQ entry's is the
    knowledge base's)."""
    usage = document_share(TaskKind.REEMBED.value, row) if row is not None else nullcontext()
    try:
        with usage:
            _provider_retried(task, partial(_reembed_owner, deps, kb, target, owner))
    except (AppError, StageError):
        task.items.append(owner)  # the task records it as failed: not taken again, and no switch
        raise
    task.items.append(owner)


def _provider_retried(task: Task, work: Callable[[], None]) -> None:
    """Runs `work`; a provider failing for a while (throttled, unavailable) is not the document's fault:
    the task message comes back later (RetryTaskLater), up to MAX_PROVIDER_RETRIES deliveries in a row."""
    try:
        work()
    except (DeferredStageError, TransientStageError) as error:
        retries = int(task.params.get("provider_retries", 0)) + 1
        if retries > MAX_PROVIDER_RETRIES:
            raise PermanentStageError(f"the embedding provider kept failing: {error.message}") from error
        task.params["provider_retries"] = retries
        delay = getattr(error, "delay_seconds", 0) or PROVIDER_RETRY_SECONDS
        raise RetryTaskLater(f"embedding provider unavailable: {error.message}", delay) from error
    task.params["provider_retries"] = 0


def _reembed_owner(deps: Dependencies, kb: KnowledgeBase, target: Target, owner: str) -> None:
    """The owner's entries, as the old space holds them, embedded with the new model into the new space
    under the same ids (an upsert: doing it twice writes the same entries)."""
    entries = target.old_engine.entries_of(target.old_space, kb.id, owner)
    run = EmbeddingRun(deps, kb.tenant_id, target.new_model)
    for batch in iter_batches(entries, 64):
        vectors = (
            run.embed([entry.content for entry in batch]) if kb.indexing_strategy.vector_enabled else None
        )
        target.new_engine.batch_index(
            target.new_space,
            [replace(entry, vector=None if vectors is None else vectors[n]) for n, entry in enumerate(batch)],
        )


def _switch(deps: Dependencies, task: Task, target: Target) -> None:
    if task.failed:
        _abort(deps, task, target, f"{task.failed} document(s) could not be embedded with the new model")
    try:
        owners = _reconciled(deps, task, target)
    except RetryTaskLater:
        raise
    except (AppError, StageError) as error:  # the new index cannot be made whole: stay on the old one
        _abort(deps, task, target, f"the new index could not be made whole: {error}")
    for _ in range(5):
        kb = deps.kbs.get(task.kb_id)
        if kb is not None and _switched(kb, task):
            break  # another delivery of this task switched: the clean-up below is idempotent
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
    _clean_up(deps, task, target, [*task.items, *owners])
    task.items.append(SWITCH_ITEM)


def _signature(engine: RetrieveEngine, space: IndexSpace, kb_id: str, owner: str) -> list[tuple[str, ...]]:
    return sorted(
        (e.id, e.chunk_id, e.content, str(e.is_enabled), e.chunk_type)
        for e in engine.entries_of(space, kb_id, owner)
    )


def _reconciled(deps: Dependencies, task: Task, target: Target) -> list[str]:
    """Right before the switch: the new index made equal to the old one, which stayed the truth while the
    re-embed ran (a document deleted, reparsed, edited or switched off meanwhile changed the old only).
    A document gone goes from the new index too; one whose entries differ is embedded again."""
    kb = deps.kbs.get(task.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base is gone")
    owners, waiting = _owners(deps, kb)
    if waiting:
        raise WaitForDocuments(f"documents of knowledge base {kb.id} are still being ingested")
    if not target.moves():
        return owners
    current = set(owners)
    gone = [item for item in task.items if item not in current and item != SWITCH_ITEM]
    for batch in iter_batches(gone, 100):
        target.new_engine.delete_by_knowledge(target.new_space, kb.id, list(batch))
    for owner in owners:
        old = _signature(target.old_engine, target.old_space, kb.id, owner)
        if old != _signature(target.new_engine, target.new_space, kb.id, owner):
            target.new_engine.delete_by_knowledge(target.new_space, kb.id, [owner])
            _provider_retried(task, partial(_reembed_owner, deps, kb, target, owner))
    return owners


def _clean_up(deps: Dependencies, task: Task, target: Target, known: Sequence[str]) -> None:
    """After the switch: a document that finished into the old space after the re-embed listed the
    knowledge base (and has nothing in the new one) is re-embedded too, then the old entries go."""
    kb = deps.kbs.get(task.kb_id)
    if kb is None:
        return
    owners, _ = _owners(deps, kb)
    taken = set(known)
    for owner in owners:
        if owner not in taken and not target.new_engine.count(target.new_space, kb.id, owner):
            _reembed_owner(deps, kb, target, owner)
    if target.moves():
        for batch in iter_batches(sorted(taken.union(owners) - {SWITCH_ITEM}), 100):
            target.old_engine.delete_by_knowledge(target.old_space, task.kb_id, list(batch))
    logger.info("re-embedded a knowledge base", extra={"kb_id": task.kb_id, "documents": len(owners)})


def _abort(deps: Dependencies, task: Task, target: Target, reason: str) -> NoReturn:
    """The new index cannot replace the old one: the knowledge base stays on its old model (a switch now
    would leave documents unsearchable) and the new entries written so far go."""
    for _ in range(5):
        kb = deps.kbs.get(task.kb_id)
        if kb is None or kb.reembed_to.get("task_id") != task.id:
            break
        if deps.kbs.update(replace(kb, reembed_to={})) is not None:
            break
    if target.moves():
        kb = deps.kbs.get(task.kb_id)
        written = set(task.items) | (set(_owners(deps, kb)[0]) if kb is not None else set())
        for batch in iter_batches(sorted(written - {SWITCH_ITEM}), 100):
            target.new_engine.delete_by_knowledge(target.new_space, task.kb_id, list(batch))
    raise PermanentStageError(
        f"{reason}: the knowledge base stays on its old model (see the other errors); fix or delete what "
        "failed and re-embed again"
    )
