"""Shared checks for the chunker tests."""

from __future__ import annotations

import re
import tracemalloc
from collections.abc import Callable

import pytest
from project_paths import CORPUS, corpus_missing

from chalicelib.chunker import HARD_CAP, ChunkPiece
from chalicelib.chunker.spans import (
    IMAGE,
    INLINE_CODE,
    LINK,
    MATH,
    TABLE_HEADER_GO,
    TABLE_ROW_GO,
    Spans,
)

# WeKnora's pattern list exactly as written upstream (table patterns in their original `[ ]*` form), used
# as an independent reference for the optimised scanner. Fenced code is CommonMark's (below), not a regex.
REFERENCE_PATTERNS = [
    MATH,
    IMAGE,
    LINK,
    re.compile(TABLE_HEADER_GO),
    re.compile(TABLE_ROW_GO),
    INLINE_CODE,
]


def commonmark_fences(text: str, closed_only: bool = False) -> list[tuple[int, int]]:
    """Fenced code blocks straight from markdown-it-py's full CommonMark parse: from the start of the opening
    fence line to the end of the block's last line (newline excluded). Its input normalisation (CR to LF)
    is off, as in the chunker, whose texts are already normalised: offsets stay those of `text`.
    `closed_only`: the blocks the chunker protects, those whose last line is a closing fence (its lines are
    the content's plus the two fence lines)."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    md.core.ruler.disable("normalize")

    starts = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            starts.append(i + 1)
    out = []
    for t in md.parse(text):
        if t.type == "fence" and t.map:
            first, stop = t.map
            content_lines = t.content.count("\n") + (1 if t.content and not t.content.endswith("\n") else 0)
            if closed_only and stop - first != content_lines + 2:
                continue
            last = min(stop, len(starts)) - 1
            end = starts[last + 1] - 1 if last + 1 < len(starts) else len(text)
            out.append((starts[first], end))
    return out


def reference_spans(text: str) -> list[tuple[int, int]]:
    fences = commonmark_fences(text, closed_only=True)
    gaps, pos = [], 0
    for s, e in fences:
        gaps.append((pos, s))
        pos = e
    gaps.append((pos, len(text)))
    found = list(fences)
    for pat in REFERENCE_PATTERNS:
        for a, b in gaps:
            found.extend((m.start(), m.end()) for m in pat.finditer(text, a, b) if m.end() > m.start())
    found.sort(key=lambda x: (x[0], -(x[1] - x[0])))
    out: list[tuple[int, int]] = []
    last = 0
    for s, e in found:
        if s >= last:
            out.append((s, e))
            last = e
    return out


def cuts_span(pos: int, spans: list[tuple[int, int]]) -> tuple[int, int] | None:
    for s, e in spans:
        if s < pos < e and e - s <= HARD_CAP:
            return (s, e)
    return None


def check_chunks(md: str, chunks: list[ChunkPiece], overlap: int | None = None, cover: bool = True) -> None:
    """Invariants every chunk list must satisfy."""
    spans = reference_spans(md)
    covered = bytearray(len(md))
    for i, c in enumerate(chunks):
        assert c.seq == i
        assert 0 <= c.start < c.end <= len(md), c
        assert c.content[c.header_prefix_len :] == md[c.start : c.end], "offsets must restore the content"
        assert len(c.content) <= HARD_CAP, "hard cap"
        assert cuts_span(c.start, spans) is None, f"chunk {i} starts inside protected span"
        assert cuts_span(c.end, spans) is None, f"chunk {i} ends inside protected span"
        covered[c.start : c.end] = b"\x01" * (c.end - c.start)
    for i in range(1, len(chunks)):
        prev, cur = chunks[i - 1], chunks[i]
        if overlap is not None and cur.start < prev.end:
            assert prev.end - cur.start <= overlap, "overlap larger than the setting"
    if not cover:
        return
    missing = [i for i, ch in enumerate(md) if not covered[i] and not ch.isspace()]
    assert not missing, f"text not covered by any chunk at {missing[:5]}"


def spans_of(s: Spans) -> list[tuple[int, int]]:
    return list(zip(s.starts, s.ends, strict=True))


def corpus_texts() -> list[tuple[str, str]]:
    """The corpus's text files, normalised; called at import, so a missing corpus skips the whole module."""
    from chalicelib.chunker import normalise_markdown

    if not CORPUS.is_dir():
        pytest.skip(corpus_missing(), allow_module_level=True)
    out = []
    for p in sorted(CORPUS.iterdir()):
        if p.name.endswith(".truth.txt") or not p.name.endswith((".md", ".markdown", ".txt")):
            continue
        out.append((p.name, normalise_markdown(p.read_text(encoding="utf-8", errors="replace"))))
    return out


def offline_cl100k() -> object:
    """tiktoken's cl100k_base from the BPE file llama-index-core ships (nothing downloaded, as in
    peer-bench); skips the calling test when tiktoken or that file is not installed."""
    import importlib.util
    import os

    import pytest

    tiktoken = pytest.importorskip("tiktoken")
    spec = importlib.util.find_spec("llama_index.core")
    if spec and spec.origin and not os.environ.get("TIKTOKEN_CACHE_DIR"):
        os.environ["TIKTOKEN_CACHE_DIR"] = os.path.join(
            os.path.dirname(spec.origin), "_static", "tiktoken_cache"
        )
    try:
        return tiktoken.get_encoding("cl100k_base")
    except Exception:
        pytest.skip("cl100k_base BPE file not available offline")


def peak_bytes(chunk: Callable[[], int]) -> tuple[int, int]:
    """Peak bytes traced while `chunk` runs, and what it returns."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        n = chunk()
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return peak, n


def repeated(line: Callable[[int], str], runes: int) -> str:
    """`line(0)`, `line(1)`, ... joined until they hold at least `runes` characters."""
    parts: list[str] = []
    size = 0
    while size < runes:
        parts.append(line(len(parts)))
        size += len(parts[-1])
    return "".join(parts)
