"""The recursive tier (WeKnora `SplitText`): protected units, priority separators, greedy merge with
semantic overlap and repeated table headers.

Everything works on absolute rune offsets into one text; strings are sliced only for emitted chunks and
for the few units inside tables. The greedy merge jumps from chunk end to chunk end with a bisect over
the unit boundaries instead of visiting every unit, and falls back to the unit-by-unit WeKnora loop only
inside Markdown tables (where the repeated-header state machine decides). There too, a run of plain rows
of the active table joins the chunk in one step (`_row_run`): the loop runs per chunk, not per row. The
repeated header is counted once against the size, as part of the chunk that carries it. Unlike WeKnora,
an inline span's unit takes the rest of its word (`(`, `),`), so no chunk starts or ends with a stray half.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Callable
from functools import lru_cache
from itertools import repeat
from operator import sub
from typing import Protocol

from chalicelib.chunker import units as _units
from chalicelib.chunker.config import HARD_CAP
from chalicelib.chunker.lengths import CharMeasure, TokenMeasure
from chalicelib.chunker.spans import Spans
from chalicelib.chunker.units import UnitWindow, force_split, unit_cap
from chalicelib.domain.chunk_limits import NO_LIMIT, TooManyChunks

Raw = tuple[int, int, str]  # (start, end, synthetic header prefix)

_WS = r"[\t\n\f\r ]"
_HDR_START = re.compile(
    r"^" + _WS + r"*(?:\|[^|\n]*)+[\r\n]+" + _WS + r"*(?:\|" + _WS + r"*:?-{3,}:?" + _WS + r"*)+\|?[\r\n]+\Z",
    re.S | re.I,
)
_HDR_END = re.compile(r"^" + _WS + r"*\Z|^" + _WS + r"*[^|\t\n\f\r ]", re.S)
# A whole line that starts and ends with a pipe (two at least), surrounding whitespace allowed.
_ROW_LINE = re.compile(r"^[^\S\n]*(\|[^\n]*\|)[^\S\n]*$", re.M)
_PARA = re.compile(r"\n\n")
_SENT = re.compile(r"[。？！]|[.?!] ")

# ---------------------------------------------------------------- table header tracking (header_tracker.go)


def _row_cols(line: str) -> int:
    """Cells of one table line: its pipes, less the empty edges (WeKnora countColumns)."""
    line = line.strip()
    if not line.startswith("|"):
        return 0
    return line.count("|") - (1 if line.endswith("|") else 0)


def _first_row_cols(text: str) -> int:
    """Cells of the first line of `text` that is a table row (starts and ends with a pipe), else 0."""
    m = _ROW_LINE.search(text)
    return m.group(1).count("|") - 1 if m else 0


@lru_cache(maxsize=64)  # one active header is asked about once per row
def _header_cols(header: str) -> int:
    for line in header.split("\n"):
        line = line.strip()
        if not line or "---" in line:
            continue
        n = _row_cols(line)
        if n:
            return n
    return 0


@lru_cache(maxsize=64)
def _header_col_row(header: str) -> str:
    for line in header.split("\n"):
        line = line.strip()
        if not line or "---" in line:
            continue
        if line.strip("| \t"):
            return line
    return ""


@lru_cache(maxsize=64)
def _row_pattern(cells: int) -> re.Pattern[str]:
    """One whole row unit with exactly `cells` cells, ending with a single line break."""
    return re.compile(r"[ ]*+\|(?:[^|\n]*+\|){" + str(cells) + r"}\n")


@lru_cache(maxsize=64)
def _row_run_pattern(cells: int) -> re.Pattern[str]:
    """A run of whole row lines with exactly `cells` cells each."""
    # Possessive: nothing given back can make a row (or a longer run), and a whole table is matched at once.
    return re.compile(r"(?:[ ]*+\|(?:[^|\n]*+\|){" + str(cells) + r"}\n)++")


def _header_present(header: str, overlap: str, unit: str) -> bool:
    if header in overlap or header in unit:
        return True
    row = _header_col_row(header)
    return bool(row) and (row in overlap or row in unit)


def _column_mismatch(header: str, unit: str) -> bool:
    hc = _header_cols(header)
    rc = _first_row_cols(unit)
    return hc > 0 and rc > 0 and hc != rc


class TableTracker:
    """Active Markdown table header: starts on a header+separator unit (replacing an active one); ends on a
    blank or non-table unit, a paragraph break (also right after a header) followed by another table, or a
    column-count change."""

    __slots__ = ("_row", "_row_header", "active", "ended_this_unit", "pending")

    def __init__(self) -> None:
        self.active = ""
        self.pending = False
        self.ended_this_unit = False
        self._row_header = ""  # the header `_row` was made for
        self._row: re.Pattern[str] | None = None

    def update(self, unit: str) -> None:
        self.ended_this_unit = False
        if self.active and not self.pending:
            # Fast path: one row line with the header's cell count leaves every state unchanged.
            if self._row_header is not self.active:
                self._row_header = self.active
                n = _header_cols(self.active)
                self._row = _row_pattern(n) if n > 0 else None
            if self._row is not None and self._row.fullmatch(unit):
                return
        if self.pending:
            self.pending = False
            if self.active:
                if _first_row_cols(unit) > 0:
                    self.ended_this_unit = True
                self.active = ""
        if self.active and _HDR_END.search(unit):
            self.active = ""
        if self.active:
            if unit.rstrip(" \t\r").endswith("\n\n"):
                self.pending = True
            elif _column_mismatch(self.active, unit):
                self.active = ""
                self.ended_this_unit = True
        if "-" in unit:
            m = _HDR_START.search(unit)
            if m and m.group():
                if self.active:  # another table starts here: its rows take its own header
                    self.ended_this_unit = True
                self.active = m.group()
                # A header followed by a blank line has no rows: the blank paragraph ends its table.
                self.pending = unit.rstrip(" \t\r").endswith("\n\n")


def _row_run(text: str, bounds: list[int], k: int, u_s: int, limit: int, tracker: TableTracker) -> int:
    """Last index j such that units k..j are single rows with the active header's cell count (units the
    tracker would pass unchanged), ending before `limit`; k - 1 when there is none.

    One regex match finds the run of such lines; its units must be exactly those lines (each ends right
    after a line break, as many units as line breaks), which a span crossing rows would break."""
    cells = _header_cols(tracker.active)
    if cells <= 0:
        return k - 1
    m = _row_run_pattern(cells).match(text, u_s, limit)
    if m is None:
        return k - 1
    j = bisect_right(bounds, m.end(), k) - 1
    ends = bounds[k : j + 1]
    aligned = next((i for i, x in enumerate(ends) if text[x - 1] != "\n"), len(ends))
    j = k + aligned - 1
    if j >= k and text.count("\n", u_s, bounds[j]) != j - k + 1:
        return k - 1
    return j


def _clean_run(
    text: str, units: UnitWindow, k: int, u_s: int, b: int, tracker: TableTracker
) -> tuple[int, bool]:
    """The run of plain rows of the active table from unit k to b (not just one chunk's window): its last
    unit J, and whether it is clean, i.e. units k..J are exactly its lines, one each. Then for every k' in
    k..J, `_row_run(text, bounds, k', u_s', limit, tracker)` is the last unit of k'..J ending by `limit`
    (a bisect), and each of those units is a row that `TableTracker.update` passes unchanged. The merge
    passes a `b` about a window past u_s when the units are made lazily, so a table of millions of rows
    is not all held as units at once: then the run is a piece of the table's, and the next one is found
    where it ends (rune lengths add up, so the chunks are those of one run)."""
    cells = _header_cols(tracker.active)
    m = _row_run_pattern(cells).match(text, u_s, b) if cells > 0 else None
    if m is None:
        return k, False
    units.cover(m.end())  # the run's units (a table's rows are protected spans: their ends are shared)
    bounds = units.bounds
    j = bisect_right(bounds, m.end(), k) - 1
    if j < k:
        return k, False
    # Every unit ends a line (one C-level pass: the rune before each end is a line break) and they hold as
    # many line breaks as there are units.
    ends_line = all(map("\n".__eq__, map(text.__getitem__, map(sub, bounds[k : j + 1], repeat(1)))))
    clean = ends_line and text.count("\n", u_s, bounds[j]) == j - k + 1
    return j, clean


# ---------------------------------------------------------------- overlap


def overlap_start(
    text: str, spans: Spans, m: CharMeasure | TokenMeasure, p: int, end: int, max_ov: int
) -> int:
    """Start of the semantic overlap kept from chunk [p, end): paragraph break > line break > sentence end,
    earliest of the best kind, inside the last `max_ov` units (+4 runes lookbehind for the separator).
    Returns `end` for no overlap."""
    if max_ov <= 0 or p >= end:
        return end
    w = m.window_start(p, end, max_ov)
    if w >= end:
        return end
    ws = max(p, w - 4)
    if spans.starts and spans.covers(ws, end):
        return end  # every candidate boundary is inside a protected span (a chunk ending in table rows)
    # A boundary needs non-blank text after it: find the last non-space rune of the window.
    k = end
    while k > ws and text[k - 1] in " \t\n\r\f\v":
        k -= 1
    if k <= w:
        return end
    last_nonblank = k - 1
    starts = spans.starts
    inside = spans.inside
    strictly = spans.strictly_inside
    best = -1
    paired: set[int] = set()
    for mt in _PARA.finditer(text, ws, end):
        s, e = mt.span()
        paired.add(s)
        paired.add(s + 1)
        if best < 0 and e >= w and e <= last_nonblank and not (starts and (inside(s) or strictly(e))):
            best = e
    if best < 0:
        i = text.find("\n", ws, end)
        while i >= 0:
            e = i + 1
            if e > last_nonblank:
                break
            if i not in paired and e >= w and not (starts and (inside(i) or strictly(e))):
                best = e
                break
            i = text.find("\n", e, end)
    if best < 0:
        for mt in _SENT.finditer(text, ws, end):
            s, e = mt.span()
            if e > last_nonblank:
                break
            if e >= w and not (starts and (inside(s) or strictly(e))):
                best = e
                break
    if best < 0:
        return end
    if m.token_mode and m.length(best, end) > max_ov:
        return end
    return best


# ---------------------------------------------------------------- merge


class ChunkSink(Protocol):
    """Where `split_into` puts its chunks; its length is the number of chunks it holds (a sink may join
    some: the count the limit is held to is its own)."""

    def append(self, chunk: Raw, /) -> None: ...

    def __len__(self) -> int: ...


def _non_empty(out: ChunkSink) -> Callable[[Raw], None]:
    def emit(chunk: Raw, /) -> None:
        if chunk[1] > chunk[0]:
            out.append(chunk)

    return emit


def split_range(
    text: str,
    a: int,
    b: int,
    spans: Spans,
    seps: tuple[str, ...],
    size: int,
    overlap: int,
    m: CharMeasure | TokenMeasure,
    lead_header: str = "",
    *,
    max_chunks: int = NO_LIMIT,
) -> list[Raw]:
    """Chunks of [a, b) as (start, end, synthetic header prefix). `lead_header`: a table header that comes
    before `a` as synthetic text (a parent chunk's repeated header, when its children are split): the range
    starts inside that table, as WeKnora's split of the parent's content starts with the header. Raises
    TooManyChunks as soon as there would be more than `max_chunks`."""
    out: list[Raw] = []
    split_into(out, text, a, b, spans, seps, size, overlap, m, lead_header, max_chunks=max_chunks)
    return out


def split_into(
    out: ChunkSink,
    text: str,
    a: int,
    b: int,
    spans: Spans,
    seps: tuple[str, ...],
    size: int,
    overlap: int,
    m: CharMeasure | TokenMeasure,
    lead_header: str = "",
    *,
    max_chunks: int = NO_LIMIT,
) -> None:
    """`split_range` into `out`, stopping (TooManyChunks) once `out` holds more than `max_chunks`: the units
    are made as the chunks reach them (a few ints per separator, a window at a time), the chunks one by one,
    so a refused split stops early."""
    if a >= b:
        return
    units = UnitWindow(text, a, b, spans, seps, size, m, unit_cap(max_chunks, size, m.token_mode))
    try:
        _merge(out, units, text, a, b, spans, size, overlap, m, lead_header, max_chunks)
    except TooManyChunks:
        # Too many units is the reason whenever there are (as when they were all cut before the merge).
        units.count_rest()
        raise


def _merge(
    out: ChunkSink,
    units: UnitWindow,
    text: str,
    a: int,
    b: int,
    spans: Spans,
    size: int,
    overlap: int,
    m: CharMeasure | TokenMeasure,
    lead_header: str,
    max_chunks: int,
) -> None:
    """The greedy merge of `split_into` over the units of [a, b). Unit indices are the window's (see
    `UnitWindow`): at the top of the loop the window is refilled past what one step can look at (the
    current chunk's reach) and what lies behind the chunk in progress is dropped, shifting the indices."""
    # the lead header alone is no chunk (it did not fit, or its table ended at once)
    emit = _non_empty(out) if lead_header else out.append
    held = out.__len__
    bounds, specials, big_set = units.bounds, units.specials, units.big
    # Furthest past the start of unit k that one step reads units: a chunk's size or the hard cap, +1.
    margin = max(size, HARD_CAP) + 2
    refill_at = -1  # refill the window before the step for unit k > refill_at
    tracker = TableTracker()
    length = m.length
    last_fitting = m.last_fitting
    token_mode = m.token_mode
    full_at = -1  # unit index at which a run of table rows stopped because the chunk was full
    # Units run_lo..run_hi: one run of plain rows of the table whose header is run_hdr, found once for the
    # whole run (`_clean_run`; run_cut: a window's piece of it); run_clean says whether its units are exactly
    # its lines.
    run_hdr, run_lo, run_hi, run_clean, run_cut = "", -1, -1, False, False
    cur: int | None = None  # source start of the current chunk; None = empty
    hdr = ""  # synthetic table header at the head of the current chunk
    hdr_len = 0
    if lead_header:
        tracker.active = hdr = lead_header
        hdr_len = m.text_len(lead_header)
        cur = a
    k = 0
    sp = 0
    while True:
        if k > refill_at:
            dropped = units.compact(k, cur)
            if dropped:
                k -= dropped
                full_at -= dropped
                run_lo -= dropped
                run_hi -= dropped
                sp = 0
            refill_at = units.fill(k, margin)
        n = len(bounds)  # the window's units: all of them, or past anything this step reads
        if k >= n:
            break
        if held() > max_chunks:  # one check a chunk on the fast path, a unit in tables
            raise TooManyChunks(f"more than {max_chunks} chunks")
        if not (tracker.active or tracker.pending):  # no table in progress
            while sp < len(specials) and specials[sp] < k:
                sp += 1
            stop = specials[sp] if sp < len(specials) else n
            if k < stop:
                if cur is None:
                    cur = bounds[k - 1] if k else a
                    hdr, hdr_len = "", 0
                    k += 1
                    continue
                j = last_fitting(cur, size - hdr_len, bounds, k, stop)
                hard_bound = False
                if token_mode or size > HARD_CAP:
                    jh = bisect_right(bounds, cur + HARD_CAP - len(hdr), k, stop) - 1
                    if jh < j:
                        j, hard_bound = jh, True
                if j >= k:
                    k = j + 1
                if k >= stop:
                    continue
                u_s = bounds[k - 1]
                u_e = bounds[k]
                emit((cur, u_s, hdr))
                if hard_bound:
                    cur = u_s
                else:
                    cur = overlap_start(text, spans, m, cur, u_s, min(overlap, size - length(u_s, u_e)))
                    if token_mode and u_e - cur > HARD_CAP:
                        cur = u_s
                hdr, hdr_len = "", 0
                k += 1
                continue
        # Unit-by-unit WeKnora loop (tables, header units, units over the hard cap).
        u_s = bounds[k - 1] if k else a
        in_run = False  # unit k is a plain row of the active table, in a clean run
        if tracker.active and not tracker.pending:
            if not (run_hdr is tracker.active and run_lo <= k <= run_hi):
                run_hdr, run_lo = tracker.active, k
                run_to = min(b, u_s + margin + _units.LOOKAHEAD_RUNES) if units.lazy else b
                run_hi, run_clean = _clean_run(text, units, k, u_s, run_to, tracker)
                run_cut = run_to < b
            in_run = run_clean
        if (
            cur is not None
            and tracker.active
            and not tracker.pending
            and k != full_at
            and k + 1 < n
            and m.fits(cur, bounds[k + 1], size - hdr_len)  # two more units fit: worth a run
        ):
            # Inside a table: every plain row that still fits the chunk joins it without a state change.
            limit = min(b, cur + (HARD_CAP if token_mode else size) + 1)
            if in_run:
                j = bisect_right(bounds, limit, k, run_hi + 1) - 1
            else:
                j = _row_run(text, bounds, k, u_s, limit, tracker)
            if j >= k:
                j = last_fitting(cur, size - hdr_len, bounds, k, j + 1)
                if token_mode or size > HARD_CAP:
                    j = min(j, bisect_right(bounds, cur + HARD_CAP - len(hdr), k, j + 1) - 1)
                if j >= k:
                    k = j + 1
                    # The chunk is full (unit k goes the unit-by-unit way), unless it only reached the end
                    # of a piece of the run (`_clean_run`): then the next piece continues it.
                    if not (in_run and run_cut and j == run_hi):
                        full_at = k
                    continue
        u_e = bounds[k]
        unit = text[u_s:u_e]
        if k in big_set:
            if cur is not None:
                emit((cur, u_s, hdr))
                cur, hdr, hdr_len = None, "", 0
            tracker.update(unit)
            pieces: list[int] = []
            force_split(text, u_s, u_e, pieces)
            x = u_s
            for y in pieces:
                emit((x, y, ""))
                x = y
            k += 1
            continue
        if in_run:
            tracker.ended_this_unit = False  # what update() does for a plain row of the active table
        else:
            tracker.update(unit)
        if tracker.ended_this_unit and cur is not None:
            emit((cur, u_s, hdr))
            cur, hdr, hdr_len = None, "", 0
        headers = tracker.active
        h_len = m.text_len(headers) if headers else 0
        if h_len > size:
            headers, h_len = "", 0
        u_len = length(u_s, u_e)
        # The chunk so far is hdr + text[cur:u_s]: the header is counted once, as what it holds.
        if cur is not None and length(cur, u_s) + hdr_len + u_len > size:
            emit((cur, u_s, hdr))
            ov = overlap_start(text, spans, m, cur, u_s, min(overlap, size - u_len))
            hdr, hdr_len = "", 0
            cur_len = length(ov, u_s)
            if headers and h_len + u_len <= size:
                # Drop whole leading units of the overlap until header + unit fit.
                while ov < u_s and cur_len + u_len + h_len > size:
                    ov = min(bounds[bisect_right(bounds, ov)], u_s)
                    cur_len = length(ov, u_s)
                # A plain row of the active table has the header's cell count: no column mismatch.
                if not _header_present(headers, text[ov:u_s], unit) and (
                    in_run or not _column_mismatch(headers, unit)
                ):
                    hdr, hdr_len = headers, h_len
            cur = ov if (ov < u_s or hdr) else None
        if cur is not None and (u_e - cur) + len(hdr) > HARD_CAP:
            emit((cur, u_s, hdr))
            cur, hdr, hdr_len = None, "", 0
        if cur is None:
            cur = u_s
        k += 1
    if cur is not None:
        emit((cur, b, hdr))
    if held() > max_chunks:
        raise TooManyChunks(f"more than {max_chunks} chunks")
