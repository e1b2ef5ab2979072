"""The moto process's heap dumps (a debugging aid, off unless asked for): two dumps compare."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from chalicelib.local import moto_tracing


def test_off_unless_the_environment_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(moto_tracing.ENV, raising=False)
    assert moto_tracing.start_if_asked() is None and not tracemalloc.is_tracing()


class Held:
    def __init__(self) -> None:
        self.data = bytearray(100)


def test_two_dumps_show_what_grew_between_them(tmp_path: Path) -> None:
    dumps = moto_tracing.HeapDumps(tmp_path)
    tracemalloc.start(moto_tracing.FRAMES)
    try:
        first = dumps.dump()
        # more than the census's cut-off under a long-lived worker's heap (500 fell below it in the full suite)
        kept = [Held() for _ in range(20_000)]  # noqa: F841 - held across the second dump
        second = dumps.dump()
    finally:
        tracemalloc.stop()
    report = moto_tracing.compared(Path(f"{first}.snapshot"), Path(f"{second}.snapshot"), top=3)
    assert report.startswith("traced heap") and "test_moto_tracing.py" in report
    assert " Held\n" in Path(f"{second}.census.txt").read_text()
