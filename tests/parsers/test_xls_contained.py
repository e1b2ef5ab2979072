"""An .xls is read by calamine in a child process (office.ContainedCalamine, kept warm): calamine sized buffers
from damaged counts (5.4 GB, 44 TB, 137 GB) and a failed allocation aborted the whole worker."""

from __future__ import annotations

import pytest
from project_paths import CORPUS

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader, calamine_child, office
from chalicelib.ports import ReadRequest

XLS = sorted(CORPUS.glob("*.xls")) if CORPUS.is_dir() else []


def _read(data: bytes) -> tuple[str, dict[str, object]]:
    result = build_docreader().read(ReadRequest(data=data, file_name="book.xls", file_type="xls"))
    return result.markdown, result.metadata


@pytest.mark.skipif(not XLS, reason="the shared corpus is not beside the project")
@pytest.mark.parametrize("path", XLS, ids=lambda p: p.name)
def test_the_child_reads_what_calamine_reads_in_process(path, monkeypatch: pytest.MonkeyPatch) -> None:
    contained = _read(path.read_bytes())
    monkeypatch.setattr(office, "CONTAINED_FORMATS", frozenset())
    assert contained == _read(path.read_bytes())


def test_dates_times_and_durations_cross_back_as_values() -> None:
    import datetime as dt

    grid = [
        [
            dt.datetime(2024, 2, 29, 13, 5),
            dt.date(2024, 3, 1),
            dt.time(9, 30),
            dt.timedelta(hours=36),
            1.5,
            "x",
            None,
        ]
    ]
    assert calamine_child.untagged(calamine_child._tagged(grid)) == grid


@pytest.mark.skipif(not XLS, reason="the shared corpus is not beside the project")
def test_a_cell_that_asks_for_137_gb_fails_the_file_not_the_worker() -> None:
    from security.hostile_files import xls_far_cell

    with pytest.raises(PermanentStageError, match="damaged"):
        _read(xls_far_cell())
    assert _read((CORPUS / "vega-us-employment.xls").read_bytes())[0]  # and the worker reads on


@pytest.mark.skipif(not XLS, reason="the shared corpus is not beside the project")
def test_the_warm_child_serves_file_after_file_and_is_replaced_when_it_dies() -> None:
    data = XLS[0].read_bytes()
    first = _read(data)
    child = office.CONTAINED_CALAMINE._child
    assert child is not None and _read(data) == first and office.CONTAINED_CALAMINE._child is child
    child.kill()
    child.wait()
    assert _read(data) == first and office.CONTAINED_CALAMINE._child is not child
