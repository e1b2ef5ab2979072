"""Progress inside a stage: done of total, percent, rate and time left, from the span's own figures."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chalicelib.domain.progress import bar, stage_progress

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_running_embedding_shows_rate_and_time_left() -> None:
    progress = stage_progress(
        "embedding",
        {"entries_indexed": 720, "texts_total": 3152},
        START,
        START + timedelta(seconds=30),
        False,
    )
    assert progress == {
        "unit": "chunks",
        "done": 720,
        "total": 3152,
        "percent": 22.8,
        "rate_per_second": 24.0,
        "eta_seconds": 101.3,
    }
    assert bar(progress) == "[####................] 720/3152 chunks 24.0/s ETA 1m41s"


def test_a_finished_stage_is_complete_and_a_stage_without_a_total_has_no_bar() -> None:
    done = stage_progress("embedding", {"texts_total": 10}, START, START + timedelta(seconds=5), True)
    assert done is not None and done["done"] == 10 and done["percent"] == 100.0 and done["eta_seconds"] == 0
    assert stage_progress("embedding", {"entries_indexed": 3}, START, START, False) is None
    assert (
        stage_progress("embedding", {"entries_indexed": 3, "texts_total": True}, START, START, False) is None
    )
    assert stage_progress("unknown-stage", {"a": 1}, START, START, False) is None


def test_nothing_done_yet_has_no_rate() -> None:
    progress = stage_progress("embedding", {"entries_indexed": 0, "texts_total": 8}, START, START, False)
    assert progress is not None and progress["rate_per_second"] is None and progress["eta_seconds"] is None
    assert bar(progress) == "[....................] 0/8 chunks"
