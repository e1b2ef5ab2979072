"""Issue 24: the durable re-embed behind `PUT /knowledge-bases/{id}` with a new embedding model, on the
in-memory adapters through the lifecycle queue's real handler: search stays on the old index while the
new one is built, a failing provider never costs a document its entries, and a delivery that finds the
switch written but its own progress lost finishes the clean-up."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import UpdateKnowledgeBase
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import KnowledgeBase, Task, TaskStatus, Tenant
from chalicelib.ports import IndexSpace
from chalicelib.ports.models import ModelRequestError, ModelUnavailable

if TYPE_CHECKING:
    from chalicelib.ports.models import Vectors

from .test_move_clone import CRANES, TIDES, completed, new_kb, run_lifecycle, search

NEW = "hashing/32"


class Flaky(HashingEmbedding):
    """The new model: unavailable for the next `outages` calls, and refusing any text with `refused` in it."""

    def __init__(self) -> None:
        super().__init__(32)
        self.outages = 0
        self.refused = ""

    def embed(self, texts: Sequence[str]) -> Vectors:
        if self.outages:
            self.outages -= 1
            raise ModelUnavailable("provider down")
        if self.refused and any(self.refused in text for text in texts):
            raise ModelRequestError("input rejected")
        return super().embed(texts)


@pytest.fixture
def flaky(deps: Services) -> Flaky:
    model = Flaky()
    deps._embedders[NEW] = model  # what deps.embedding_model(NEW) hands the task
    return model


@pytest.fixture
def docs(deps: Services, tenant: Tenant) -> tuple[KnowledgeBase, list[str]]:
    kb = new_kb(deps, tenant, "harbour")
    return kb, [completed(deps, kb, "tides.md", TIDES).id, completed(deps, kb, "cranes.md", CRANES).id]


def reembed(deps: Services, kb: KnowledgeBase) -> Task:
    from chalicelib.operations.knowledge_bases import update_kb

    _, task = update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(embedding_model_id=NEW, reembed=True))
    assert task is not None
    return task


def counts(deps: Services, kb: KnowledgeBase, model_id: str, ids: list[str]) -> list[int]:
    space = IndexSpace.of(deps.embedding_model(model_id))
    return [deps.engine().count(space, kb.id, knowledge_id) for knowledge_id in ids]


def deliver_once(deps: Services) -> None:
    from .conftest import stage_handler

    deps.queue.deliver("lifecycle", stage_handler("lifecycle"), deps)  # type: ignore[attr-defined]


def task_of(deps: Services, task: Task) -> Task:
    stored = deps.tasks.get(task.id)
    assert stored is not None
    return stored


def test_search_answers_from_the_old_index_while_the_new_one_is_built(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky, monkeypatch: Any
) -> None:
    from chalicelib.stages import lifecycle

    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    deliver_once(deps)
    half = counts(deps, kb, NEW, ids)
    assert sorted(half) == [0, old[ids.index(task_of(deps, task).items[0])]]  # one document built so far
    assert deps.kbs.get(kb.id).embedding_model_id == kb.embedding_model_id  # type: ignore[union-attr]
    assert counts(deps, kb, kb.embedding_model_id, ids) == old  # the old index is whole
    assert {hit["knowledge_id"] for hit in search(deps, kb, "spring tides full moon")} >= {ids[0]}
    run_lifecycle(deps)
    assert task_of(deps, task).status == TaskStatus.COMPLETED
    assert deps.kbs.get(kb.id).embedding_model_id == NEW  # type: ignore[union-attr]
    assert counts(deps, kb, NEW, ids) == old and counts(deps, kb, kb.embedding_model_id, ids) == [0, 0]
    assert ids[1] in {hit["knowledge_id"] for hit in search(deps, kb, "harbour cranes load limit jib")}


def test_a_provider_outage_waits_instead_of_losing_documents(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky
) -> None:
    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    flaky.outages = deps.settings.embed_max_attempts  # every try of one delivery fails
    deliver_once(deps)
    waiting = task_of(deps, task)
    assert waiting.status == TaskStatus.RUNNING and waiting.failed == 0 and waiting.items == []
    assert deps.kbs.get(kb.id).reembed_to["task_id"] == task.id  # type: ignore[union-attr]
    run_lifecycle(deps)  # the provider is back
    done = task_of(deps, task)
    assert done.status == TaskStatus.COMPLETED and done.failed == 0, done.errors
    assert counts(deps, kb, NEW, ids) == old


def test_a_document_the_new_model_refuses_keeps_the_knowledge_base_on_the_old_one(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky
) -> None:
    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    flaky.refused = "cranes"
    run_lifecycle(deps)
    ended = task_of(deps, task)
    assert ended.status != TaskStatus.COMPLETED and ids[1] in ended.errors and "switch" in ended.errors
    now = deps.kbs.get(kb.id)
    assert now is not None and now.embedding_model_id == kb.embedding_model_id and now.reembed_to == {}
    assert counts(deps, kb, kb.embedding_model_id, ids) == old  # nothing lost
    assert counts(deps, kb, NEW, ids) == [0, 0]  # the half-built index is gone
    assert ids[1] in {hit["knowledge_id"] for hit in search(deps, kb, "harbour cranes load limit jib")}


def test_a_delivery_after_a_crash_past_the_switch_finishes_the_clean_up(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky, monkeypatch: Any
) -> None:
    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    engine = deps.engine()
    delete = engine.delete_by_knowledge

    def crash_once(*args: Any) -> int:
        monkeypatch.setattr(engine, "delete_by_knowledge", delete)
        raise RuntimeError("the worker died after the switch was written, before the old entries went")

    monkeypatch.setattr(engine, "delete_by_knowledge", crash_once)
    run_lifecycle(deps)  # the crash fails the message; the queue delivers it again
    done = task_of(deps, task)
    assert done.status == TaskStatus.COMPLETED and done.failed == 0, done.errors
    assert deps.kbs.get(kb.id).embedding_model_id == NEW  # type: ignore[union-attr]
    assert counts(deps, kb, NEW, ids) == old and counts(deps, kb, kb.embedding_model_id, ids) == [0, 0]


def test_what_changed_in_the_old_index_meanwhile_is_in_the_new_one_at_the_switch(
    deps: Services, tenant: Tenant, flaky: Flaky, monkeypatch: Any
) -> None:
    """The old index stays the truth until the switch: a document deleted, or switched off, after the
    re-embed built its new entries is neither back nor searchable once the knowledge base switches."""
    from chalicelib.commands import EditKnowledgeRequest
    from chalicelib.operations.knowledge_changes import delete_knowledge, edit
    from chalicelib.stages import lifecycle

    kb = new_kb(deps, tenant, "harbour")
    tides, cranes = (
        completed(deps, kb, f"{n}.md", data) for n, data in (("tides", TIDES), ("cranes", CRANES))
    )
    ids = [tides.id, cranes.id]
    task = reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    deliver_once(deps)
    deliver_once(deps)
    assert all(counts(deps, kb, NEW, ids))  # both built in the new index, the switch not yet
    delete_knowledge(deps, kb.tenant_id, tides.id)
    edit(deps, kb.tenant_id, cranes.id, EditKnowledgeRequest(enable_status="disabled"))
    run_lifecycle(deps)
    assert task_of(deps, task).status == TaskStatus.COMPLETED
    assert deps.kbs.get(kb.id).embedding_model_id == NEW  # type: ignore[union-attr]
    assert counts(deps, kb, NEW, [tides.id]) == [0]  # the deleted document did not come back
    assert not search(deps, kb, "spring tides full moon")
    assert cranes.id not in {hit["knowledge_id"] for hit in search(deps, kb, "harbour cranes load limit jib")}


def test_a_reembed_with_a_reparse_is_refused(deps: Services, docs: tuple[KnowledgeBase, list[str]]) -> None:
    from chalicelib.domain.errors import BadRequest
    from chalicelib.operations.knowledge_bases import update_kb

    kb, _ = docs
    body = UpdateKnowledgeBase(embedding_model_id=NEW, reembed=True, apply_to="reparse")
    with pytest.raises(BadRequest) as refused:
        update_kb(deps, kb.tenant_id, kb.id, body)
    assert refused.value.code == "reembed_with_reparse"
    assert deps.kbs.get(kb.id).reembed_to == {}  # type: ignore[union-attr]


def test_an_faq_knowledge_base_re_embeds_its_entries(deps: Services, tenant: Tenant, flaky: Flaky) -> None:
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry, delete_entry
    from chalicelib.faq.entries import search as faq_search

    kb = new_kb(deps, tenant, "help", type="faq")
    kept, dropped = (
        create_entry(
            deps,
            kb.tenant_id,
            kb.id,
            FaqEntryRequest(standard_question=q, similar_questions=[s], answers=[a]),
        )
        for q, s, a in (
            ("How do I reset my password?", "forgot password", "Use the reset link."),
            ("Where is the harbour office?", "office address", "On the quay."),
        )
    )
    ids = [kept.id, dropped.id]
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    delete_entry(deps, kb.tenant_id, kb.id, dropped.id)  # while the task is queued: it is not re-embedded
    run_lifecycle(deps)
    assert task_of(deps, task).status == TaskStatus.COMPLETED
    now = deps.kbs.get(kb.id)
    assert now is not None and now.embedding_model_id == NEW
    assert counts(deps, kb, NEW, ids) == [old[0], 0] and counts(deps, kb, kb.embedding_model_id, ids) == [
        0,
        0,
    ]
    from chalicelib.commands import SearchRequest

    hits = faq_search(deps, now, SearchRequest(query_text="forgot password", match_count=3), now.tenant_id)
    assert [hit["entry_id"] for hit in hits] == [kept.id] and hits[0]["match_type"] == "hybrid"


def test_a_knowledge_base_deleted_during_its_re_embed_leaves_nothing_in_the_new_index(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky, monkeypatch: Any
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    kb, ids = docs
    task = reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    deliver_once(deps)
    assert any(counts(deps, kb, NEW, ids))
    delete_kb(deps, kb.tenant_id, kb.id)
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and task_of(deps, task).status != TaskStatus.COMPLETED
    assert counts(deps, kb, NEW, ids) == [0, 0] and counts(deps, kb, kb.embedding_model_id, ids) == [0, 0]


def test_a_cancelled_document_keeps_its_entries_through_the_switch(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky
) -> None:
    """A cancel keeps what was indexed (spec §1.23): those entries move to the new index too."""
    from chalicelib.adapters.memory import MemoryKnowledgeRepo
    from chalicelib.domain.types import ParseStatus

    kb, ids = docs
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(ids[1], parse_status=ParseStatus.CANCELLED)
    old = counts(deps, kb, kb.embedding_model_id, ids)
    task = reembed(deps, kb)
    run_lifecycle(deps)
    assert task_of(deps, task).status == TaskStatus.COMPLETED
    assert counts(deps, kb, NEW, ids) == old and counts(deps, kb, kb.embedding_model_id, ids) == [0, 0]


def _died_half_way(deps: Services, kb: KnowledgeBase, monkeypatch: Any) -> Task:
    """A re-embed that built one document, then lost its message (dead-lettered), long ago."""
    from datetime import timedelta

    from chalicelib.stages import lifecycle

    task = reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    deliver_once(deps)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 60.0)
    deps.queue.purge("lifecycle")  # type: ignore[attr-defined]
    stored = task_of(deps, task)
    stored.updated_at -= timedelta(seconds=deps.settings.stale_after_seconds + 60)
    deps.tasks._rows[stored.id] = stored  # type: ignore[attr-defined]  # no port writes a time backwards
    return stored


def test_a_re_embed_that_died_holds_the_knowledge_base_only_until_the_stale_limit(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky, monkeypatch: Any
) -> None:
    """Its task saved nothing for longer than the stale limit: a new re-embed replaces it (no 409
    reembed_running), the dead task runs once more and fails, and the new one switches."""
    from chalicelib.operations.knowledge_bases import update_kb

    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    fresh = reembed(deps, kb)
    with pytest.raises(Conflict) as running:
        update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(embedding_model_id=NEW, reembed=True))
    assert running.value.code == "reembed_running"
    run_lifecycle(deps)
    assert task_of(deps, fresh).status == TaskStatus.COMPLETED
    update_kb(
        deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(embedding_model_id=kb.embedding_model_id, reembed=True)
    )
    run_lifecycle(deps)  # back on the first model
    dead = _died_half_way(deps, kb, monkeypatch)
    assert any(counts(deps, kb, NEW, ids))
    replacing = reembed(deps, kb)
    assert deps.kbs.get(kb.id).reembed_to["task_id"] == replacing.id  # type: ignore[union-attr]
    run_lifecycle(deps)
    ended = task_of(deps, dead)  # one document done, then replaced: partial, and the switch says why
    assert ended.status == TaskStatus.PARTIAL and "replaced" in ended.errors["switch"]
    assert task_of(deps, replacing).status == TaskStatus.COMPLETED
    now = deps.kbs.get(kb.id)
    assert now is not None and now.embedding_model_id == NEW and now.reembed_to == {}
    assert counts(deps, kb, NEW, ids) == old


def test_any_change_clears_a_dead_re_embed_and_its_half_built_index(
    deps: Services, docs: tuple[KnowledgeBase, list[str]], flaky: Flaky, monkeypatch: Any
) -> None:
    from chalicelib.operations.knowledge_bases import update_kb

    kb, ids = docs
    old = counts(deps, kb, kb.embedding_model_id, ids)
    dead = _died_half_way(deps, kb, monkeypatch)
    assert any(counts(deps, kb, NEW, ids))
    update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(description="renamed"))
    assert deps.kbs.get(kb.id).reembed_to == {}  # type: ignore[union-attr]
    run_lifecycle(deps)
    ended = task_of(deps, dead)  # one document done, then replaced: partial, and the switch says why
    assert ended.status == TaskStatus.PARTIAL and "replaced" in ended.errors["switch"]
    assert counts(deps, kb, NEW, ids) == [0, 0]  # nobody would have looked at it again
    assert counts(deps, kb, kb.embedding_model_id, ids) == old
