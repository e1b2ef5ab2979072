"""Heading and heuristic tiers, the validator and the strategy chain (WeKnora heading_splitter.go,
heuristic_splitter.go, validator, strategy.go). All tiers work on a range [a, b) of one text."""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any

from chalicelib.chunker.blocks import Fence
from chalicelib.chunker.config import HARD_CAP, Resolved
from chalicelib.chunker.lengths import CharMeasure, TokenMeasure
from chalicelib.chunker.profile import (
    DocProfile,
    Lines,
    profile_document,
    select_chain,
)
from chalicelib.chunker.recursive import Raw, overlap_start, split_into, split_range
from chalicelib.chunker.spans import Spans
from chalicelib.domain.chunk_limits import NO_LIMIT, TooManyChunks

Chunk4 = tuple[int, int, str, str]  # (start, end, synthetic header prefix, context header)
M = CharMeasure | TokenMeasure


@dataclass
class Ctx:
    text: str
    spans: Spans
    cfg: Resolved
    m: M
    # A synthetic table header that text[lead_at:] continues (a parent's, for the split of its children).
    lead_at: int = -1
    lead_header: str = ""

    def header_at(self, pos: int) -> str:
        """The table header a chunk starting at `pos` begins with, as synthetic text."""
        return self.lead_header if pos == self.lead_at else ""

    def lines(self, a: int, b: int) -> Lines:
        """Line scan of [a, b), reusing the fenced blocks found once for the whole text."""
        fences = [
            Fence(max(f.start, a) - a, min(f.end, b) - a, max(f.last_line, a) - a, f.closed and f.end <= b)
            for f in self.spans.fences
            if f.start < b and f.end > a
        ]
        return Lines(self.text[a:b], fences)


def recursive_tier(c: Ctx, a: int, b: int, max_chunks: int = NO_LIMIT) -> list[Chunk4]:
    cfg = c.cfg
    raws = split_range(
        c.text,
        a,
        b,
        c.spans,
        cfg.separators,
        cfg.size,
        cfg.overlap,
        c.m,
        c.header_at(a),
        max_chunks=max_chunks,
    )
    return [(s, e, h, "") for s, e, h in raws]


# ---------------------------------------------------------------- heading tier


_BLANK = [""] * 6
_MARKS = tuple("#" * (i + 1) + " " for i in range(6))


class Hierarchy:
    __slots__ = ("depth", "stack")

    def __init__(self) -> None:
        self.stack = [""] * 6
        self.depth = 0

    def copy(self) -> Hierarchy:
        h = Hierarchy()
        h.stack = list(self.stack)
        h.depth = self.depth
        return h

    def observe(self, level: int, title: str) -> None:
        st = self.stack
        st[level - 1] = title
        st[level:] = _BLANK[level:]
        if level > self.depth:
            self.depth = level
        else:  # the deepest non-empty level (all below `level` were just cleared)
            d = level
            while d and not st[d - 1]:
                d -= 1
            self.depth = d

    def breadcrumb(self) -> str:
        st = self.stack
        return "\n".join([_MARKS[i] + st[i] for i in range(self.depth) if st[i]])


def _common_heading_prefix(x: str, y: str) -> str:
    if x == y:
        return x
    # One crumb extending the other by whole lines (the usual case): the shorter one, without splitting.
    if y.startswith(x) and y[len(x)] == "\n":
        return x
    if x.startswith(y) and x[len(y)] == "\n":
        return y
    lx, ly = x.split("\n"), y.split("\n")
    n = 0
    for p, q in zip(lx, ly, strict=False):
        if p != q:
            break
        n += 1
    return "\n".join(lx[:n]) if n else ""


class _Coalesced:
    """The heading tier's chunks, small neighbours under one heading path joined as they come (a chunk under
    half the size, at least 200, takes the next while the two fit the size), so their number is known while
    they are made: past `max_chunks` it raises TooManyChunks. Also the sink of a section's split
    (`append`), whose chunks take the breadcrumb of the deeper heading above them (`section`)."""

    __slots__ = ("_crumbs", "_len", "_m", "_max", "_open", "_pos", "_size", "_target", "out")

    def __init__(self, c: Ctx, max_chunks: int) -> None:
        self._m = c.m
        self._size = c.cfg.size
        self._target = max(self._size // 2, 200)
        self._max = max_chunks
        self.out: list[Chunk4] = []
        self._open: Chunk4 | None = None  # the chunk still taking neighbours
        self._len = 0  # its length
        self._pos: list[int] = []
        self._crumbs: list[str] = []

    def __len__(self) -> int:
        return len(self.out) + (self._open is not None)

    def section(self, subs: list[tuple[int, str]]) -> None:
        """The (offset, breadcrumb) of the deeper headings of the section whose split comes next."""
        self._pos = [x[0] for x in subs]
        self._crumbs = [x[1] for x in subs]

    def append(self, raw: Raw, /) -> None:
        s, e, h = raw
        self.add((s, e, h, self._crumbs[bisect_right(self._pos, s) - 1]))

    def add(self, chunk: Chunk4) -> None:
        m = self._m
        ns, ne, nh, nctx = chunk
        n_len = m.length(ns, ne) + m.text_len(nh)
        if self._open is not None:
            s, e, h, ctx = self._open
            shared = _common_heading_prefix(ctx, nctx)
            # A synthetic table header inside merged content would break content == source[start:end].
            if (
                shared
                and e == ns
                and not nh
                and self._len < self._target
                and self._len + n_len <= self._size
                and ne - s <= HARD_CAP
            ):
                self._open = (s, ne, h, shared)
                self._len += n_len
                return
            self.out.append(self._open)
        self._open, self._len = chunk, n_len
        if len(self) > self._max:
            raise TooManyChunks(f"more than {self._max} chunks")

    def chunks(self) -> list[Chunk4]:
        return [*self.out, self._open] if self._open is not None else self.out


def heading_tier(
    c: Ctx, a: int, b: int, profile: DocProfile | None, lines: Lines | None = None, max_chunks: int = NO_LIMIT
) -> list[Chunk4]:
    text = c.text
    if lines is None:
        lines = c.lines(a, b)
    if profile is None:
        # Only the heading counts matter here: not the whole profile.
        profile = DocProfile()
        for _, level, _ in lines.headings():
            profile.md_heading_counts[level] = profile.md_heading_counts.get(level, 0) + 1
            profile.md_heading_total += 1
    primary = profile.dominant_heading_level()
    if primary == 0:
        return recursive_tier(c, a, b, max_chunks)
    heads = [(a + pos, level, title.strip()) for pos, level, title in lines.headings()]
    strictly = c.spans.strictly_inside
    bounds: list[tuple[int, int]] = [(a, -1)]  # (start, index into heads of the leading heading or -1)
    for i, (pos, level, _) in enumerate(heads):
        if level > primary or strictly(pos):
            continue
        if pos == a:
            bounds[0] = (a, i)
        else:
            bounds.append((pos, i))
    if len(bounds) <= 1:
        return recursive_tier(c, a, b, max_chunks)
    head_pos = [h[0] for h in heads]
    m = c.m
    size = c.cfg.size
    hier = Hierarchy()
    out = _Coalesced(c, max_chunks)
    for bi, (start, hi) in enumerate(bounds):
        end = bounds[bi + 1][0] if bi + 1 < len(bounds) else b
        if hi >= 0:
            hier.observe(heads[hi][1], heads[hi][2])
        crumb = hier.breadcrumb()
        # Deeper headings inside the section: (offset, breadcrumb from there on).
        subs: list[tuple[int, str]] = [(start, crumb)]
        j0 = bisect_right(head_pos, start - 1)
        j1 = bisect_right(head_pos, end - 1)
        for j in range(j0, j1):
            pos, level, title = heads[j]
            if level > primary:
                hier.observe(level, title)
                subs.append((pos, hier.breadcrumb()))
        if end <= start:
            continue
        lead = c.header_at(start)
        lead_len = m.text_len(lead) if lead else 0
        if (
            end - start + len(lead) <= HARD_CAP
            and m.text_len(crumb) + 2 + lead_len + m.length(start, end) <= size
        ):
            out.add((start, end, lead, crumb))
            continue
        out.section(subs)
        seps, overlap = c.cfg.separators, c.cfg.overlap
        split_into(out, text, start, end, c.spans, seps, size, overlap, m, lead, max_chunks=max_chunks)
    return out.chunks()


# ---------------------------------------------------------------- heuristic tier


def _heuristic_bounds(c: Ctx, a: int, b: int, lines: Lines) -> list[int]:
    """Sorted boundary offsets: form feeds, marker lines, ends of blank runs, none strictly inside a span.
    (WeKnora ranks them by priority, profile.PRIO_*; only the positions decide the chunks.)"""
    sub = lines.text
    found: set[int] = set()
    i = sub.find("\f")
    while i >= 0:
        found.add(a + i)
        i = sub.find("\f", i + 1)
    found.update([a + pos for pos, _ in lines.markers()])
    found.update([a + end for end in lines.blank_ends()])
    bounds = sorted(found)
    starts, ends = c.spans.starts, c.spans.ends
    if not starts:
        return bounds
    # One merge walk instead of a bisect per position: drop p when the last span starting before p
    # ends after it (Spans.strictly_inside).
    out = []
    j, n = 0, len(starts)
    for p in bounds:
        while j < n and starts[j] < p:
            j += 1
        if j and p < ends[j - 1]:
            continue
        out.append(p)
    return out


def heuristic_tier(
    c: Ctx, a: int, b: int, lines: Lines | None = None, max_chunks: int = NO_LIMIT
) -> list[Chunk4]:
    m = c.m
    size = c.cfg.size
    text = c.text
    if m.length(a, b) <= size:
        return recursive_tier(c, a, b, max_chunks)
    bounds = _heuristic_bounds(c, a, b, lines or c.lines(a, b))
    if not bounds:
        return recursive_tier(c, a, b, max_chunks)
    if bounds[-1] != b:
        bounds.append(b)
    if bounds[0] != a:
        bounds.insert(0, a)
    out: list[Chunk4] = []
    min_chunk = max(size // 4, 50)

    def emit(s: int, e: int) -> None:
        if e > s and text[s:e].strip():
            out.append((s, e, c.header_at(s), ""))
            if len(out) > max_chunks:
                raise TooManyChunks(f"more than {max_chunks} chunks")

    # Oversized stretches go to the recursive tier after the loop: (index in out, range).
    deferred: list[tuple[int, int, int]] = []
    chunk_start = cur_end = bounds[0]
    for nxt in bounds[1:]:
        if m.length(cur_end, nxt) > size or nxt - cur_end > HARD_CAP:
            if cur_end > chunk_start:
                emit(chunk_start, cur_end)
            deferred.append((len(out), cur_end, nxt))
            chunk_start = cur_end = nxt
            continue
        acc = m.length(chunk_start, nxt)
        over_hard = nxt - chunk_start > HARD_CAP
        if (acc > size and m.length(chunk_start, cur_end) >= min_chunk) or (
            over_hard and cur_end > chunk_start
        ):
            emit(chunk_start, cur_end)
            chunk_start = _heuristic_overlap(c, bounds, chunk_start, cur_end)
            if nxt - chunk_start > HARD_CAP:
                chunk_start = cur_end
        cur_end = nxt
    if cur_end > chunk_start:
        emit(chunk_start, cur_end)
    if not deferred:
        return out
    subs = []
    room = max_chunks - len(out)  # what the oversized stretches may still add
    for _, s, e in deferred:
        subs.append(recursive_tier(c, s, e, room))
        room -= len(subs[-1])
    merged: list[Chunk4] = []
    prev = 0
    for (at, _, _), sub in zip(deferred, subs, strict=True):
        merged.extend(out[prev:at])
        merged.extend(sub)
        prev = at
    merged.extend(out[prev:])
    return merged


def _heuristic_overlap(c: Ctx, bounds: list[int], start: int, cur_end: int) -> int:
    """Next chunk start: the latest heuristic boundary inside the overlap window, else a semantic break.
    WeKnora searches 2x overlap and falls back to a raw offset; both could exceed the setting or cut a
    protected span, so the window here is the overlap itself."""
    overlap = c.cfg.overlap
    if overlap <= 0:
        return cur_end
    w = c.m.window_start(start, cur_end, overlap)
    i = bisect_right(bounds, cur_end - 1) - 1
    if i >= 0 and w <= bounds[i] < cur_end and bounds[i] > start:
        return bounds[i]
    return overlap_start(c.text, c.spans, c.m, start, cur_end, overlap)


# ---------------------------------------------------------------- validator and chain


def validate(c: Ctx, chunks: list[Chunk4], total: int) -> str:
    """'' when acceptable, else WeKnora's rejection reason."""
    size = c.cfg.size
    if not chunks:
        return "no chunks produced"
    if len(chunks) == 1 and total > 2 * size:
        return "single chunk for large document"
    m = c.m
    if type(m) is CharMeasure:  # the same figures without a call per chunk
        lens = [e - s + len(h) for s, e, h, _ in chunks]
    else:
        lens = [m.length(s, e) + (m.text_len(h) if h else 0) for s, e, h, _ in chunks]
    longest = max(lens)
    tiny = sum(1 for x in lens[:-1] if x < 50)
    if tiny > len(chunks) // 4 and tiny > 2:
        return "too many tiny chunks"
    if longest < size // 4 and total > size:
        return "all chunks far below target size"
    if size > 0 and longest > 2 * size:
        return "chunk exceeds 2x target size"
    return ""


@dataclass
class Diagnostics:
    selected_tier: str = "recursive"
    tier_chain: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    profile: dict[str, Any] | None = None


def run_strategy(c: Ctx, a: int, b: int, max_chunks: int = NO_LIMIT) -> tuple[list[Chunk4], Diagnostics]:
    """The chunks of [a, b) by the configured strategy's chain of tiers. A tier that would make more than
    `max_chunks` is rejected as the validator rejects one (it stopped early: nothing else is known of it); the
    last one raises TooManyChunks."""
    diag = Diagnostics()
    if a >= b:
        return [], diag
    strategy = c.cfg.strategy
    profile: DocProfile | None = None
    lines: Lines | None = None
    if strategy == "heading":
        chain = ["heading", "recursive"]
    elif strategy == "heuristic":
        chain = ["heuristic", "recursive"]
    elif strategy == "recursive":
        chain = ["recursive"]
    else:
        lines = c.lines(a, b)
        profile = profile_document(lines.text, lines)
        chain = select_chain(profile)
        diag.profile = profile.as_dict()
    diag.tier_chain = chain
    if chain == ["recursive"]:
        return recursive_tier(c, a, b, max_chunks), diag
    total = c.m.length(a, b)
    out: list[Chunk4] = []
    for tier in chain:
        try:
            if tier == "heading":
                out = heading_tier(c, a, b, profile, lines, max_chunks)
            elif tier == "heuristic":
                out = heuristic_tier(c, a, b, lines, max_chunks)
            else:
                out = recursive_tier(c, a, b, max_chunks)
        except TooManyChunks:
            if tier == chain[-1]:
                raise
            diag.rejected.append({"tier": tier, "reason": f"more than {max_chunks} chunks"})
            continue
        reason = validate(c, out, total)
        if not reason:
            diag.selected_tier = tier
            return out, diag
        diag.rejected.append({"tier": tier, "reason": reason})
    diag.selected_tier = "recursive"  # the last tier's output is kept even when rejected
    return out, diag
