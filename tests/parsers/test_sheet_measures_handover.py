"""An xlsx's sheet measures go from the reader's preflight to the sparse-sheet reader through the parse's
context (ParseContext.sheet_measures): measured once, and not kept in a cache keyed by the file's bytes
(module state that outlives the request); a context without them measures the sheets there."""

from __future__ import annotations

from typing import Any

import pytest
from parser_helpers import xlsx_workbook

from chalicelib.parsers import guards, office
from chalicelib.parsers.base import MeasuredOnce, ParseContext
from chalicelib.ports import ReadRequest

_FAR = {"A1": "name", "B1": "value", "A2": "alpha", "B2": 1, "J600000": "FAR NOTE"}
_MARKDOWN = "## Data\n\n| name | value | col10 |\n|---|---|---|\n| alpha | 1 |  |\n|  |  | FAR NOTE |\n"
_MEASURES = {"xl/worksheets/sheet1.xml": (5, 600_000, 10)}


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Counts the package's measuring (check_zip), the measures the sparse reader is given, and the checks
    kept by the file's bytes (MeasuredOnce)."""
    seen: dict[str, Any] = {"check_zip": 0, "measures": [], "kept_by_bytes": []}
    check_zip, read_sparse, kept = guards.check_zip, office.read_sparse_sheets, MeasuredOnce.get

    def counting_check_zip(*args: Any, **kwargs: Any) -> dict[str, Any]:
        seen["check_zip"] += 1
        return check_zip(*args, **kwargs)

    def capturing_read_sparse(data: bytes, measures: Any, limits: Any) -> Any:
        seen["measures"].append(dict(measures))
        return read_sparse(data, measures, limits)

    def noting_get(self: MeasuredOnce[Any], data: bytes, setting: Any, measure: Any) -> Any:
        seen["kept_by_bytes"].append(data)
        return kept(self, data, setting, measure)

    monkeypatch.setattr(guards, "check_zip", counting_check_zip)
    monkeypatch.setattr(office, "read_sparse_sheets", capturing_read_sparse)
    monkeypatch.setattr(MeasuredOnce, "get", noting_get)
    return seen


def test_the_preflights_sheet_measures_reach_the_sparse_reader_without_a_second_measure(
    reader: Any, watched: dict[str, Any]
) -> None:
    data = xlsx_workbook(_FAR)
    result = reader.read(ReadRequest(data=data, file_name="far.xlsx", file_type="xlsx"))
    assert result.markdown == _MARKDOWN
    assert watched["check_zip"] == 1  # the preflight's
    assert watched["measures"] == [_MEASURES]
    assert watched["kept_by_bytes"].count(data) == 0  # handed over in the context, not kept by its bytes


def test_a_context_without_the_measures_measures_the_sheets_itself(watched: dict[str, Any]) -> None:
    data = xlsx_workbook(_FAR)
    request = ReadRequest(data=data, file_name="far.xlsx", file_type="xlsx")
    result = office.parse_spreadsheet(request, ParseContext())
    assert result.markdown == _MARKDOWN
    assert watched["check_zip"] == 1
    assert watched["measures"] == [_MEASURES]
