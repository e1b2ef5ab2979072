"""The knowledge-base sweeps of the lifecycle tasks (retry-failed, reparse of a whole knowledge base, its
delete): each row once for the whole task, and a delivery reads the rows it walks, not the whole knowledge
base for every 50 rows it hands out (a reviewer's proofs: a retry-failed over rows that fail again fast
re-parsed the first row at every slice and never reached the others; 1,000 rows read 21,000)."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, TaskKind, TaskStatus
from chalicelib.tasks import new_task, start_task

from .conftest import ScriptedReader, deliver, upload


def failed_documents(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, n: int) -> list[Knowledge]:
    deps.replace_docreader(ScriptedReader(PermanentStageError("no text in this file")))
    docs = [upload(deps, kb, f"d{i}.md", f"# doc {i}\n\nbody {i}\n".encode()) for i in range(n)]
    while queue.waiting("docreader"):
        deliver(deps, "docreader")
    assert all(deps.knowledge.get(d.id).parse_status == ParseStatus.FAILED for d in docs)  # type: ignore[union-attr]
    return docs


def run_task(deps: Services, queue: MemoryTaskQueue, max_deliveries: int = 100) -> int:
    from chalicelib.stages import lifecycle

    deliveries = 0
    while queue.waiting("lifecycle") and deliveries < max_deliveries:
        queue.deliver("lifecycle", lifecycle.handle, deps)
        deliveries += 1
        while queue.waiting("docreader"):  # each retried document fails again at once
            deliver(deps, "docreader")
    return deliveries


def test_retry_failed_retries_each_failed_row_once_across_slices(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import retry_failed
    from chalicelib.stages import lifecycle

    docs = failed_documents(deps, kb, queue, 4)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # a knowledge base one slice cannot sweep
    task = retry_failed(deps, kb.tenant_id, kb.id)
    run_task(deps, queue)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status != TaskStatus.RUNNING and not queue.waiting("lifecycle")
    assert sorted(done.items) == sorted(d.id for d in docs)
    assert [deps.knowledge.get(d.id).attempt for d in docs] == [2, 2, 2, 2]  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", ["retry_failed", "reparse_kb", "delete_kb"])
def test_a_sweep_reads_each_row_a_bounded_number_of_times(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb, retry_failed
    from chalicelib.stages import lifecycle

    n = 300
    failed_documents(deps, kb, queue, n)
    read = {"rows": 0}
    paged = deps.knowledge.page_by_kb

    def page(kb_id: str, **kwargs: Any) -> Any:
        rows = paged(kb_id, **kwargs)
        read["rows"] += len(rows)
        return rows

    monkeypatch.setattr(deps.knowledge, "page_by_kb", page)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 3600.0)
    if kind == "retry_failed":
        retry_failed(deps, kb.tenant_id, kb.id)
    elif kind == "reparse_kb":
        start_task(deps, new_task(kb.tenant_id, TaskKind.REPARSE_KB, kb.id, []))  # a settings change's
    else:
        delete_kb(deps, kb.tenant_id, kb.id)
    queue.purge("docreader")
    run_task(deps, queue, max_deliveries=5)
    assert read["rows"] <= 3 * n  # a sweep and a closing one from the top; was 7 × n here
