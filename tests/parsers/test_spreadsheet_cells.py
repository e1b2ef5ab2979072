"""Cell texts are computed once per distinct value; values that compare equal across types keep their own
text (True == 1 == 1.0, 10**16 == 1e16)."""

from __future__ import annotations

import datetime as dt

from chalicelib.parsers.office import _cell, _cell_texts


def test_equal_values_of_different_types_keep_their_own_text() -> None:
    row = [10**16, 1e16, True, 1, 1.0, 0, False, -0.0, 2.5, " padded ", dt.date(2024, 1, 2), None]
    expected = [
        "10000000000000000",
        "1e+16",
        "True",
        "1",
        "1",
        "0",
        "False",
        "0",
        "2.5",
        "padded",
        "2024-01-02",
        "",
    ]
    assert [_cell(v) for v in row] == expected
    assert list(_cell_texts([row, list(reversed(row))])) == [expected, list(reversed(expected))]
