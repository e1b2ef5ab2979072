"""Protected Markdown spans that a chunk boundary must never cut (WeKnora `protectedPatterns`).

Fenced code blocks come from the CommonMark block parser (`blocks.closed_fenced_blocks`): WeKnora's fence
regex misses fences with a space before the info string, tilde fences and longer closing fences, and then
pairs every later fence wrongly; like it, an unclosed fence is plain text. The other patterns are WeKnora's, each scanned on its own (C-speed `finditer`)
in the stretches between fenced blocks (code is literal text: no math, link or table inside it), then the
union is resolved like WeKnora: sorted by start, longer first on ties, greedily dropping overlaps. Table
rows (one span per row: nearly all spans of a big table) never pass through Python one by one: they come
from one regex scan, and the resolution copies runs of them between the other spans with slices. The
offsets are held in arrays of machine ints (`array('i')`, 4 bytes each), not lists of Python ints (~36
bytes each): a 50 M-rune table has millions of rows, and as lists they took 2-4 GB in a 1,024 MB Lambda.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import compress, islice
from operator import methodcaller, ne, sub

from chalicelib.chunker.blocks import Fence, closed_fenced_blocks

# Go's \s and \w are ASCII-only; spell them out so Python's Unicode classes do not widen the match.
_WS = r"[\t\n\f\r ]"
MATH = re.compile(r"\$\$.*?\$\$", re.S)
IMAGE = re.compile(r"!\[[^\]\n]{0,200}\]\([^)\n]{1,500}\)")
LINK = re.compile(r"\[[^\]\n]{1,200}\]\([^)\n]{1,500}\)")
# WeKnora's table patterns backtrack per pipe: `(?:\|[^|\n]*)+\|` tries every split of a row into cells.
# The forms below give exactly the same matches (checked against the original forms in the tests).
TABLE_HEADER_GO = (
    r"[ ]*(?:\|[^|\n]*)+\|[\r\n]+" + _WS + r"*(?:\|" + _WS + r"*:?-{3,}:?" + _WS + r"*)+\|[\r\n]+"
)
TABLE_ROW_GO = r"[ ]*(?:\|[^|\n]*)+\|[\r\n]+"
# Starts at the pipe; `_table_headers` re-attaches leading spaces.
TABLE_HEADER = re.compile(
    r"\|(?:[^|\n]*+\|)++[\r\n]++" + _WS + r"*(?:\|" + _WS + r"*:?-{3,}:?" + _WS + r"*)+\|[\r\n]+"
)
# A row is its leading spaces, the first pipe, then up to the LAST pipe of the line (the atomic group takes
# the line and gives back only to its last pipe, as the original's cell loop ends there), which line breaks
# must follow. Where that fails, every later start on the line fails too: so the pattern is tried only after
# a line break (a literal the scan jumps to; `table_rows` tries the first line), skips to the line's first
# pipe, and a line full of pipes without a final one costs one pass, not one per pipe. The row is group 1
# to the end of group 2: the row's last line break is left to the next match to start from.
_ROW_LINE = r"(?=[^|\n]*+\|)(?:[^|\n]*[^ |\n])?([ ]*+\|(?>[^\n]*\|)(?:[\r\n](?=[\r\n]))*+)(?=([\r\n]))"
_FIRST_TABLE_ROW = re.compile(_ROW_LINE)
TABLE_ROW = re.compile(r"[\r\n]" + _ROW_LINE)
INLINE_CODE = re.compile(r"`[^`\r\n]+`")

HEADER_KIND = 3
TABLE_ROW_KIND = 4
FENCE_KIND = 5
_PATTERNS = (MATH, IMAGE, LINK, TABLE_HEADER, TABLE_ROW, None, INLINE_CODE)
# Cheap pre-checks: a pattern cannot match when its mandatory literal is absent.
_NEEDS = ("$$", "](", "](", "|", "|", "", "`")
# A separator row's first cell is a pipe, optional whitespace, an optional colon and three dashes. A header
# match ends its header line with "|", one or more line breaks and optional whitespace, then such a cell:
# only lines right before one are tried. Runs of dashes are rare outside separators, pipes are not (every
# cell of every row): the scan finds the dashes (`str.find`) and steps back to the pipe.
_BLANK = " \t\n\f\r"
_ROW_START = methodcaller("start", 1)
_ROW_END = methodcaller("end", 2)
#: Table rows read from the scan at a time (their match objects are dropped once their offsets are taken).
ROW_BATCH = 1 << 10


def offsets(n: int) -> array[int]:
    """An empty array for offsets into a text of n runes: 4-byte ints, 8-byte past 2**31 runes."""
    return array("i" if n < 1 << 31 else "q")


@dataclass
class Spans:
    """Sorted, non-overlapping protected spans of one text (absolute rune offsets)."""

    starts: array[int]
    ends: array[int]
    headers: set[int]  # starts of table header+separator spans
    fences: list[Fence] = field(default_factory=list)  # closed CommonMark fenced code blocks (also in starts)
    _breaks: list[int] | None = field(default=None, repr=False, compare=False)  # see covers()
    _header_list: list[int] | None = field(default=None, repr=False, compare=False)  # sorted headers

    def inside(self, pos: int) -> bool:
        """True when pos lies in [start, end) of a span."""
        i = bisect_right(self.starts, pos) - 1
        return i >= 0 and pos < self.ends[i]

    def covers(self, a: int, b: int) -> bool:
        """True when [a, b) lies inside one span or a run of spans that touch (e.g. a table's rows)."""
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, a) - 1
        if i < 0 or a >= ends[i]:
            return False
        if ends[i] >= b:
            return True
        breaks = self._breaks
        if breaks is None:
            # Indices i whose span does not touch span i + 1 (and the last span): found once, in C.
            breaks = self._breaks = list(compress(range(len(starts)), map(ne, memoryview(starts)[1:], ends)))
            breaks.append(len(starts) - 1)
        return ends[breaks[bisect_left(breaks, i)]] >= b

    def strictly_inside(self, pos: int) -> bool:
        """True when a cut at pos would split a span (start < pos < end)."""
        i = bisect_right(self.starts, pos - 1) - 1
        return i >= 0 and pos < self.ends[i] and self.starts[i] < pos

    def within(self, a: int, b: int, cap: int) -> tuple[int, int, list[int]]:
        """Spans i..j-1 lie entirely inside [a, b). Returns i, j and, in order, the indices among them that
        need a step of their own: the first, any after a gap, any longer than `cap`, any table header.
        Between two such indices the spans touch and are plain (a table's rows): taken in bulk, not one by
        one, so the scans here are C-level maps over the index range."""
        starts, ends = self.starts, self.ends
        i = bisect_left(starts, a)
        # Spans are sorted and disjoint, so ends ascend too: those ending by b are a prefix.
        j = bisect_right(ends, b, i, bisect_left(starts, b, i))
        if i >= j:
            return i, j, []
        # (memoryviews: the range may hold millions of a table's rows, not to be copied)
        sv, ev = memoryview(starts), memoryview(ends)
        steps = set(compress(range(i + 1, j), map(ne, sv[i + 1 : j], ev[i : j - 1])))
        steps.update(compress(range(i, j), map(cap.__lt__, map(sub, ev[i:j], sv[i:j]))))
        if self.headers:
            if self._header_list is None:
                self._header_list = sorted(self.headers)
            hl = self._header_list
            for h in hl[bisect_left(hl, starts[i]) : bisect_left(hl, b)]:
                x = bisect_left(starts, h, i, j)
                if x < j:
                    steps.add(x)
        steps.add(i)
        return i, j, sorted(steps)


def _table_headers(text: str, a: int, b: int, out: list[tuple[int, int, int]]) -> None:
    """TABLE_HEADER.finditer(text, a, b) with leading spaces, trying the pattern only where it can match.

    Searching everywhere tries the pattern at every pipe of every row (quadratic in a row's cells). A match
    starts at the first pipe of its header line (any later pipe on the line has the same continuation),
    and that line is the one right before a separator cell: find those lines, then match there in order.
    """
    lines: set[int] = set()
    find = text.find
    d = find("---", a, b)
    while d >= 0:
        e = d + 3
        while e < b and text[e] == "-":
            e += 1
        # The pipe before the run of dashes, past one optional colon and any whitespace (inside [a, b)).
        p = d
        d = find("---", e, b)
        if p > a and text[p - 1] == ":":
            p -= 1
        while p > a and text[p - 1] in _BLANK:
            p -= 1
        if p <= a or text[p - 1] != "|":
            continue
        sep = q = p - 1
        while q > a and text[q - 1] in _BLANK:
            q -= 1
        if q > a and q < sep and text[q - 1] == "|" and text[q] in "\r\n":
            lines.add(max(a, text.rfind("\n", a, q - 1) + 1))
    last = a
    for line in sorted(lines):
        p = text.find("|", max(line, last), b)
        if p < 0:
            break
        hm = TABLE_HEADER.match(text, p, b)
        if hm is None:
            continue
        s, e = hm.span()
        while s > last and text[s - 1] == " ":
            s -= 1
        out.append((s, -e, HEADER_KIND))
        last = e


def table_rows(text: str, a: int = 0, b: int | None = None) -> tuple[array[int], array[int]]:
    """Starts and ends of WeKnora's table rows (`TABLE_ROW_GO`) in [a, b), where `a` is 0, a line start
    or a line break."""
    if b is None:
        b = len(text)
    starts, ends = offsets(len(text)), offsets(len(text))
    first = _FIRST_TABLE_ROW.match(text, a, b)
    if first:
        starts.append(_ROW_START(first))
        ends.append(_ROW_END(first))
    rows = TABLE_ROW.finditer(text, first.end() if first else a, b)
    while batch := list(islice(rows, ROW_BATCH)):
        starts.extend(map(_ROW_START, batch))
        ends.extend(map(_ROW_END, batch))
    return starts, ends


def _gaps(fences: list[Fence], n: int) -> list[tuple[int, int]]:
    out = []
    pos = 0
    for f in fences:
        if f.start > pos:
            out.append((pos, f.start))
        pos = max(pos, f.end)
    if pos < n:
        out.append((pos, n))
    return out


def find_spans(text: str) -> Spans:
    fences = closed_fenced_blocks(text)
    found: list[tuple[int, int, int]] = [(f.start, -f.end, FENCE_KIND) for f in fences if f.end > f.start]
    gaps = _gaps(fences, len(text)) if fences else [(0, len(text))]
    row_starts, row_ends = offsets(len(text)), offsets(len(text))
    for kind, (pat, need) in enumerate(zip(_PATTERNS, _NEEDS, strict=True)):
        if pat is None or need not in text:
            continue
        if pat is TABLE_ROW and "|\n" not in text and "|\r" not in text:
            continue
        for a, b in gaps:
            if pat is TABLE_HEADER:
                _table_headers(text, a, b, found)
            elif pat is TABLE_ROW:
                starts, ends = table_rows(text, a, b)
                row_starts += starts
                row_ends += ends
            else:
                found.extend((m.start(), -m.end(), kind) for m in pat.finditer(text, a, b))
    found.sort()
    return _resolve(found, row_starts, row_ends, fences, len(text))


def _resolve(
    found: list[tuple[int, int, int]], rs: array[int], re_: array[int], fences: list[Fence], n: int
) -> Spans:
    """WeKnora's resolution of the union of `found` (sorted (start, -end, kind)) and the table rows
    (`rs`/`re_`, sorted and disjoint, kind TABLE_ROW_KIND): in that order, each span is kept when it starts
    at or after the end of the last kept one. Rows between two other spans are disjoint, so once one of
    them is kept all later ones are: each run of rows is one bisect and one slice."""
    if not found:  # only table rows: all of them are kept
        return Spans(rs, re_, set(), fences)
    starts, ends = offsets(n), offsets(n)
    headers: set[int] = set()
    last = 0
    i = 0
    n = len(rs)
    for s, neg_e, kind in found:
        # Rows that sort before this span: those starting before it, and one starting with it that is
        # longer (or as long, with the lower kind).
        j = bisect_left(rs, s, i)
        if j < n and rs[j] == s and (-re_[j], TABLE_ROW_KIND) < (neg_e, kind):
            j += 1
        f = bisect_left(rs, last, i, j)
        if f < j:
            starts += rs[f:j]
            ends += re_[f:j]
            last = re_[j - 1]
        i = j
        if s >= last:
            starts.append(s)
            ends.append(-neg_e)
            last = -neg_e
            if kind == HEADER_KIND:
                headers.add(s)
    f = bisect_left(rs, last, i)
    starts += rs[f:]
    ends += re_[f:]
    return Spans(starts, ends, headers, fences)
