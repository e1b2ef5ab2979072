"""Protected Markdown spans that a chunk boundary must never cut (WeKnora `protectedPatterns`).

Each pattern is scanned on its own (C-speed `finditer`), then the union is resolved like WeKnora:
sorted by start, longer first on ties, greedily dropping overlaps.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

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
FENCE = re.compile(r"```[0-9A-Za-z_]*[\r\n].*?```", re.S)
INLINE_CODE = re.compile(r"`[^`\r\n]+`")

HEADER_KIND = 3
_PATTERNS = (MATH, IMAGE, LINK, TABLE_HEADER, TABLE_ROW, FENCE, INLINE_CODE)
# Cheap pre-checks: a pattern cannot match when its mandatory literal is absent.
_NEEDS = ("$$", "](", "](", "|", "|", "```", "`")
_HEADER_SEP = re.compile(r"\|" + _WS + r"*:?---")  # a header needs a separator cell


@dataclass
class Spans:
    """Sorted, non-overlapping protected spans of one text (absolute rune offsets)."""

    starts: list[int]
    ends: list[int]
    headers: set[int]  # starts of table header+separator spans

    def inside(self, pos: int) -> bool:
        """True when pos lies in [start, end) of a span."""
        i = bisect_right(self.starts, pos) - 1
        return i >= 0 and pos < self.ends[i]

    def strictly_inside(self, pos: int) -> bool:
        """True when a cut at pos would split a span (start < pos < end)."""
        i = bisect_right(self.starts, pos - 1) - 1
        return i >= 0 and pos < self.ends[i] and self.starts[i] < pos

    def within(self, a: int, b: int) -> list[tuple[int, int, bool]]:
        """Spans lying entirely inside [a, b), with a header flag."""
        i = bisect_right(self.starts, a - 1)
        out = []
        starts, ends, headers = self.starts, self.ends, self.headers
        while i < len(starts) and starts[i] < b:
            s, e = starts[i], ends[i]
            if s >= a and e <= b:
                out.append((s, e, s in headers))
            i += 1
        return out


def _lead_spaces(pat: re.Pattern[str], text: str, kind: int) -> list[tuple[int, int, int]]:
    out = []
    last = 0
    for m in pat.finditer(text):
        s, e = m.span()
        while s > last and text[s - 1] == " ":
            s -= 1
        out.append((s, -e, kind))
        last = e
    return out


def find_spans(text: str) -> Spans:
    found: list[tuple[int, int, int]] = []
    for kind, (pat, need) in enumerate(zip(_PATTERNS, _NEEDS, strict=True)):
        if need not in text:
            continue
        if kind == HEADER_KIND and not _HEADER_SEP.search(text):
            continue
        if pat is TABLE_ROW and "|\n" not in text and "|\r" not in text:
            continue
        if pat is TABLE_HEADER or pat is TABLE_ROW:
            found.extend(_lead_spaces(pat, text, kind))
        else:
            found.extend((m.start(), -m.end(), kind) for m in pat.finditer(text))
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
    return Spans(starts, ends, headers)
