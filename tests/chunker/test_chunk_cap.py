"""The chunker's `max_chunks`: a split stops one chunk past it (TooManyChunks) instead of being built whole,
in every strategy, in token mode and with parent-child; below it nothing changes. The separators are not
searched to the end either: a 1-rune chunk_size stops after about twice the limit's units."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

import chalicelib.chunker as chunker
from chalicelib.chunker import units
from chalicelib.domain.chunk_limits import TooManyChunks
from chalicelib.domain.types import ChunkingConfig

PROSE = "".join(
    f"The keeper logs the weather at dawn, entry {i}. He trims the wick at noon!\nThe fog horn sounds twice.\n\n"
    for i in range(30)
)
TINY_SECTIONS = "# Manual\n\n" + "".join(f"## Step {i}\nTurn it.\n\n" for i in range(60))
TINY_TABLES = "# Stock\n\n## Items\n\n" + "".join(
    f"| name | qty |\n|---|---|\n| bolt{i} | {i} |\n\nSee above.\n\n" for i in range(40)
)
BIG_TABLE = "## Orders\n\n| id | item | qty |\n|---|---|---|\n" + "".join(
    f"| {i} | nut | {i % 7} |\n" for i in range(300)
)
CODE_AND_LINKS = "".join(
    f"Run `make test{i}` then see [the guide](http://x.test/{i}).\n\n```\nline {i}\n\nmore\n```\n\n"
    for i in range(25)
)
MARKERS = "".join(f"Chapter {i}\n\nSome text of chapter {i} goes here.\n\f" for i in range(20))
NO_SEPARATORS = "x" * 20_000 + "\n\n" + "港口的起重机每天早上装卸集装箱。" * 200
DOCS = {
    "prose": PROSE,
    "tiny_sections": TINY_SECTIONS,
    "tiny_tables": TINY_TABLES,
    "big_table": BIG_TABLE,
    "code_and_links": CODE_AND_LINKS,
    "markers": MARKERS,
    "no_separators": NO_SEPARATORS,
}
STRATEGIES = ("recursive", "heading", "heuristic", "auto")


def _words(text: str) -> int:
    return len(text.split())


def _count(markdown: str, config: ChunkingConfig, **kw: Any) -> tuple[int, Any]:
    if config.enable_parent_child:
        r = chunker.split_parent_child(markdown, config, **kw)
        return len(r.parents) + len(r.children), r
    pieces = chunker.split(markdown, config, **kw)
    return len(pieces), pieces


@pytest.mark.parametrize("name", sorted(DOCS))
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_cap_at_the_count_changes_nothing_and_one_below_refuses(name: str, strategy: str) -> None:
    text = DOCS[name]
    cases = itertools.product((1, 7, 64, 512), (0, 3), (False, True), (None, _words))
    for size, overlap, parent_child, length_function in cases:
        config = ChunkingConfig(
            chunk_size=size,
            chunk_overlap=min(overlap, size // 2),
            strategy=strategy,
            enable_parent_child=parent_child,
            parent_chunk_size=max(4 * size, 64),
            child_chunk_size=max(size, 16),
        )
        kw: dict[str, Any] = {"length_function": length_function}
        n, whole = _count(text, config, **kw)
        assert n > 0
        same = _count(text, config, max_chunks=n, **kw)
        assert same == (n, whole), (size, overlap, parent_child)
        try:
            fewer, _ = _count(text, config, max_chunks=n - 1, **kw)
        except TooManyChunks:
            continue
        # a tier past the cap is rejected like one the validator rejects: a later tier may fit
        assert strategy != "recursive" and fewer <= n - 1, (size, overlap, parent_child)


class _CountingPattern:
    def __init__(self, pattern: Any, seen: list[int]) -> None:
        self.pattern, self.seen = pattern, seen

    def finditer(self, text: str, a: int, b: int) -> Iterator[Any]:
        for match in self.pattern.finditer(text, a, b):
            self.seen[0] += 1
            yield match


class _CountingPiece(chunker.ChunkPiece):
    __slots__ = ()
    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).made += 1
        super().__init__(*args, **kwargs)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """How many separator matches the splits take, and how many chunk pieces they make."""
    seen = [0]
    real = units._sep_re
    monkeypatch.setattr(units, "_sep_re", lambda sep: _CountingPattern(real(sep), seen))
    _CountingPiece.made = 0
    monkeypatch.setattr(chunker, "ChunkPiece", _CountingPiece)
    yield {"matches": seen}


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("parent_child", [False, True])
def test_a_one_rune_chunk_size_stops_at_the_cap_without_cutting_the_rest(
    strategy: str, parent_child: bool, spies: dict[str, Any]
) -> None:
    text = "a\n\n" * 50_000  # 100,000 chunks at chunk_size 1
    config = ChunkingConfig(
        chunk_size=1,
        chunk_overlap=0,
        strategy=strategy,
        enable_parent_child=parent_child,
        parent_chunk_size=64,
        child_chunk_size=16,
    )
    split = chunker.split_parent_child if parent_child else chunker.split
    with pytest.raises(TooManyChunks):
        split(text, config, max_chunks=100)
    assert _CountingPiece.made == 0
    # A chunk touches at most its size + 1 units, so past (size + 1) x 100 units the split is refused: 2 x 100
    # at chunk_size 1; with parent-child the parents' 64 runes come first (the text makes 2,344 of them).
    # A heading or heuristic tier and then its recursive fallback each stop there.
    per_chunk = 64 + 1 if parent_child else 1 + 1
    tiers = 2 if strategy in ("heading", "heuristic") else 1
    assert spies["matches"][0] <= tiers * (per_chunk * 100 + 1)


def test_the_preview_counts_the_chunks_it_does_not_show_and_stops_at_the_cap(spies: dict[str, Any]) -> None:
    config = ChunkingConfig(chunk_size=1, chunk_overlap=0)
    answer = chunker.preview("a\n" * 300, config, 5, max_chunks=600)
    assert answer["total_chunks"] == 600 and len(answer["chunks"]) == 5
    assert _CountingPiece.made == 5  # the text of the chunks not shown is never cut out
    with pytest.raises(TooManyChunks):
        chunker.preview("a\n" * 50_000, config, 5, max_chunks=600)
