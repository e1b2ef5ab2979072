"""Through the DocReader: the builtin engine reads a far cell; MarkItDown's engine, which
builds the whole grid, still meets the extent limit."""

from __future__ import annotations

import pytest
from parser_helpers import xlsx_workbook

from chalicelib.domain.errors import PermanentStageError

_CELLS = {"A1": "name", "B1": "value", "A2": "alpha", "B2": 1, "J600000": "FAR NOTE"}


def test_the_builtin_reader_reads_a_far_cell(read) -> None:
    result = read("notes.xlsx", data=xlsx_workbook(_CELLS))
    assert (
        result.markdown
        == "## Data\n\n| name | value | col10 |\n|---|---|---|\n| alpha | 1 |  |\n|  |  | FAR NOTE |\n"
    )
    assert result.metadata["cells"] == 5


def test_an_engine_that_builds_the_grid_still_meets_the_extent_limit(read) -> None:
    with pytest.raises(PermanentStageError) as error:
        read("notes.xlsx", data=xlsx_workbook(_CELLS), parser_engine_rules={"xlsx": "markitdown"})
    assert "600,000 rows × 10 columns" in error.value.message
