"""Differential tests of the profiler's line scan: the current profiler (whole-text regex passes) against
the frozen per-line one (profile_reference.py): line markers, headings, fences, tables, line statistics
and the whole DocProfile, on the corpus and generated text; and the rewritten tier helpers (Hierarchy,
heuristic boundaries) against their old forms.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import profile_reference as ref
import pytest
from chunker_helpers import commonmark_fences, corpus_texts
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chunker_properties import markdown

from chalicelib.chunker import ChunkingConfig, preview
from chalicelib.chunker.config import resolve
from chalicelib.chunker.lengths import CharMeasure
from chalicelib.chunker.profile import Lines, profile_document
from chalicelib.chunker.spans import find_spans
from chalicelib.chunker.tiers import Ctx, Hierarchy, _common_heading_prefix, _heuristic_bounds

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
CORPUS = corpus_texts()


def scan(text: str) -> tuple[Any, ...]:
    lines = Lines(text)
    n, avg, std, code = lines.line_stats()
    return (
        lines.fenced,
        lines.fenced_lines(),
        lines.markers(),
        lines.has_table(),
        n,
        avg,
        std,
        code,
        lines.counts(),
        lines.headings(),
        lines.blank_ends(),
    )


def reference_fenced(text: str) -> list[tuple[int, int]]:
    fences = [pos for pos, _ in ref.FENCE_LINE.finditer(text)]
    return [
        (fences[i], fences[i + 1] if i + 1 < len(fences) else len(text)) for i in range(0, len(fences), 2)
    ]


def reference_scan(text: str) -> tuple[Any, ...]:
    """The same figures from the frozen profiler (line indices turned into line starts)."""
    lines = ref.Lines(text)
    starts = lines.starts
    fenced = reference_fenced(text)
    markers = [(starts[ln], kind) for ln, kind in lines.markers()]
    has_table = bool(lines.matches(ref.TABLE_LINE))
    skip = {i for a, b in lines.fenced for i in range(a, b + 1)}
    kept = [float(x) for i, x in enumerate(lines.lens) if i not in skip]
    code = sum(sum(lines.lens[a + 1 : b]) for a, b in lines.fenced)
    counts = (text.count("\f"), text.count("\n\n\n"))
    heads = [(starts[ln], len(m.group(1)), m.group(2)) for ln, m in lines.matches(ref.HEADING)]
    blanks = [m.end() for m in ref.EXCESS_BLANKS.finditer(text)]
    # numpy's mean and std of the kept lengths as float64, to the bit (as the profiler took them once)
    arr = np.asarray(kept, dtype=np.float64)
    avg, std = (float(arr.mean()), float(arr.std())) if arr.size else (0.0, 0.0)
    return fenced, lines.fenced, markers, has_table, len(starts), avg, std, code, counts, heads, blanks


def check(text: str) -> None:
    """Compare with the frozen profiler where both see the same fenced blocks. The frozen one toggles on
    every line starting with ```; fences now follow CommonMark (tilde fences, indentation, closing-fence
    length, containers: test_chunker_fences.py), so texts where the two disagree are checked there."""
    expected = reference_scan(text)
    got = scan(text)
    if got[0] != expected[0]:
        assert [f[0] for f in got[0]] == [s for s, _ in commonmark_fences(text, closed_only=True)]
        return
    old = ref.profile_document(text).as_dict() if text else None
    assert got == expected
    if text:
        assert profile_document(text).as_dict() == old


# Line pieces around every marker pattern's edges: words, numerals, blanks, the case-folding runes
# (ſ, İ, ı), Unicode digits and spaces, length limits.
PIECES = st.sampled_from(
    ["Kapitel", "Abschnitt", "Teil", "Chapter", "Section", "Part", "Seite", "SEITE", "ſeite", "seİte", "seıte",
     "Page", "page", "PAGE", "页", "页码", "第", "章", "节", "節", "部分", "篇", "三", "〇", "von", "VON", "of", "/",
     "1", "12", "٣", "0", "I", "IV", "VIII", "XXXXXX", "V", ".", ":", ". ", ": ", " ", "  ", "\t", "\f", "\r",
     "\v", "\n\n", "\n\n\n\n", "\f\f", "\u3000", "\xa0", "-", "---", "=", "===", "*", "***", "_", "___", "#", "## ", "###", "#######", " #", "|", "| a |", "```",
     "ABC", "ÄÖÜ", "ABCD EFGH", "Abc", "x", "é", "中", "s", "p", "a" * 198, "A" * 78, "B" * 5, "\n", "\n", "\n"]
)  # fmt: skip
HEADS = st.sampled_from(
    ["Kapitel", "Abschnitt", "Teil", "Chapter", "Section", "Part", "Seite", "ſeite", "SeİTE", "seıte", "PaGe",
     "页", "页码", "第", "1", "IV", "٣", "ABCD", "Ä", "---", "***", "__", "=", "|", "```", "#"]
)  # fmt: skip
TAILS = st.sampled_from(
    [" ", "\t", "\f", "\r", "\v", "\xa0", "\u3000", "1", "12", "٣", "IV", "XXXXXX", "V", ".", ":", "von", "VoN",
     "of", "/", "#", "##", "三", "〇", "章", "部分", "部", "篇", "a" * 99, "x", "-", "=", "A", "ÄÖÜ", "B" * 40, ")", "😀", "|", "\n"]
)  # fmt: skip
# One line built like a marker (indentation, a marker's first word, then marker-ish pieces), in a text.
marker_line = st.tuples(st.sampled_from(["", " ", "\t", "  "]), HEADS, st.lists(TAILS, max_size=8)).map(
    lambda t: t[0] + t[1] + "".join(t[2])
)
lines_text = st.lists(st.one_of(PIECES, marker_line), min_size=0, max_size=40).map("".join)


@pytest.mark.parametrize("i", range(len(CORPUS)))
def test_corpus_scan_and_profile_match_the_reference(i: int) -> None:
    check(CORPUS[i][1])


@FAST
@given(text=lines_text)
def test_marker_soup_scans_like_the_reference(text: str) -> None:
    check(text)


@FAST
@given(md=markdown)
def test_random_markdown_profiles_like_the_reference(md: str) -> None:
    check(md)


@FAST
@given(md=markdown, fenced=st.booleans(), strategy=st.sampled_from(["heading", "heuristic", "auto"]))
def test_random_markdown_tier_diagnostics_are_identical(md: str, fenced: bool, strategy: str) -> None:
    md = md + "\n```\nopen fence" if fenced else md
    conf = ChunkingConfig(chunk_size=120, chunk_overlap=20, strategy=strategy)
    out = preview(md, conf, limit=10**6)
    if md and scan(md)[0] == reference_scan(md)[0]:
        assert out["diagnostics"]["profile"] in (None, ref.profile_document(md).as_dict())


@pytest.mark.slow
@SLOW
@given(text=lines_text)
def test_marker_soup_scans_like_the_reference_long(text: str) -> None:
    check(text)


@pytest.mark.parametrize(
    "text",
    ["", "\n", "```", "```\n", "a\n```", "```\na\nb", "```\na\n```\nb\n```\nc\nd", "|", " | ", "|x", "# H\n|a|",
     "Seite 3 von 4", "Page 3 / 4 x", "IIIIII. a", "1.2.3.4. x", "1.2.3.4.5 x", "1.2 " + "x" * 201,
     "第 三 章" + " " * 201, "ABC:", "ABCD   :", "A" + "B" * 85 + "   ", "A" + "B" * 79 + " :", "--- ", "---\t\f"]
)  # fmt: skip
def test_edge_cases_scan_like_the_reference(text: str) -> None:
    check(text)


# ---------------------------------------------------------------- tier helpers against their old forms


class OldHierarchy:
    """tiers.Hierarchy before the slice/loop rewrite."""

    def __init__(self) -> None:
        self.stack = [""] * 6
        self.depth = 0

    def observe(self, level: int, title: str) -> None:
        self.stack[level - 1] = title
        for i in range(level, 6):
            self.stack[i] = ""
        if level > self.depth:
            self.depth = level
        else:
            self.depth = max((i + 1 for i in range(6) if self.stack[i]), default=0)

    def breadcrumb(self) -> str:
        return "\n".join("#" * (i + 1) + " " + self.stack[i] for i in range(self.depth) if self.stack[i])


@FAST
@given(steps=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(["", "a", "b c", "Ü"])), max_size=30))
def test_hierarchy_matches_its_old_form(steps: list[tuple[int, str]]) -> None:
    new, old = Hierarchy(), OldHierarchy()
    for level, title in steps:
        new.observe(level, title)
        old.observe(level, title)
        assert (new.depth, new.stack, new.breadcrumb()) == (old.depth, old.stack, old.breadcrumb())
        assert new.copy().breadcrumb() == old.breadcrumb()


def old_heuristic_bounds(c: Ctx, a: int, lines: Any) -> list[int]:
    """tiers._heuristic_bounds before the set/merge-walk rewrite (priorities kept, then dropped)."""
    sub = lines.text
    prio: dict[int, int] = {}
    i = sub.find("\f")
    while i >= 0:
        prio[a + i] = 100
        i = sub.find("\f", i + 1)
    for ln, kind in lines.markers():
        pos = a + lines.starts[ln]
        pr = {"de": 85, "en": 85, "zh": 85, "num": 90, "caps": 70, "sep": 60, "foot": 50}[kind]
        if prio.get(pos, -1) < pr:
            prio[pos] = pr
    for mt in ref.EXCESS_BLANKS.finditer(sub):
        pos = a + mt.end()
        if pos not in prio:
            prio[pos] = 40
    return sorted(p for p in prio if not c.spans.strictly_inside(p))


@FAST
@given(md=markdown, soup=lines_text, cut=st.integers(0, 50))
def test_heuristic_bounds_match_their_old_form(md: str, soup: str, cut: int) -> None:
    text = soup + "\n\n\n" + md + "\n" + soup
    a = min(cut, len(text))
    c = Ctx(text, find_spans(text), resolve(ChunkingConfig(chunk_size=100)), CharMeasure(text))
    expected = old_heuristic_bounds(c, a, ref.Lines(text[a:]))
    lines = Lines(text[a:])
    if lines.fenced != reference_fenced(text[a:]):
        return  # the frozen form's fences are not CommonMark's (see check())
    assert _heuristic_bounds(c, a, len(text), lines) == expected


def old_common_heading_prefix(x: str, y: str) -> str:
    """tiers._common_heading_prefix before its whole-line fast path."""
    if x == y:
        return x
    lx, ly = x.split("\n"), y.split("\n")
    n = 0
    for p, q in zip(lx, ly, strict=False):
        if p != q:
            break
        n += 1
    return "\n".join(lx[:n]) if n else ""


crumb = st.lists(st.sampled_from(["# A", "## B", "## B2", "", "### C", "#"]), max_size=4).map("\n".join)


@FAST
@given(x=crumb, y=crumb)
def test_common_heading_prefix_matches_its_old_form(x: str, y: str) -> None:
    assert _common_heading_prefix(x, y) == old_common_heading_prefix(x, y)
    assert _common_heading_prefix(y, x) == old_common_heading_prefix(y, x)
