"""A CSV's dialect is guessed from a bounded sample: csv.Sniffer's quote-guessing regexes are quadratic in the
text they get (`,"a` repeated with no quote closed before a delimiter: a 120 KB upload held the reader 100 s
in a 64 KB sample, with no look at the parse budget). Work is counted, not timed: the sample's size."""

from __future__ import annotations

import csv
from typing import Any

import pytest

from chalicelib.parsers import simple


@pytest.fixture
def samples(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen: list[int] = []
    real = csv.Sniffer.sniff

    def sniff(self: csv.Sniffer, sample: str, delimiters: str | None = None) -> Any:
        seen.append(len(sample))
        if len(sample) > 8192:  # HEAD's sample: not sniffed here (minutes), the size is what is asserted
            raise csv.Error("not sniffed")
        return real(self, sample, delimiters)

    monkeypatch.setattr(csv.Sniffer, "sniff", sniff)
    return seen


def test_the_sniffer_sees_a_bounded_sample_of_a_hostile_csv(samples: list[int]) -> None:
    markdown, _ = simple.csv_document(',"a' * 40_000 + "\n", 1_000_000)
    assert samples and max(samples) <= 8192
    assert markdown  # read with the dialect guessed from the sample


def test_a_long_semicolon_csv_keeps_its_dialect(samples: list[int]) -> None:
    rows = ["name;city;note", *(f'n{i};"Paris; France";x' for i in range(2_000))]
    markdown, _ = simple.csv_document("\n".join(rows) + "\n", 1_000_000)
    assert max(samples) <= 8192
    assert "| n1999 | Paris; France | x |" in markdown
