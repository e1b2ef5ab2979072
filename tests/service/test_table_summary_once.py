"""A data table's summary is one model reply, whatever happens to the postprocess task: a retry after a try
that wrote the chunks and died before it settled the row reuses that reply (the model is not asked again),
a try that wrote its chunks only in part leaves none of them, and of two copies running at once only the
reply of the one that settled the row stays stored and indexed, the span counting its columns. Before, the
chunk ids were numbered over each reply's columns and only upserted: a retry or a second copy whose reply
described fewer columns left the other reply's extra column chunks stored and searchable, the span counting
one reply and the index holding another's."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import IndexSpace
from chalicelib.stages import postprocess

from .conftest import drain, task_body, upload

CSV = ("name,qty,price\n" + "".join(f"item{i},{i},{i * 1.5}\n" for i in range(50))).encode()
THREE = {"name": "item name", "qty": "how many", "price": "unit price"}
ONE = {"price": "the unit price"}


@pytest.fixture
def table_doc(deps: Services, tenant: Tenant) -> Iterator[tuple[KnowledgeBase, Knowledge]]:
    """A CSV parsed, chunked and indexed, its postprocess task not yet run."""
    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="t", summary_model_id=CHAT))
        knowledge = upload(deps, kb, "stock.csv", CSV)
        drain(deps)
        yield kb, knowledge


def scripted_replies(monkeypatch: pytest.MonkeyPatch, replies: list[dict[str, str]]) -> list[int]:
    """The table model answers `replies` in turn (each call described by its columns); returns the calls."""
    import chalicelib.enrich.tables as tables

    calls: list[int] = []

    def summarise(*_a: Any, **_k: Any) -> tables.TableSummary:
        calls.append(1)
        return tables.TableSummary("stock list", replies.pop(0))

    monkeypatch.setattr(tables, "summarise", summarise)
    return calls


def crash_once(
    monkeypatch: pytest.MonkeyPatch, target: Any, name: str, before: Callable[..., Any] | None = None
) -> None:
    """`target.name` raises on its first call (after `before`, given the same arguments), then works."""
    real = getattr(target, name)
    crashes = [RuntimeError("the Lambda died")]

    def once(*a: Any, **k: Any) -> Any:
        if crashes:
            if before is not None:
                before(*a, **k)
            raise crashes.pop()
        return real(*a, **k)

    monkeypatch.setattr(target, name, once)


def run_until_answered(queue: MemoryTaskQueue, deps: Services) -> None:
    for _ in range(5):
        if not queue.waiting("postprocess"):
            return
        queue.deliver("postprocess", postprocess.handle, deps)
    raise AssertionError("the postprocess task was never answered")


def table_state(
    deps: Services, kb: KnowledgeBase, knowledge: Knowledge
) -> tuple[Any, list[Chunk], list[str]]:
    """(the postprocess span's outputs, the stored table chunks in order, the table chunks' index entries)."""
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess")
    assert span is not None
    kinds = (ChunkType.TABLE_SUMMARY, ChunkType.TABLE_COLUMN)
    chunks = sorted((c for c in deps.chunks.list(knowledge.id) if c.chunk_type in kinds), key=lambda c: c.seq)
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)
    return span.outputs, chunks, sorted(e.chunk_id for e in entries if "-table" in e.chunk_id)


def assert_one_reply(
    deps: Services, kb: KnowledgeBase, knowledge: Knowledge, workflow: MemoryWorkflow, columns: Sequence[str]
) -> None:
    answers = workflow.answers_to("plan-token")
    assert answers and all(a.succeeded for a in answers)
    outputs, chunks, entries = table_state(deps, kb, knowledge)
    described = [c.content.split(" ")[1] for c in chunks if c.chunk_type == ChunkType.TABLE_COLUMN]
    assert described == list(columns), [c.content for c in chunks]
    assert [c.chunk_type for c in chunks][:1] == [ChunkType.TABLE_SUMMARY]
    assert len({c.id.rsplit("-", 1)[0] for c in chunks}) == 1  # one reply's set
    assert outputs["table_summary"] == "done" and outputs["table_columns"] == len(columns)
    assert entries == sorted(c.id for c in chunks)  # indexed: those chunks, nothing else


def test_a_retry_after_a_try_died_before_it_settled_reuses_that_reply(
    deps: Services,
    table_doc: tuple[KnowledgeBase, Knowledge],
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb, knowledge = table_doc
    calls = scripted_replies(monkeypatch, [THREE, ONE])
    crash_once(monkeypatch, deps.knowledge, "settle_plan")
    queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
    run_until_answered(queue, deps)
    assert len(calls) == 1  # the retry took the first try's reply from its chunks
    assert_one_reply(deps, kb, knowledge, workflow, ["name", "qty", "price"])


def test_a_set_written_in_part_is_asked_again_and_leaves_nothing(
    deps: Services,
    table_doc: tuple[KnowledgeBase, Knowledge],
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb, knowledge = table_doc
    calls = scripted_replies(monkeypatch, [THREE, ONE])
    real_put = deps.chunks.put_many

    def first_two(chunks: Sequence[Chunk]) -> None:  # the batch write cut short
        real_put(list(chunks)[:2])

    crash_once(monkeypatch, deps.chunks, "put_many", before=first_two)
    queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
    run_until_answered(queue, deps)
    assert len(calls) == 2
    assert_one_reply(deps, kb, knowledge, workflow, ["price"])


@pytest.mark.parametrize(
    ("first", "second"),
    [(THREE, ONE), (ONE, THREE)],
    ids=["the-settler-describes-more", "it-describes-fewer"],
)
def test_of_two_copies_at_once_only_the_settled_reply_stays(
    deps: Services,
    table_doc: tuple[KnowledgeBase, Knowledge],
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
    first: dict[str, str],
    second: dict[str, str],
) -> None:
    """SQS delivers a duplicate while the first copy waits for the model: the duplicate asks too, writes its
    reply's chunks, settles the row and answers; then the first copy's reply comes, and it writes its own."""
    import chalicelib.enrich.tables as tables

    kb, knowledge = table_doc
    replies = [first, second]  # the duplicate is answered first (it settles), the waiting copy second
    calls: list[int] = []

    def summarise(*_a: Any, **_k: Any) -> tables.TableSummary:
        calls.append(1)
        if len(calls) == 1:  # the first copy's call: the duplicate runs whole meanwhile
            queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
            queue.deliver("postprocess", postprocess.handle, deps)
            return tables.TableSummary("stock list", replies[1])
        return tables.TableSummary("stock list", replies[0])

    monkeypatch.setattr(tables, "summarise", summarise)
    queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
    run_until_answered(queue, deps)
    assert len(calls) == 2
    assert_one_reply(deps, kb, knowledge, workflow, list(first))
