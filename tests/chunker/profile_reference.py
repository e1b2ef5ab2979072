"""Frozen copy of chalicelib/chunker/profile.py before the one-pass line scan (commit 27e8008): the
reference the profiler differential tests compare the current profiler against. Not used by the code."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from itertools import accumulate, repeat
from operator import add
from typing import Any

import numpy as np

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


HEADING = LinePattern(r"(#{1,6})" + _H + r"+(.+?)" + _H + r"*#*" + _H + r"*$")
NUMBERED = LinePattern(r"[ \t]*(?:\d+(?:\.\d+){1,3}\.?|(?:\d+|[IVX]{1,5})\.)[ \t]+\S.{0,200}$")
ALL_CAPS = LinePattern(r"[ \t]*(?:[A-ZÄÖÜ][A-ZÄÖÜ \-]{3,80}):?" + _H + r"*$")
VISUAL_SEP = LinePattern(r"[ \t]*(?:-{3,}|={3,}|\*{3,}|_{3,})[ \t]*$")
EXCESS_BLANKS = re.compile(r"\n{3,}")
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
FENCE_LINE = LinePattern(r"[ \t\f\r\v]*```")
_CJK = re.compile(
    r"[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
)
_LATIN = re.compile(r"[A-Za-zäöüÄÖÜß]")
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


def detect_language(sample: str) -> str:
    if not sample:
        return "mixed"
    cjk = len(_CJK.findall(sample))
    latin = len(_LATIN.findall(sample))
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


class Lines:
    """Line starts of a text and which lines sit inside (or on) fenced code blocks."""

    def __init__(self, text: str):
        self.text = text
        self.lens = list(map(len, text.split("\n")))
        starts = list(accumulate(map(add, self.lens, repeat(1)), initial=0))
        starts.pop()
        self.starts = starts
        # Fence lines toggle; lines from an opening fence to its closing fence are skipped.
        fences = [bisect_right(starts, pos) - 1 for pos, _ in FENCE_LINE.finditer(text)]
        self.fenced: list[tuple[int, int]] = []
        for i in range(0, len(fences), 2):
            self.fenced.append((fences[i], fences[i + 1] if i + 1 < len(fences) else len(starts) - 1))
        self._fstarts = [f[0] for f in self.fenced]

    _markers: list[tuple[int, str]] | None = None

    def markers(self) -> list[tuple[int, str]]:
        """(line index, marker kind) for lines outside fences, first matching kind per line."""
        if self._markers is None:
            self._markers = [(ln, m.lastgroup or "") for ln, m in self.matches(MARKERS)]
        return self._markers

    def line_of(self, pos: int) -> int:
        return bisect_right(self.starts, pos) - 1

    def in_fence(self, line: int) -> bool:
        i = bisect_right(self._fstarts, line) - 1
        return i >= 0 and line <= self.fenced[i][1]

    def matches(self, pat: LinePattern) -> list[tuple[int, re.Match[str]]]:
        """(line index, match) for lines outside fenced code that the pattern matches."""
        out = []
        fenced = self.fenced
        for pos, m in pat.finditer(self.text):
            ln = self.line_of(pos)
            if not fenced or not self.in_fence(ln):
                out.append((ln, m))
        return out


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
        d = asdict(self)
        d["heading_density"] = round(self.heading_density(), 6)
        d["dominant_heading_level"] = self.dominant_heading_level()
        d["heuristic_marker_total"] = self.heuristic_marker_total()
        return d


def profile_document(text: str, lines: Lines | None = None) -> DocProfile:
    p = DocProfile()
    if not text:
        return p
    p.total_chars = len(text)
    p.form_feed_count = text.count("\f")
    if lines is None:
        lines = Lines(text)
    n_lines = len(lines.starts)
    p.total_lines = n_lines
    lens = lines.lens
    code_chars = 0
    skip: set[int] = set()
    for a, b in lines.fenced:
        p.has_code = True
        skip.update(range(a, b + 1))
        code_chars += sum(lens[a + 1 : b])  # the fence lines themselves are not code
    kept = [ln for i, ln in enumerate(lens) if i not in skip] if skip else lens
    if kept:
        arr = np.asarray(kept, dtype=np.float64)
        p.avg_line_len = float(arr.mean())
        p.std_line_len = float(arr.std())
    heading_lines: set[int] = set()
    for ln, m in lines.matches(HEADING):
        level = len(m.group(1))
        p.md_heading_counts[level] = p.md_heading_counts.get(level, 0) + 1
        p.md_heading_total += 1
        heading_lines.add(ln)

    kinds = Counter(kind for ln, kind in lines.markers() if ln not in heading_lines)
    p.numbered_section_count = kinds["num"]
    p.german_chapter_count = kinds["de"]
    p.english_chapter_count = kinds["en"]
    p.chinese_chapter_count = kinds["zh"]
    p.all_caps_short_line_count = kinds["caps"]
    p.visual_sep_count = kinds["sep"]
    p.repeated_footer_count = kinds["foot"]
    p.has_tables = any(ln not in heading_lines for ln, _ in lines.matches(TABLE_LINE))
    p.code_ratio = code_chars / p.total_chars if p.total_chars else 0.0
    p.blank_paragraph_breaks = text.count("\n\n\n")
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
