"""The recursive tier's units (WeKnora `splitBySeparators` and its protected units): the offsets where a
chunk may end. Each separator match ends a unit (and so does the separator itself), so a text of many short
lines has many units. `UnitWindow` makes them as the merge reaches them and forgets those behind the chunk
in progress, so memory follows the chunks, not the separators (a 50 M-rune text of short lines has tens of
millions of units). Their number is still held to what the chunks allowed can touch (`unit_cap`), so a
refused split stops early here too."""

from __future__ import annotations

import re
import sys
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import islice

from chalicelib.chunker.config import HARD_CAP
from chalicelib.chunker.lengths import CharMeasure, TokenMeasure
from chalicelib.chunker.spans import Spans
from chalicelib.domain.chunk_limits import NO_LIMIT, TooManyChunks

_SEP_CACHE: dict[str, re.Pattern[str]] = {}

#: Separator matches (or protected spans) taken per step of the unit scan; 2 at least (a first step of
#: BATCH matches is known to make two cuts or more).
BATCH = 4096
#: Ranges up to this many runes get all their units at once (as do token-measured ones, see `UnitWindow`).
LAZY_MIN_RUNES = 1 << 17
#: How far past what the merge needs the window is filled, so it is refilled every ~this many runes.
LOOKAHEAD_RUNES = 1 << 15


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


def _next_cuts(matches: Iterator[re.Match[str]], last: int, limit: int) -> tuple[list[int], int, bool]:
    """Cuts of the next `limit` separator matches (each match's start, unless it touches the last cut, and
    its end); the last cut; whether the matches are exhausted."""
    cuts: list[int] = []
    taken = 0
    for mt in islice(matches, limit):
        s, e = mt.span()
        if s > last:
            cuts.append(s)
        cuts.append(e)
        last = e
        taken += 1
    return cuts, last, taken < limit


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


class UnitWindow:
    """The units of [a, b): their end offsets, a window of them at a time. `bounds[i]` is the end of unit
    `base + i`; `specials` (sorted) and `big` hold the window indices of table-header units and of units
    over HARD_CAP. The merge asks for the units up to an offset (`fill`, `cover`) and drops those behind
    its chunk (`compact`), so at most about a chunk plus LOOKAHEAD_RUNES of units is held.

    A token-measured range gets all its units at once: the merge's search for the last unit that fits
    probes the units up to the next special one, and token counts need not grow with the range, so a
    shorter window could end that search elsewhere. Past `max_units` units in all it raises TooManyChunks."""

    __slots__ = (
        "_a",
        "_b",
        "_gen",
        "_m",
        "_new_big",
        "_new_hdr",
        "_seps",
        "_size",
        "_spans",
        "_text",
        "base",
        "big",
        "bounds",
        "exhausted",
        "lazy",
        "max_units",
        "specials",
    )

    def __init__(
        self,
        text: str,
        a: int,
        b: int,
        spans: Spans,
        seps: tuple[str, ...],
        size: int,
        m: CharMeasure | TokenMeasure,
        max_units: int = NO_LIMIT - 1,
    ) -> None:
        self._text, self._a, self._b, self._spans = text, a, b, spans
        self._seps, self._size, self._m = seps, size, m
        self.max_units = max_units
        self.bounds: list[int] = []
        self.base = 0
        self.specials: list[int] = []
        self.big: set[int] = set()
        self._new_big: list[int] = []  # unit numbers (base + index) found since the last `_finish`
        self._new_hdr: list[int] = []
        self._gen = self._units()
        self.exhausted = False
        self.lazy = not (m.token_mode or b - a <= LAZY_MIN_RUNES)  # units made as the merge reaches them
        if not self.lazy:
            for _ in self._gen:
                pass
            self.exhausted = True
            self._finish()

    # ------------------------------------------------------------ what the merge calls

    def fill(self, k: int, margin: int) -> int:
        """Make units until the window holds unit k + 1 and a unit ending more than `margin` runes past the
        start of unit k (or all of them). Returns the last index for which that still holds: the merge calls
        again past it."""
        bounds = self.bounds
        target = (bounds[k - 1] if k else self._a) + margin + LOOKAHEAD_RUNES
        while not self.exhausted and (len(bounds) < k + 2 or bounds[-1] <= target):
            self._step()
        if self.exhausted:
            return sys.maxsize
        return min(len(bounds) - 2, bisect_left(bounds, bounds[-1] - margin))

    def cover(self, pos: int) -> None:
        """Make units until one ends past `pos` (or all)."""
        bounds = self.bounds
        while not self.exhausted and (not bounds or bounds[-1] <= pos):
            self._step()

    def compact(self, k: int, cur: int | None) -> int:
        """Forget the units before k - 1 that end by `cur` (the chunk in progress starts there; nothing
        before it is looked at again), once they are half the window (so each is moved O(1) times). Returns
        how many; window indices then shift down by that much and `specials` keeps those from k on."""
        bounds = self.bounds
        drop = k - 1
        if cur is not None:
            drop = min(drop, bisect_right(bounds, cur))
        if drop <= 0 or 2 * drop < len(bounds):
            return 0
        del bounds[:drop]
        self.base += drop
        self.specials[:] = [x - drop for x in self.specials if x >= k]
        kept = [x - drop for x in self.big if x >= k]
        self.big.clear()
        self.big.update(kept)
        return drop

    def count_rest(self) -> None:
        """Make (and forget) the units not made yet: raises TooManyChunks when they are too many."""
        while not self.exhausted:
            self.base += len(self.bounds)
            self.bounds.clear()
            self._new_big.clear()
            self._new_hdr.clear()
            self._step()

    # ------------------------------------------------------------ the scan

    def _step(self) -> None:
        try:
            next(self._gen)
        except StopIteration:
            self.exhausted = True
        self._finish()

    def _finish(self) -> None:
        """Take the special units found by the scan into the window's indices."""
        if self._new_big or self._new_hdr:
            base = self.base
            big = [x - base for x in self._new_big]
            self.big.update(big)
            self.specials.extend(sorted({*big, *(x - base for x in self._new_hdr)}))
            self._new_big.clear()
            self._new_hdr.clear()

    def _check(self) -> None:
        if self.base + len(self.bounds) > self.max_units:
            raise TooManyChunks(f"more than {self.max_units} units")

    def _cuts(self, matches: Iterator[re.Match[str]], last: int) -> tuple[list[int], int, bool]:
        """`_next_cuts`, reading no more matches than the units still allowed (+1), and raising when they
        make more cuts than that (each cut ends a unit at least)."""
        room = max(0, self.max_units - self.base - len(self.bounds))
        cuts, last, done = _next_cuts(matches, last, min(BATCH, room + 1))
        if len(cuts) > room:
            raise TooManyChunks(f"more than {self.max_units} units")
        return cuts, last, done

    def _units(self) -> Iterator[None]:
        """Protected spans are units of their own (runs of touching plain ones, a table's rows, taken in
        slices); the gaps between them are split by separators (`_gap`). Yields after each step."""
        text, a, b, spans, bounds = self._text, self._a, self._b, self._spans, self.bounds
        pos = a
        starts, ends, header_starts = spans.starts, spans.ends, spans.headers
        t, j, steps = spans.within(a, b, HARD_CAP)
        steps.append(j)
        for x in steps:
            if x > t:  # spans t..x-1 touch the span before them and are plain: one unit each
                for i in range(t, x, BATCH):
                    bounds += ends[i : min(i + BATCH, x)]
                    self._check()
                    yield
                pos = ends[x - 1]
            if x == j:
                break
            s, e = starts[x], ends[x]
            if e - s <= HARD_CAP:
                s, e = _with_adjoining_word(text, s, e, pos, starts[x + 1] if x + 1 < len(starts) else b, b)
            if s > pos and not self._whole(pos, s):
                yield from self._gap(pos, s, 0)
            if e - s > HARD_CAP:
                force_split(text, s, e, bounds)
            else:
                if s in header_starts:
                    self._new_hdr.append(self.base + len(bounds))
                bounds.append(e)
            pos = e
            t = x + 1
        if pos < b and not self._whole(pos, b):
            yield from self._gap(pos, b, 0)
        self._check()

    def _whole(self, a: int, b: int) -> bool:
        """Whether the gap [a, b) fits a chunk, and then make it one unit (without a scan of its own)."""
        if b - a <= HARD_CAP and self._m.fits(a, b, self._size):
            self.bounds.append(b)
            return True
        return False

    def _gap(self, a: int, b: int, si: int) -> Iterator[None]:
        """WeKnora splitBySeparators on [a, b), a piece that does not fit whole (`_whole`): separators by
        priority, lower ones only on oversize pieces. A piece over the rune hard cap is oversize even when
        its tokens fit (token mode)."""
        text, seps, size, m, bounds = self._text, self._seps, self._size, self._m, self.bounds
        nseps = len(seps)
        for idx in range(si, nseps):
            matches = _sep_re(seps[idx]).finditer(text, a, b)
            cuts, last, done = self._cuts(matches, a)
            if not cuts:
                continue
            if done:
                if last < b:
                    cuts.append(b)
                if len(cuts) <= 1:  # the separator is the whole gap
                    continue
            deeper = idx + 1 < nseps
            x = a
            while True:
                for y in cuts:
                    if deeper and (y - x > HARD_CAP or not m.fits(x, y, size)):
                        yield from self._gap(x, y, idx + 1)
                    else:
                        if y - x > HARD_CAP:
                            self._new_big.append(self.base + len(bounds))
                        bounds.append(y)
                    x = y
                self._check()
                yield
                if done:
                    return
                cuts, last, done = self._cuts(matches, last)
                if done and last < b:
                    cuts.append(b)
        if b - a > HARD_CAP:
            self._new_big.append(self.base + len(bounds))
        bounds.append(b)
