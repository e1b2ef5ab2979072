"""A re-embed whose task died (dead-lettered, killed and never retried, or ended failed without clearing
the knowledge base's `reembed_to`) must not hold move and clone off for ever: a live one answers 409
`reembed_running`; a dead one is settled by the request (the knowledge base stays on its old model, which
search used all along, and the half-built index goes), and the move or clone goes on."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeBaseRepo, MemoryTaskQueue, MemoryTaskRepo
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import KnowledgeBase, Task, TaskStatus, Tenant
from chalicelib.ports import IndexSpace

from .conftest import TEXT
from .test_move_clone import CRANES, TIDES, clone, completed, move, new_kb, run_lifecycle, search

NEW = "hashing/32"


@pytest.fixture
def setup(deps: Services, tenant: Tenant) -> tuple[KnowledgeBase, KnowledgeBase, list[str]]:
    deps._embedders[NEW] = HashingEmbedding(32)
    source = new_kb(deps, tenant, "harbour")
    target = new_kb(deps, tenant, "archive")
    ids = [completed(deps, source, "tides.md", TIDES).id, completed(deps, source, "cranes.md", CRANES).id]
    return source, target, ids


def start_reembed(deps: Services, kb: KnowledgeBase) -> Task:
    from chalicelib.commands import UpdateKnowledgeBase
    from chalicelib.operations.knowledge_bases import update_kb

    _, task = update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(embedding_model_id=NEW, reembed=True))
    assert task is not None
    return task


def counts(deps: Services, kb: KnowledgeBase, model_id: str, ids: list[str]) -> list[int]:
    space = IndexSpace.of(deps.embedding_model(model_id))
    return [deps.engine().count(space, kb.id, knowledge_id) for knowledge_id in ids]


def stored(deps: Services, task: Task) -> Task:
    found = deps.tasks.get(task.id)
    assert found is not None
    return found


def age(deps: Services, task: Task, seconds: float) -> None:
    """The task last saved progress `seconds` ago (no port writes a time backwards)."""
    tasks = deps.tasks
    assert isinstance(tasks, MemoryTaskRepo)
    row = stored(deps, task)
    row.updated_at -= timedelta(seconds=seconds)
    tasks._rows[row.id] = row


def dead_lettered_half_way(deps: Services, kb: KnowledgeBase, monkeypatch: Any) -> Task:
    """A re-embed that built one document, then crashed on every delivery until its message went to the
    DLQ: its task still says running, and the knowledge base still names it in `reembed_to`."""
    from chalicelib.stages import lifecycle
    from chalicelib.tasks import reembed

    from .conftest import stage_handler

    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    task = start_reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    queue.deliver("lifecycle", stage_handler("lifecycle"), deps)

    def crash(*_: Any) -> None:
        raise RuntimeError("a bug, not a stage error: the message is retried until it is dead-lettered")

    with monkeypatch.context() as crashing:
        crashing.setattr(reembed, "_reembed_owner", crash)
        while queue.waiting("lifecycle"):
            queue.deliver("lifecycle", stage_handler("lifecycle"), deps)
    assert queue.dead_letters("lifecycle")
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 60.0)
    assert stored(deps, task).status == TaskStatus.RUNNING
    assert deps.kbs.get(kb.id).reembed_to["task_id"] == task.id  # type: ignore[union-attr]
    return task


def test_a_dead_lettered_re_embed_blocks_move_and_clone_only_until_the_stale_limit(
    deps: Services, setup: tuple[KnowledgeBase, KnowledgeBase, list[str]], monkeypatch: Any
) -> None:
    source, target, ids = setup
    old = counts(deps, source, source.embedding_model_id, ids)
    dead = dead_lettered_half_way(deps, source, monkeypatch)
    assert any(counts(deps, source, NEW, ids))  # half of the new index was built
    for request in (
        lambda: move(deps, source, target, [ids[0]], "reuse_vectors"),
        lambda: clone(deps, source, target_kb_id=target.id),
    ):
        with pytest.raises(Conflict) as refused:  # it may still be alive: 409 until the stale limit
            request()
        assert refused.value.code == "reembed_running"
        assert refused.value.data["task_id"] == dead.id
    age(deps, dead, deps.settings.stale_after_seconds + 60)

    task = move(deps, source, target, [ids[0]], "reuse_vectors")
    settled = deps.kbs.get(source.id)
    assert settled is not None and settled.reembed_to == {}
    assert settled.embedding_model_id == source.embedding_model_id  # on its old model, as search was
    run_lifecycle(deps)
    assert stored(deps, task).status == TaskStatus.COMPLETED
    ended = stored(deps, dead)  # it ran once more: saw itself replaced, and took its half-built index away
    assert ended.status in (TaskStatus.FAILED, TaskStatus.PARTIAL) and "replaced" in ended.errors["switch"]
    assert counts(deps, source, NEW, ids) == [0, 0]
    assert counts(deps, target, target.embedding_model_id, ids[:1]) == old[:1]
    assert counts(deps, source, source.embedding_model_id, ids[1:]) == old[1:]
    assert [hit["knowledge_id"] for hit in search(deps, target, "spring tides full moon")][:1] == [ids[0]]
    assert ids[1] in {hit["knowledge_id"] for hit in search(deps, source, "harbour cranes load limit jib")}


def test_a_re_embed_that_ended_failed_without_clearing_its_mark_does_not_block_move_or_clone(
    deps: Services,
    setup: tuple[KnowledgeBase, KnowledgeBase, list[str]],
    monkeypatch: Any,
) -> None:
    """The switch's conditional write lost every race ("kept changing"): the task ends with its mark still
    on the knowledge base. A finished task is no re-embed in progress, however recently it saved."""
    source, target, ids = setup
    old = counts(deps, source, source.embedding_model_id, ids)
    real_update = MemoryKnowledgeBaseRepo.update

    def switch_always_loses(repo: MemoryKnowledgeBaseRepo, kb: KnowledgeBase) -> KnowledgeBase | None:
        if kb.embedding_model_id == NEW:
            return None
        return real_update(repo, kb)

    task = start_reembed(deps, source)
    with monkeypatch.context() as racing:
        racing.setattr(MemoryKnowledgeBaseRepo, "update", switch_always_loses)
        run_lifecycle(deps)
    ended = stored(deps, task)
    assert ended.status == TaskStatus.PARTIAL and "kept changing" in ended.errors["switch"]
    assert deps.kbs.get(source.id).reembed_to["task_id"] == task.id  # type: ignore[union-attr]

    started = clone(deps, source, target_kb_id=target.id)
    settled = deps.kbs.get(source.id)
    assert settled is not None and settled.reembed_to == {}
    assert settled.embedding_model_id == source.embedding_model_id
    run_lifecycle(deps)
    assert stored(deps, replace(task, id=started["task_id"])).status == TaskStatus.COMPLETED
    assert counts(deps, source, source.embedding_model_id, ids) == old
    copied = {row.file_name for row in deps.knowledge.page_by_kb(target.id, limit=10)}
    assert copied == {"tides.md", "cranes.md"}
    assert search(deps, target, "spring tides full moon")


def test_a_move_item_goes_on_when_a_re_embed_begun_since_the_request_has_died(
    deps: Services, setup: tuple[KnowledgeBase, KnowledgeBase, list[str]], monkeypatch: Any
) -> None:
    """The check where the work is done reads the re-embed's task too: a live one fails the item (see
    test_move_clone_audit_fixes), a dead one does not."""
    source, target, ids = setup
    for name, text in (("cranes.md", CRANES), ("notes.md", TEXT)):  # for the target's re-embed to build
        completed(deps, target, name, text)
    task = move(deps, source, target, [ids[0]], "reuse_vectors")
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("lifecycle")  # the move's message waits; the re-embed below runs alone
    dead = dead_lettered_half_way(deps, target, monkeypatch)
    age(deps, dead, deps.settings.stale_after_seconds + 60)
    from chalicelib.stages import lifecycle

    lifecycle.run(deps, task.id)
    done = stored(deps, task)
    assert done.status == TaskStatus.COMPLETED, done.errors
    row = deps.knowledge.get(ids[0])
    assert row is not None and row.kb_id == target.id


def test_a_live_re_embed_still_answers_409_reembed_running(
    deps: Services, setup: tuple[KnowledgeBase, KnowledgeBase, list[str]]
) -> None:
    source, target, ids = setup
    task = start_reembed(deps, target)
    age(deps, task, deps.settings.stale_after_seconds - 60)  # queued behind other work, not dead yet
    with pytest.raises(Conflict) as refused:
        move(deps, source, target, [ids[0]], "reuse_vectors")
    assert (refused.value.code, refused.value.data["task_id"]) == ("reembed_running", task.id)
    assert deps.kbs.get(target.id).reembed_to["task_id"] == task.id  # type: ignore[union-attr]


def test_a_re_embed_reads_no_knowledge_row_per_document_to_meter_it(
    deps: Services, setup: tuple[KnowledgeBase, KnowledgeBase, list[str]], monkeypatch: Any
) -> None:
    """The task lists the rows it re-embeds: each document's usage share comes from that listing."""
    from chalicelib.adapters.memory import MemoryKnowledgeRepo

    source, _, _ = setup
    start_reembed(deps, source)
    real_get = MemoryKnowledgeRepo.get
    read: list[str] = []

    def counted(repo: MemoryKnowledgeRepo, knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        read.append(knowledge_id)
        return real_get(repo, knowledge_id, *args, **kwargs)

    monkeypatch.setattr(MemoryKnowledgeRepo, "get", counted)
    run_lifecycle(deps)
    assert deps.kbs.get(source.id).embedding_model_id == NEW  # type: ignore[union-attr]
    assert read == []
