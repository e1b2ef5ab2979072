"""Chunking memory follows the text and the chunks, not the separators: a text of very short lines has a
unit per line break (and per line), and holding them all took ~45 bytes per rune (a 50 M-rune Markdown, which
the docreader accepts, needed ~2 GB in a 1,024 MB Lambda). The units are now made as the merge reaches them
(`UnitWindow`), with the same chunks as a scan of them all. The same for a big table's rows (protected spans)
and for the auto strategy's line statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from chunker_helpers import peak_bytes

from chalicelib.chunker import ChunkingConfig, split, split_parent_child
from chalicelib.chunker import profile as profile_module
from chalicelib.chunker import spans as spans_module
from chalicelib.chunker import units as units_module
from chalicelib.chunker.blocks import fenced_blocks
from chalicelib.chunker.profile import Lines

RUNES = 1_000_000


@pytest.mark.parametrize(
    ("line", "strategy"),
    [("a\n", "recursive"), ("a\n\n", "recursive"), ("12,ab,3.5\n", "recursive"), ("a\n", "heading")],
)
def test_short_lines_are_chunked_in_memory_proportional_to_the_text(line: str, strategy: str) -> None:
    """1 M runes of short lines at the default 512/80: the chunks' text is ~1.2 MB and their objects about as
    much; all the units at once were ~45 MB ("a\\n": 44.9 MB traced at HEAD, 2.5 MB now)."""
    text = line * (RUNES // len(line))
    peak, n = peak_bytes(lambda: len(split(text, ChunkingConfig(strategy=strategy))))
    assert n > RUNES // 600
    assert peak < 4 * len(text), f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"


def test_parent_child_short_lines_memory() -> None:
    text = "a\n" * (RUNES // 2)
    config = ChunkingConfig(enable_parent_child=True)
    peak, _ = peak_bytes(lambda: len(split_parent_child(text, config).children))
    assert peak < 6 * len(text), f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"


@pytest.mark.parametrize(
    ("header", "row", "bound"),
    [
        ("|a|b|\n|---|---|\n", "|1|2|\n", 8),
        ("||\n|---|\n", "||\n", 14),
        ("| id | v |\n|---|---|\n", "| 12 | x |\n", 8),
    ],
)
def test_a_big_table_is_chunked_in_memory_proportional_to_the_text(header: str, row: str, bound: int) -> None:
    """A table's rows are protected spans, one each: their offsets are held in 4-byte arrays, not lists of
    Python ints (78 MB traced at HEAD for 1 M runes of `||` rows: a 50 M-rune table, a CSV or sheet as the
    docreader renders it, needed 2-4 GB), and the merge holds a window of the rows' units, not the table's."""
    text = header + row * (RUNES // 4 // len(row))
    peak, n = peak_bytes(lambda: len(split(text, ChunkingConfig(strategy="auto"))))
    assert n > len(text) // 600
    assert peak < bound * len(text), f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"


@pytest.mark.parametrize("line", ["a\n", "ab\n", "\n"])
def test_the_auto_strategy_profiles_short_lines_without_a_list_of_them(line: str) -> None:
    """The profiler's line statistics are read from the line breaks a window at a time: a list of every
    line's length, the lines themselves and a float64 array of them took 12-24 bytes a rune at HEAD."""
    text = line * (RUNES // len(line))
    peak, n = peak_bytes(lambda: len(split(text, ChunkingConfig(strategy="auto"))))
    assert n > RUNES // 600
    assert peak < 4 * len(text), f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"


def test_line_statistics_are_numpys_mean_and_std_to_the_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The streamed sums are numpy's pairwise sums of one array, whatever the windows and parts."""
    rng = np.random.default_rng(5)
    for n_lines in (1, 7, 129, 5000, 70_001):
        lens = rng.integers(0, 300 if n_lines < 10_000 else 30, n_lines)
        text = "\n".join("x" * int(k) for k in lens)
        fence_free = np.asarray(lens, dtype=np.float64)
        expected = (float(fence_free.mean()), float(fence_free.std()))
        for window, leaf in ((profile_module.STATS_WINDOW, profile_module._SUM_LEAF), (5, 128), (997, 200)):
            if window == 5 and n_lines > 10_000:
                continue
            monkeypatch.setattr(profile_module, "STATS_WINDOW", window)
            monkeypatch.setattr(profile_module, "_SUM_LEAF", leaf)
            stats = Lines(text).line_stats()
            assert (stats.lines, stats.avg_len, stats.std_len) == (n_lines, *expected)
    for n in (0, 1, 8, 129, 4097, 70_001, 300_007):
        values = rng.random(n) * 1000
        for leaf in (128, 1000, 1 << 16):
            monkeypatch.setattr(profile_module, "_SUM_LEAF", leaf)
            at = 0

            def take(k: int, values: np.ndarray[Any, Any] = values) -> np.ndarray[Any, Any]:
                nonlocal at
                at += k
                return values[at - k : at]

            assert profile_module._numpy_sum(n, take) == float(np.add.reduce(values))


# Small windows: every unit scan step ends a window, so each refill, shift and drop is crossed often.
_TEXTS = [
    "a\n" * 3000,
    "a\n\n" * 2000 + "b" * 9000 + "\n" + "c " * 5000,
    "中文句子。\n" * 2000 + "😀" * 8000,
    ("x" * 7499 + "\n") * 3 + ("y" * 7501 + "\n") * 3,
    "|a|b|\n|---|---|\n" + "|1|2|\n" * 3000 + "\ntext\n\n" + ("|h|\n|---|\n" + "|r|\n" * 400 + "\n\n") * 5,
    ("# T\n\nPara `code`(x), [l](u)s and $$m$$.\n\n```\nprint(1)\n\n\n```\n\n## S\n\n" + "- item\n" * 40)
    * 30,
]
_CONFIGS = [
    ChunkingConfig(),
    ChunkingConfig(chunk_size=7, chunk_overlap=3),
    ChunkingConfig(chunk_size=50, chunk_overlap=49),
    ChunkingConfig(chunk_size=4000, chunk_overlap=100),
    ChunkingConfig(chunk_size=30, chunk_overlap=10, separators=[" ", "\n"]),
    ChunkingConfig(chunk_size=60, chunk_overlap=10, strategy="heading"),
    ChunkingConfig(chunk_size=100, chunk_overlap=20, strategy="auto"),
]


def _chunks(text: str, config: ChunkingConfig) -> list[tuple[object, ...]]:
    return [(c.content, c.start, c.end, c.context_header, c.header_prefix_len) for c in split(text, config)]


@pytest.mark.parametrize("text", _TEXTS, ids=range(len(_TEXTS)))
def test_a_window_of_units_gives_the_chunks_of_all_units(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(units_module, "LAZY_MIN_RUNES", len(text) + 1)
    whole = [_chunks(text, c) for c in _CONFIGS]
    monkeypatch.setattr(units_module, "LAZY_MIN_RUNES", 0)
    monkeypatch.setattr(units_module, "LOOKAHEAD_RUNES", 0)
    monkeypatch.setattr(units_module, "BATCH", 2)
    monkeypatch.setattr(spans_module, "ROW_BATCH", 2, raising=False)  # (not at HEAD)
    assert [_chunks(text, c) for c in _CONFIGS] == whole


_FENCED_TEXTS = {
    "a fence at the end": ("a\n" * (RUNES // 8) + "```\nx\n```\n", 1),
    "an unclosed fence at the start": ("```\n" + "a\n" * (RUNES // 8), 1),
    "one long code block": ("```py\n" + "a\n" * (RUNES // 8) + "```\n", 1),
    "a fence every 1,000 runes": (
        ("a\n" * 500 + "\n```\nx\n```\n\n") * (RUNES // 4 // 1014),
        RUNES // 4 // 1014,
    ),
}


@pytest.mark.parametrize(("text", "fences"), _FENCED_TEXTS.values(), ids=_FENCED_TEXTS.keys())
def test_fenced_blocks_are_found_in_a_windows_memory(text: str, fences: int) -> None:
    """The CommonMark block parser keeps five lists per line of what it parses, and a fence line near the end
    of a text made it parse all of it: 20 MB traced here (250 K runes of short lines), ~80 bytes a rune, so
    a 50 M-character Markdown, which the docreader accepts, died in the 1,024 MB chunking Lambda. It now
    parses a window at a time, from one safe restart line to the next, and follows a top-level code block
    to its closing line itself: about 1.5 MB, whatever the text's length."""
    peak, n = peak_bytes(lambda: len(fenced_blocks(text)))
    assert n == fences
    assert peak < 3_000_000, f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.2f} M runes"


def test_a_big_text_with_a_fence_at_its_end_is_chunked_in_memory_proportional_to_the_text() -> None:
    text = "```\n" + "a\n" * (RUNES // 2) + "```\n\n```\n" + "a\n" * 8
    peak, n = peak_bytes(lambda: len(split(text, ChunkingConfig())))
    assert n > RUNES // 7500
    assert peak < 4 * len(text), f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"
