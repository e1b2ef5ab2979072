"""The recursive tier's units (WeKnora `splitBySeparators` and its protected units): the offsets where a
chunk may end, found once for a range. Each separator match ends a unit (and so does the separator itself),
so a text of many short lines has many units: their number is held to what the chunks allowed can touch
(`unit_cap`), so a refused split stops early here too."""

from __future__ import annotations

import re
from itertools import islice

from chalicelib.chunker.config import HARD_CAP
from chalicelib.chunker.lengths import CharMeasure, TokenMeasure
from chalicelib.chunker.spans import Spans
from chalicelib.domain.chunk_limits import NO_LIMIT, TooManyChunks

_SEP_CACHE: dict[str, re.Pattern[str]] = {}


def _sep_re(sep: str) -> re.Pattern[str]:
    pat = _SEP_CACHE.get(sep)
    if pat is None:
        pat = _SEP_CACHE[sep] = re.compile(re.escape(sep))
    return pat


def force_split(text: str, a: int, b: int, out: list[int]) -> None:
    """Cut [a, b) into pieces of at most HARD_CAP runes, preferring to end after a newline or space."""
    off = a
    while off < b:
        end = off + HARD_CAP
        if end >= b:
            end = b
        else:
            lo = max(off + 1, end - 199)
            cut = max(text.rfind("\n", lo, end), text.rfind(" ", lo, end))
            if cut >= 0:
                end = cut + 1
        out.append(end)
        off = end


def _split_gap(
    text: str,
    a: int,
    b: int,
    seps: tuple[str, ...],
    si: int,
    size: int,
    m: CharMeasure | TokenMeasure,
    bounds: list[int],
    big: list[int],
    max_units: int,
) -> None:
    """WeKnora splitBySeparators on [a, b): separators by priority, lower ones only on oversize pieces.
    A piece over the rune hard cap is oversize even when its tokens fit (token mode). Past `max_units`
    units in all it raises TooManyChunks (see `unit_cap`) before finding the rest."""
    if b - a <= HARD_CAP and m.fits(a, b, size):
        bounds.append(b)
        return
    nseps = len(seps)
    for idx in range(si, nseps):
        cuts: list[int] = []
        last = a
        room = max(0, max_units - len(bounds))
        for mt in islice(_sep_re(seps[idx]).finditer(text, a, b), room + 1):
            s, e = mt.span()
            if s > last:
                cuts.append(s)
            cuts.append(e)
            last = e
        if len(cuts) > room:  # every cut ends a unit (or more, split deeper)
            raise TooManyChunks(f"more than {max_units} units")
        if not cuts:
            continue
        if last < b:
            cuts.append(b)
        if len(cuts) <= 1:
            continue
        deeper = idx + 1 < nseps
        x = a
        for y in cuts:
            if deeper and (y - x > HARD_CAP or not m.fits(x, y, size)):
                _split_gap(text, x, y, seps, idx + 1, size, m, bounds, big, max_units)
            else:
                if y - x > HARD_CAP:
                    big.append(len(bounds))
                bounds.append(y)
            x = y
        return
    if b - a > HARD_CAP:
        big.append(len(bounds))
    bounds.append(b)


#: How far an inline span's unit reaches for the rest of its word (`(`, `),`, a plural's `s`).
_ADJOINING_WORD = 32


def _with_adjoining_word(text: str, s: int, e: int, lo: int, hi: int, b: int) -> tuple[int, int]:
    """The inline span [s, e) (code, link, image, math) with the word it is part of: the runes between it
    and the whitespace on either side, within [lo, min(hi, b)) and `_ADJOINING_WORD` runes. Otherwise a
    chunk can end at `(` before a code span, or the next one start with the `,` after it. Line-based spans
    (table rows, fences) start or end at line breaks: they are left as they are."""
    if text[e - 1].isspace() or text[s].isspace():
        return s, e
    end = min(hi, b, e + _ADJOINING_WORD)
    while e < end and not text[e].isspace():
        e += 1
    start = max(lo, s - _ADJOINING_WORD)
    while s > start and not text[s - 1].isspace():
        s -= 1
    return s, e


def unit_cap(max_chunks: int, size: int, token_mode: bool) -> int:
    """The most units a split into at most `max_chunks` chunks can have. A chunk of two units or more holds
    at most `size` runes (char mode) and HARD_CAP runes (both modes), a unit one rune at least, and the
    chunks cover the range: so each chunk touches at most that many units plus the one it starts inside."""
    per_chunk = (HARD_CAP if token_mode else min(size, HARD_CAP)) + 1
    return min(NO_LIMIT - 1, max_chunks * per_chunk)


def build_units(
    text: str,
    a: int,
    b: int,
    spans: Spans,
    seps: tuple[str, ...],
    size: int,
    m: CharMeasure | TokenMeasure,
    max_units: int = NO_LIMIT - 1,
) -> tuple[list[int], list[int], set[int]]:
    """Unit end offsets tiling [a, b), indices of units over HARD_CAP, indices of table-header units.
    Past `max_units` it raises TooManyChunks, having found about that many."""
    bounds: list[int] = []
    big: list[int] = []
    headers: set[int] = set()
    pos = a
    starts, ends, header_starts = spans.starts, spans.ends, spans.headers
    t, j, steps = spans.within(a, b, HARD_CAP)
    steps.append(j)
    for x in steps:
        if x > t:  # spans t..x-1 touch the span before them and are plain: one unit each
            bounds += ends[t:x]
            pos = ends[x - 1]
            if len(bounds) > max_units:
                raise TooManyChunks(f"more than {max_units} units")
        if x == j:
            break
        s, e = starts[x], ends[x]
        if e - s <= HARD_CAP:
            s, e = _with_adjoining_word(text, s, e, pos, starts[x + 1] if x + 1 < len(starts) else b, b)
        if s > pos:
            _split_gap(text, pos, s, seps, 0, size, m, bounds, big, max_units)
        if e - s > HARD_CAP:
            force_split(text, s, e, bounds)
        else:
            if s in header_starts:
                headers.add(len(bounds))
            bounds.append(e)
        pos = e
        t = x + 1
    if pos < b:
        _split_gap(text, pos, b, seps, 0, size, m, bounds, big, max_units)
    if len(bounds) > max_units:
        raise TooManyChunks(f"more than {max_units} units")
    return bounds, big, headers
