"""Document profiler and tier selection (WeKnora profiler.go / patterns.go / tokens.go).

Patterns run once over the whole text in multi-line mode (no per-line Python loop); `\\s` is spelled as
horizontal whitespace so a match can never run across a line break. The line-length statistics are read
from the line breaks a window of text at a time (`Lines.line_stats`), not from a list of every line.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any, NamedTuple

import numpy as np

from chalicelib.chunker.blocks import Fence, closed_fenced_blocks

_H = r"[ \t\f\r]"  # Go's \s minus the newline


class LinePattern:
    """A whole-line pattern. Python's `^` under re.M is tried at every position; anchoring on a literal
    newline instead lets the regex engine jump from line to line (about 10x faster)."""

    def __init__(self, body: str, flags: int = 0):
        self.first = re.compile(body, flags | re.M)
        self.rest = re.compile(r"\n" + body, flags | re.M)

    def finditer(self, text: str) -> Iterator[tuple[int, re.Match[str]]]:
        """(line start, match) for every line the pattern matches from its start."""
        m = self.first.match(text)
        if m:
            yield 0, m
        for m in self.rest.finditer(text):
            yield m.start() + 1, m


# `(#{1,6})H+(.+?)H*#*H*$` (WeKnora) backtracks cubically on a long run of blanks inside a heading line:
# match the line once and strip the closing #s in Python (`heading_title`).
HEADING = LinePattern(r"(#{1,6})" + _H + r"(.+)$")
NUMBERED = LinePattern(r"[ \t]*(?:\d+(?:\.\d+){1,3}\.?|(?:\d+|[IVX]{1,5})\.)[ \t]+\S.{0,200}$")
ALL_CAPS = LinePattern(r"[ \t]*(?:[A-ZÄÖÜ][A-ZÄÖÜ \-]{3,80}):?" + _H + r"*$")
VISUAL_SEP = LinePattern(r"[ \t]*(?:-{3,}|={3,}|\*{3,}|_{3,})[ \t]*$")
EXCESS_BLANKS = re.compile(r"\n\n\n+")  # == \n{3,}; the literal prefix makes the search fast
FOOTER = LinePattern(
    r"[ \t]*(?:Seite|Page|页码?)" + _H + r"+\d+(?:" + _H + r"*(?:von|of|/)" + _H + r"*\d+)?[ \t]*$", re.I
)
CHAPTER_DE = LinePattern(r"[ \t]*(?:Kapitel|Abschnitt|Teil)" + _H + r"+(?:[0-9]+|[IVX]{1,5})[\.: ].{0,200}$")
CHAPTER_EN = LinePattern(r"[ \t]*(?:Chapter|Section|Part)" + _H + r"+(?:[0-9]+|[IVX]{1,5})[\.: ].{0,200}$")
CHAPTER_ZH = LinePattern(
    r"[ \t]*第[ \t]*[一二三四五六七八九十百千零〇0-9]+[ \t]*(?:章|节|節|部分|篇)[ \t]?.{0,200}$"
)
# Every heuristic marker kind in one scan, in the heuristic tier's order of precedence.
MARKER_KINDS = ("de", "en", "zh", "num", "caps", "sep", "foot")
MARKERS = LinePattern(
    # Every kind starts with one of these runes after indentation: rejecting other lines up front makes
    # the scan ~3x faster (and keeps \d to ASCII digits, like Go).
    r"(?=[ \t]*[0-9IVXA-ZÄÖÜ\-=*_第页sp])(?:"
    + "|".join(
        f"(?P<{k}>{pat.first.pattern})"
        for k, pat in zip(
            MARKER_KINDS, (CHAPTER_DE, CHAPTER_EN, CHAPTER_ZH, NUMBERED, ALL_CAPS, VISUAL_SEP), strict=False
        )
    )
    + "|(?P<foot>(?i:"
    + FOOTER.first.pattern
    + ")))"
)
TABLE_LINE = LinePattern(r"[ \t\f\r\v]*\|(?:.*\|)?[ \t\f\r\v]*$")
# Runs, not single runes: the counts are the summed run lengths (fewer, larger matches).
_CJK = re.compile(
    r"[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+"
)
_LATIN = re.compile(r"[A-Za-zäöüÄÖÜß]+")
_UMLAUT = re.compile(r"[äöüÄÖÜß]")
_GERMAN_WORDS = (" der ", " die ", " das ", " und ", " ist ", " nicht ", " mit ", " auf ")

PRIO_FORM_FEED, PRIO_NUMBERED, PRIO_CHAPTER, PRIO_CAPS, PRIO_SEP, PRIO_FOOTER, PRIO_BLANKS = (
    100,
    90,
    85,
    70,
    60,
    50,
    40,
)


_BLANKS = " \t\f\r"  # _H's runes

#: Runes of text searched for line breaks at a time by `Lines.line_stats`.
STATS_WINDOW = 1 << 16
#: The largest part of a sum of squares that numpy adds up itself (see `_numpy_sum`).
_SUM_LEAF = 1 << 16
#: numpy adds up to this many values in one block (PW_BLOCKSIZE), halving only longer parts.
_NUMPY_BLOCK = 128


def _numpy_sum(n: int, take: Callable[[int], np.ndarray[Any, Any]]) -> float:
    """`np.add.reduce` of n float64 values that `take(k)` gives k at a time, in order, exactly (to the
    bit) as of one array of them, without that array: numpy adds a contiguous array pairwise, halving it
    (the first half a multiple of 8) down to 128 values, and a part of that tree adds up the same alone.
    (tests/chunker/test_chunker_memory.py holds this to numpy's own sums.)"""
    if n <= max(_SUM_LEAF, _NUMPY_BLOCK):
        return float(np.add.reduce(take(n)))
    half = n // 2
    half -= half % 8
    return _numpy_sum(half, take) + _numpy_sum(n - half, take)


def _line_lengths(text: str) -> Iterator[np.ndarray[Any, Any]]:
    """The lengths of the text's lines (without their line break), in order, as int64 arrays of at most
    STATS_WINDOW lines: from the line breaks of STATS_WINDOW runes at a time."""
    prev = -1  # the last line break before the window
    for w in range(0, len(text), STATS_WINDOW):
        seg = text[w : w + STATS_WINDOW]
        codes = (
            np.frombuffer(seg.encode("ascii"), np.uint8)
            if seg.isascii()
            else np.frombuffer(seg.encode("utf-32-le", "surrogatepass"), np.uint32)
        )
        breaks = np.flatnonzero(codes == 10)
        if breaks.size:
            breaks += w
            yield np.diff(breaks, prepend=prev) - 1
            prev = int(breaks[-1])
    yield np.array([len(text) - prev - 1], dtype=np.int64)


def heading_title(after_first_blank: str) -> str:
    """What WeKnora's heading pattern captures as the title, given the line after the hashes and one
    blank: the text without its leading blanks and without a closing `H*#*H*`, at least one rune."""
    rest = after_first_blank.lstrip(_BLANKS)
    if not rest:  # blanks only: the lazy title takes the last blank
        return after_first_blank[-1]
    body = rest.rstrip(_BLANKS).rstrip("#").rstrip(_BLANKS)
    return rest[: max(1, len(body))]


def detect_language(sample: str) -> str:
    if not sample:
        return "mixed"
    cjk = sum(map(len, _CJK.findall(sample)))
    latin = sum(map(len, _LATIN.findall(sample)))
    total = cjk + latin
    if total == 0:
        return "mixed"
    if cjk / total >= 0.15 and latin / total >= 0.15:
        return "mixed"
    if cjk / total > 0.3:
        return "zh"
    low = sample[:512].lower()
    if _UMLAUT.search(sample) or any(w in low for w in _GERMAN_WORDS):
        return "de"
    return "en"


class LineStats(NamedTuple):
    lines: int
    avg_len: float  # of the lines outside fences
    std_len: float
    code_chars: int  # in the lines inside fences, but for the fence lines


class Lines:
    """A text's fenced code blocks and its whole-line pattern matches, by line start offset.

    Fenced blocks are the closed CommonMark ones (`blocks.closed_fenced_blocks`, or `fences` already found
    in this text, where one cut by the end of the text counts as unclosed); lines from an opening fence to
    its closing fence (or to the end of the text when cut there) are skipped by `matches`.
    """

    def __init__(self, text: str, fences: list[Fence] | None = None):
        self.text = text
        self._markers: list[tuple[int, str]] | None = None
        self._headings: list[tuple[int, int, str]] | None = None
        self._has_table: bool | None = None
        self._stats: LineStats | None = None
        self._counts: tuple[int, int] | None = None
        self._blanks: list[int] | None = None
        if fences is None:
            fences = closed_fenced_blocks(text)
        # (opening fence line start, start of the block's last line, or len(text) when it is cut by the end
        # of the text and runs there: then the text's last line, even an empty one after a final newline)
        n = len(text)
        self.fenced: list[tuple[int, int]] = [
            (f.start, f.last_line if f.closed or f.end < n - 1 else n) for f in fences
        ]
        self._fstarts = [f[0] for f in self.fenced]

    def fenced_lines(self) -> list[tuple[int, int]]:
        """The fenced blocks as (first line index, last line index)."""
        out = []
        text = self.text
        last = text.count("\n")
        ln = prev = 0
        for a, b in self.fenced:
            ln += text.count("\n", prev, a)
            la = ln
            if b < len(text):
                ln += text.count("\n", a, b)
                prev = b
                out.append((la, ln))
            else:
                prev = a
                out.append((la, last))
        return out

    def markers(self) -> list[tuple[int, str]]:
        """(line start, marker kind) for lines outside fences, first matching kind per line."""
        if self._markers is None:
            self._markers = [(pos, m.lastgroup or "") for pos, m in self.matches(MARKERS)]
        return self._markers

    def has_table(self) -> bool:
        """Whether a line outside fences is a table row."""
        if self._has_table is None:
            self._has_table = next(self.iter_matches(TABLE_LINE), None) is not None
        return self._has_table

    def blank_ends(self) -> list[int]:
        """End of every run of three or more newlines (EXCESS_BLANKS matches), fences included."""
        if self._blanks is None:
            self._blanks = [m.end() for m in EXCESS_BLANKS.finditer(self.text)]
        return self._blanks

    def counts(self) -> tuple[int, int]:
        """(form feeds, non-overlapping blank paragraph breaks "\\n\\n\\n") in the text."""
        if self._counts is None:
            self._counts = (self.text.count("\f"), self.text.count("\n\n\n"))
        return self._counts

    def _kept_lengths(self, ranges: list[tuple[int, int]], code: list[int]) -> Iterator[np.ndarray[Any, Any]]:
        """The lengths of the lines outside the fenced `ranges` (line index pairs, in order), in order;
        adds the lengths of the lines strictly inside each range (code, not its fence lines) to code[0]."""
        base = first = 0  # the window's first line index; the first range that may still meet it
        for lens in _line_lengths(self.text):
            end = base + lens.size
            if first < len(ranges) and ranges[first][0] < end:
                keep = np.ones(lens.size, dtype=bool)
                i = first
                while i < len(ranges) and ranges[i][0] < end:
                    a, b = ranges[i]
                    keep[max(a, base) - base : min(b + 1, end) - base] = False
                    code[0] += int(lens[max(a + 1, base) - base : max(min(b, end) - base, 0)].sum())
                    i += 1
                while first < len(ranges) and ranges[first][1] < end:
                    first += 1
                lens = lens[keep]
            yield lens
            base = end

    def line_stats(self) -> LineStats:
        """The number of lines, the mean and standard deviation of the lengths of the lines outside fences
        (as numpy's mean and std of them as float64: 0.0 when there are none), and the code chars inside
        fences. Two passes over the line breaks, a window at a time: no list or array of every line."""
        if self._stats is None:
            ranges = self.fenced_lines() if self.fenced else []
            code = [0]
            kept = total = 0
            for lens in self._kept_lengths(ranges, code):
                kept += lens.size
                total += int(lens.sum())
            avg = std = 0.0
            if kept:
                # The float64 sum of whole numbers is exact (below 2**53) in any order: numpy's mean.
                avg = total / kept
                squares = (
                    np.square(lens.astype(np.float64) - avg) for lens in self._kept_lengths(ranges, [0])
                )
                part = np.empty(0)
                at = 0

                def take(n: int) -> np.ndarray[Any, Any]:
                    nonlocal part, at
                    got = []
                    while n:
                        if at == part.size:
                            part, at = next(squares), 0
                            continue
                        step = min(n, part.size - at)
                        got.append(part[at : at + step])
                        at += step
                        n -= step
                    return got[0] if len(got) == 1 else np.concatenate(got)

                std = float(np.sqrt(_numpy_sum(kept, take) / kept))  # numpy's std: mean squared deviation
            self._stats = LineStats(self.text.count("\n") + 1, avg, std, code[0])
        return self._stats

    def headings(self) -> list[tuple[int, int, str]]:
        """(line start, level, title as matched, unstripped) of the Markdown headings outside fences."""
        if self._headings is None:
            self._headings = [
                (pos, m.end(1) - m.start(1), heading_title(m.group(2))) for pos, m in self.matches(HEADING)
            ]
        return self._headings

    def in_fence(self, pos: int) -> bool:
        """Whether the line starting at `pos` is inside (or on) a fenced block."""
        i = bisect_right(self._fstarts, pos) - 1
        return i >= 0 and pos <= self.fenced[i][1]

    def iter_matches(self, pat: LinePattern) -> Iterator[tuple[int, re.Match[str]]]:
        if not self.fenced:
            return pat.finditer(self.text)
        in_fence = self.in_fence
        return ((pos, m) for pos, m in pat.finditer(self.text) if not in_fence(pos))

    def matches(self, pat: LinePattern) -> list[tuple[int, re.Match[str]]]:
        """(line start, match) for lines outside fenced code that the pattern matches."""
        return list(self.iter_matches(pat))


@dataclass
class DocProfile:
    total_chars: int = 0
    total_lines: int = 0
    avg_line_len: float = 0.0
    std_line_len: float = 0.0
    md_heading_counts: dict[int, int] = field(default_factory=dict)
    md_heading_total: int = 0
    numbered_section_count: int = 0
    all_caps_short_line_count: int = 0
    blank_paragraph_breaks: int = 0
    form_feed_count: int = 0
    visual_sep_count: int = 0
    german_chapter_count: int = 0
    english_chapter_count: int = 0
    chinese_chapter_count: int = 0
    repeated_footer_count: int = 0
    has_tables: bool = False
    has_code: bool = False
    code_ratio: float = 0.0
    detected_langs: list[str] = field(default_factory=list)

    def heading_density(self) -> float:
        return self.md_heading_total / self.total_lines if self.total_lines else 0.0

    def dominant_heading_level(self) -> int:
        if not self.md_heading_total:
            return 0
        for level in range(1, 7):
            if self.md_heading_counts.get(level, 0) >= 3:
                return level
        for level in range(6, 0, -1):
            if self.md_heading_counts.get(level, 0) > 0:
                return level
        return 0

    def heuristic_marker_total(self) -> int:
        return (
            self.numbered_section_count
            + self.german_chapter_count
            + self.english_chapter_count
            + self.chinese_chapter_count
            + self.all_caps_short_line_count
            + self.visual_sep_count
            + self.form_feed_count
        )

    def as_dict(self) -> dict[str, Any]:
        # What dataclasses.asdict gives (fields in order, containers copied), without its deep walk.
        d = {f: getattr(self, f) for f in _FIELDS}
        d["md_heading_counts"] = dict(self.md_heading_counts)
        d["detected_langs"] = list(self.detected_langs)
        d["heading_density"] = round(self.heading_density(), 6)
        d["dominant_heading_level"] = self.dominant_heading_level()
        d["heuristic_marker_total"] = self.heuristic_marker_total()
        return d


_FIELDS = tuple(f.name for f in fields(DocProfile))


def profile_document(text: str, lines: Lines | None = None) -> DocProfile:
    p = DocProfile()
    if not text:
        return p
    p.total_chars = len(text)
    if lines is None:
        lines = Lines(text)
    p.form_feed_count, p.blank_paragraph_breaks = lines.counts()
    p.total_lines, p.avg_line_len, p.std_line_len, code_chars = lines.line_stats()
    p.has_code = bool(lines.fenced)
    counts = p.md_heading_counts
    for _, level, _ in lines.headings():
        counts[level] = counts.get(level, 0) + 1
    p.md_heading_total = sum(counts.values())
    # Heading lines start with '#', marker and table lines never do: no line is counted twice.
    kinds = Counter(kind for _, kind in lines.markers())
    p.numbered_section_count = kinds["num"]
    p.german_chapter_count = kinds["de"]
    p.english_chapter_count = kinds["en"]
    p.chinese_chapter_count = kinds["zh"]
    p.all_caps_short_line_count = kinds["caps"]
    p.visual_sep_count = kinds["sep"]
    p.repeated_footer_count = kinds["foot"]
    p.has_tables = lines.has_table()
    p.code_ratio = code_chars / p.total_chars if p.total_chars else 0.0
    lang = detect_language(text[:4096])
    p.detected_langs = ["en", "de", "zh"] if lang == "mixed" else [lang]
    return p


def select_chain(p: DocProfile) -> list[str]:
    chain = []
    if p.md_heading_total >= 3 and p.heading_density() > 0.005 and p.dominant_heading_level() > 0:
        chain.append("heading")
    chapters = p.german_chapter_count + p.english_chapter_count + p.chinese_chapter_count
    if p.heuristic_marker_total() >= 5 or p.form_feed_count > 0 or chapters > 0:
        chain.append("heuristic")
    chain.append("recursive")
    return chain
