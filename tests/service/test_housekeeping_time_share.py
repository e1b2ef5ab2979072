"""A backlog of lost deletes larger than a sweep gets through is due again a threshold after each redrive, so
sweep after sweep it took all the time and the stuck rows behind it got none (README: 'a backlog of them
cannot starve the stuck rows'). Deletes and summaries get half the invocation's time at most."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.services import deadline
from chalicelib.stages import housekeeping

from .conftest import upload

#: seconds each redrive takes on the sweep's clock, and the invocation's time
REDRIVE_SECONDS, INVOCATION_SECONDS = 40.0, 100.0


def test_a_backlog_of_lost_deletes_leaves_the_stuck_rows_time_in_every_sweep(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stuck = upload(deps, kb)
    queue.purge("docreader")
    for n in range(12):  # deletes whose tasks never finish: more than a threshold's sweeps redrive
        doc = upload(deps, kb, f"d{n}.md", f"# D{n}\n\nx {n}\n".encode())
        queue.purge("docreader")
        rows.write_fields(doc.id, parse_status=ParseStatus.DELETING)
    deps.settings = replace(
        deps.settings, stale_after_seconds=600
    )  # two sweeps (5 minutes apart) a threshold
    clock = [0.0]
    monkeypatch.setattr(deadline, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    redrive = housekeeping.redrive_delete

    def slow_redrive(*args: object) -> None:
        clock[0] += REDRIVE_SECONDS
        redrive(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(housekeeping, "redrive_delete", slow_redrive)
    start = datetime.now(UTC) + timedelta(hours=1)
    recovered: list[str] = []
    for i in range(6):
        clock[0] = 0.0
        token = deadline.stage_deadline.set(INVOCATION_SECONDS)
        try:
            report = housekeeping.sweep(deps, start + timedelta(minutes=5 * i))
        finally:
            deadline.stage_deadline.reset(token)
        assert report.deletes_redriven, "the deletes go on too"
        recovered += report.recovered
    assert recovered == [stuck.id]
