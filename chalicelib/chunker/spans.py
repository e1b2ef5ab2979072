"""Protected Markdown spans that a chunk boundary must never cut (WeKnora `protectedPatterns`).

Fenced code blocks come from the CommonMark block parser (`blocks.fenced_blocks`): WeKnora's fence regex
misses fences with a space before the info string, tilde fences and longer closing fences, and then pairs
every later fence wrongly. The other patterns are WeKnora's, each scanned on its own (C-speed `finditer`)
in the stretches between fenced blocks (code is literal text: no math, link or table inside it), then the
union is resolved like WeKnora: sorted by start, longer first on ties, greedily dropping overlaps.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field

from chalicelib.chunker.blocks import Fence, fenced_blocks

# Go's \s and \w are ASCII-only; spell them out so Python's Unicode classes do not widen the match.
_WS = r"[\t\n\f\r ]"
MATH = re.compile(r"\$\$.*?\$\$", re.S)
IMAGE = re.compile(r"!\[[^\]\n]{0,200}\]\([^)\n]{1,500}\)")
LINK = re.compile(r"\[[^\]\n]{1,200}\]\([^)\n]{1,500}\)")
# WeKnora's table patterns start with `[ ]*`, which defeats the literal-prefix search and backtracks per
# pipe. These forms start at the pipe and never backtrack; `_lead_spaces` then re-attaches leading spaces,
# giving exactly the same matches (checked against the original forms in the tests).
TABLE_HEADER_GO = (
    r"[ ]*(?:\|[^|\n]*)+\|[\r\n]+" + _WS + r"*(?:\|" + _WS + r"*:?-{3,}:?" + _WS + r"*)+\|[\r\n]+"
)
TABLE_ROW_GO = r"[ ]*(?:\|[^|\n]*)+\|[\r\n]+"
TABLE_HEADER = re.compile(
    r"\|(?:[^|\n]*+\|)++[\r\n]++" + _WS + r"*(?:\|" + _WS + r"*:?-{3,}:?" + _WS + r"*)+\|[\r\n]+"
)
TABLE_ROW = re.compile(r"\|(?:[^|\n]*+\|)++[\r\n]+")
INLINE_CODE = re.compile(r"`[^`\r\n]+`")

HEADER_KIND = 3
FENCE_KIND = 5
_PATTERNS = (MATH, IMAGE, LINK, TABLE_HEADER, TABLE_ROW, None, INLINE_CODE)
# Cheap pre-checks: a pattern cannot match when its mandatory literal is absent.
_NEEDS = ("$$", "](", "](", "|", "|", "", "`")
# The first cell of a separator row. A header match ends its header line with "|", one or more line
# breaks and optional whitespace, then this cell: only lines right before one are tried.
_SEP_CELL = re.compile(r"\|" + _WS + r"*:?---")
_BLANK = " \t\n\f\r"


@dataclass
class Spans:
    """Sorted, non-overlapping protected spans of one text (absolute rune offsets)."""

    starts: list[int]
    ends: list[int]
    headers: set[int]  # starts of table header+separator spans
    fences: list[Fence] = field(default_factory=list)  # CommonMark fenced code blocks (also in starts)

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
        n = len(starts)
        while ends[i] < b:
            if i + 1 >= n or starts[i + 1] != ends[i]:
                return False
            i += 1
        return True

    def strictly_inside(self, pos: int) -> bool:
        """True when a cut at pos would split a span (start < pos < end)."""
        i = bisect_right(self.starts, pos - 1) - 1
        return i >= 0 and pos < self.ends[i] and self.starts[i] < pos

    def within(self, a: int, b: int) -> list[tuple[int, int, bool]]:
        """Spans lying entirely inside [a, b), with a header flag."""
        starts, ends = self.starts, self.ends
        i = bisect_left(starts, a)
        # Spans are sorted and disjoint, so ends ascend too: those ending by b are a prefix.
        j = bisect_right(ends, b, i, bisect_left(starts, b, i))
        s = starts[i:j]
        return list(zip(s, ends[i:j], map(self.headers.__contains__, s), strict=True))


def _lead_spaces(
    pat: re.Pattern[str], text: str, a: int, b: int, kind: int, out: list[tuple[int, int, int]]
) -> None:
    found = list(map(re.Match.span, pat.finditer(text, a, b)))
    # Re-attach leading spaces (indented rows are rare), never reaching back into the previous match.
    for i in [i for i, (s, _) in enumerate(found) if s > a and text[s - 1] == " "]:
        s, e = found[i]
        last = found[i - 1][1] if i else a
        while s > last and text[s - 1] == " ":
            s -= 1
        found[i] = (s, e)
    out.extend([(s, -e, kind) for s, e in found])


def _table_headers(text: str, a: int, b: int, out: list[tuple[int, int, int]]) -> None:
    """TABLE_HEADER.finditer(text, a, b) with leading spaces, trying the pattern only where it can match.

    Searching everywhere tries the pattern at every pipe of every row (quadratic in a row's cells). A match
    starts at the first pipe of its header line (any later pipe on the line has the same continuation),
    and that line is the one right before a separator cell: find those lines, then match there in order.
    """
    lines: set[int] = set()
    for m in _SEP_CELL.finditer(text, a, b):
        q = m.start()
        while q > a and text[q - 1] in _BLANK:
            q -= 1
        if q > a and q < m.start() and text[q - 1] == "|" and text[q] in "\r\n":
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
    fences = fenced_blocks(text)
    found: list[tuple[int, int, int]] = [(f.start, -f.end, FENCE_KIND) for f in fences if f.end > f.start]
    gaps = _gaps(fences, len(text)) if fences else [(0, len(text))]
    for kind, (pat, need) in enumerate(zip(_PATTERNS, _NEEDS, strict=True)):
        if pat is None or need not in text:
            continue
        if pat is TABLE_ROW and "|\n" not in text and "|\r" not in text:
            continue
        for a, b in gaps:
            if pat is TABLE_HEADER:
                _table_headers(text, a, b, found)
            elif pat is TABLE_ROW:
                _lead_spaces(pat, text, a, b, kind, found)
            else:
                found.extend((m.start(), -m.end(), kind) for m in pat.finditer(text, a, b))
    found.sort()
    starts: list[int] = []
    ends: list[int] = []
    headers: set[int] = set()
    last = 0
    for s, neg_e, kind in found:
        if s >= last:
            starts.append(s)
            ends.append(-neg_e)
            last = -neg_e
            if kind == HEADER_KIND:
                headers.add(s)
    return Spans(starts, ends, headers, fences)
