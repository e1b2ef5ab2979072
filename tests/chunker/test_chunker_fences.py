"""Fenced code blocks follow CommonMark (spec 0.31.2, §4.5) and tables survive chunking (GFM 0.29, §4.10).

`spec_examples.json` holds the spec's own examples, written out from the CommonMark spec 0.31.2 and the
GFM spec 0.29 (both CC-BY-SA 4.0): Markdown in, expected HTML out. The fenced code contents in that HTML
are the oracle for how fences pair.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from chunker_helpers import check_chunks, commonmark_fences
from hypothesis import given, reject, settings
from hypothesis import strategies as st

from chalicelib.chunker import HARD_CAP, ChunkingConfig, split
from chalicelib.chunker import blocks as blocks_module
from chalicelib.chunker.blocks import fenced_blocks
from chalicelib.chunker.profile import profile_document
from chalicelib.chunker.spans import find_spans

SPEC = json.loads((Path(__file__).parent / "spec_examples.json").read_text(encoding="utf-8"))
FENCE_EXAMPLES = SPEC["commonmark_0.31.2_fenced_code_blocks"]
TABLE_EXAMPLES = SPEC["gfm_0.29_tables_extension"]
INDENTED_CODE = {134}  # "    ```": an indented code block, not a fence
_PRE = re.compile(r"<pre><code[^>]*>(.*?)</code></pre>", re.S)
_FENCE_OPEN = re.compile(r"( *)(`{3,}|~{3,})")


def _ids(examples: list[dict[str, object]]) -> list[str]:
    return [f"example-{e['example']}" for e in examples]


def fence_contents(md: str) -> list[str]:
    """What CommonMark renders inside each fenced block we found: the lines between the fences (to the end
    of the block when unclosed), without the container's `>` marker and the opening fence's indentation."""
    out = []
    for f in fenced_blocks(md):
        lines = md[f.start : f.end].split("\n")
        if lines[0].startswith(">"):
            lines = [ln[2:] if ln.startswith("> ") else ln[1:] for ln in lines]
        m = _FENCE_OPEN.match(lines[0])
        assert m, lines[0]
        indent = len(m.group(1))
        body = lines[1:-1] if f.closed else lines[1:]
        out.append("".join(ln[min(indent, len(ln) - len(ln.lstrip(" "))) :] + "\n" for ln in body))
    return out


@pytest.mark.parametrize("ex", FENCE_EXAMPLES, ids=_ids(FENCE_EXAMPLES))
def test_fences_pair_exactly_as_the_commonmark_spec_renders_them(ex: dict[str, object]) -> None:
    md, expected_html = str(ex["markdown"]), str(ex["html"])
    expected = [html.unescape(c) for c in _PRE.findall(expected_html)]
    if ex["example"] in INDENTED_CODE:
        expected = []
    assert fence_contents(md) == expected


@pytest.mark.parametrize("ex", FENCE_EXAMPLES, ids=_ids(FENCE_EXAMPLES))
@pytest.mark.parametrize("size", [8, 20, 60])
def test_the_chunker_never_cuts_inside_a_spec_fence(ex: dict[str, object], size: int) -> None:
    intro = "Intro line one.\nIntro line two.\n\n"
    md = intro + str(ex["markdown"]) + "\nAfter the example, a closing paragraph.\n"
    fences = commonmark_fences(md, closed_only=True)
    spans = find_spans(md)
    assert [(f.start, f.end) for f in spans.fences] == fences
    for s, e in fences:
        assert spans.inside(s) and not spans.strictly_inside(e)
    for strategy in ("recursive", "heading", "auto"):
        chunks = split(md, ChunkingConfig(chunk_size=size, chunk_overlap=size // 4, strategy=strategy))
        check_chunks(md, chunks)
        for c in chunks:
            for s, e in fences:
                assert not (s < c.start < e) and not (s < c.end < e), (strategy, c, md[s:e])


def test_a_fence_with_a_space_before_its_info_string_is_one_block_and_later_fences_still_pair() -> None:
    blocks = [
        "``` bash\n$ make install\n\n$ make test\n```",
        "``` screen\n# apt-get update\n\n# apt-get upgrade\n```",
        "~~~ python\nprint('tilde')\n\nprint('fence')\n~~~",
        "````md\n```\nnested looking\n```\n````",
        "```python\ndef f():\n\n    return 1\n```",
    ]
    prose = "Some explanation sentence here. " * 3
    md = "\n\n".join(f"{prose}\n\n{b}" for b in blocks) + "\n\n" + prose
    spans = find_spans(md)
    assert [md[f.start : f.end] for f in spans.fences] == blocks
    chunks = split(md, ChunkingConfig(chunk_size=120, chunk_overlap=20))
    check_chunks(md, chunks, overlap=20)
    for b in blocks:
        at = md.index(b)
        assert any(c.start <= at and at + len(b) <= c.end for c in chunks), b
    # The prose between the fences is not code: it is chunked like any text.
    assert profile_document(md).md_heading_total == 0
    assert any(c.content.strip().startswith("Some explanation") for c in chunks[1:])


def test_headings_inside_tilde_and_indented_fences_are_not_headings() -> None:
    md = "~~~\n# not\n# a\n# heading\n~~~\n\n  ```\n## nor this\n  ```\n\n# Real\n\ntext\n"
    p = profile_document(md)
    assert p.md_heading_total == 1 and p.has_code


def test_an_unclosed_fence_is_plain_text_as_in_weknora() -> None:
    """WeKnora's fence pattern needs a closing fence: one stray fence must not make the rest of the document
    one protected span (7,500-rune chunks) nor hide its headings from the heading tier."""
    body = "".join(f"## Section {i}\n\n" + f"Sentence about topic {i}. " * 30 + "\n\n" for i in range(40))
    md = "# Report\n\n```\n" + body
    assert [f.closed for f in fenced_blocks(md)] == [False]
    assert find_spans(md).fences == []
    assert profile_document(md).md_heading_total == 41 and not profile_document(md).has_code
    for strategy in ("recursive", "heading", "auto"):
        chunks = split(md, ChunkingConfig(chunk_size=512, chunk_overlap=80, strategy=strategy))
        check_chunks(md, chunks)
        assert max(len(c.content) for c in chunks) < 1000, strategy
    heading = split(md, ChunkingConfig(chunk_size=512, chunk_overlap=80, strategy="heading"))
    assert heading[-1].context_header == "# Report\n## Section 39"


def test_an_unclosed_fence_in_a_block_quote_ends_with_the_quote() -> None:
    md = "> ```\n> aaa\n\n" + "bbb paragraph after the quote.\n\n" * 20
    (fence,) = fenced_blocks(md)
    assert md[fence.start : fence.end] == "> ```\n> aaa" and not fence.closed
    chunks = split(md, ChunkingConfig(chunk_size=60, chunk_overlap=0))
    check_chunks(md, chunks)
    assert len(chunks) > 5  # the paragraphs after the quote are ordinary text


def test_a_fence_longer_than_the_hard_cap_is_split_near_line_breaks() -> None:
    code = "```\n" + "".join(f"row {i:05d} of a long listing\n" for i in range(600)) + "```"
    chunks = split(code, ChunkingConfig(chunk_size=512))
    assert len(code) > HARD_CAP and len(chunks) >= 2
    assert all(len(c.content) <= HARD_CAP for c in chunks)
    assert all(code[c.end - 1] in " \n" for c in chunks[:-1])


# ---------------------------------------------------------------- GFM table examples


def _line_bounds(md: str) -> set[int]:
    return (
        {0, len(md)}
        | {i + 1 for i, ch in enumerate(md) if ch == "\n"}
        | {i for i, ch in enumerate(md) if ch == "\n"}
    )


@pytest.mark.parametrize("ex", TABLE_EXAMPLES, ids=_ids(TABLE_EXAMPLES))
@pytest.mark.parametrize("size", [16, 40, 200])
def test_gfm_table_examples_keep_rows_whole_and_offsets_exact(ex: dict[str, object], size: int) -> None:
    md = "A table follows.\n\n" + str(ex["markdown"]) + "\nText after it.\n"
    longest = max(len(line) for line in md.split("\n"))
    chunks = split(md, ChunkingConfig(chunk_size=size, chunk_overlap=0))
    check_chunks(md, chunks)
    if size >= longest + 1:
        bounds = _line_bounds(md)
        assert all(c.start in bounds and c.end in bounds for c in chunks), "a table line was cut"


@pytest.mark.parametrize(
    "ex",
    [e for e in TABLE_EXAMPLES if str(e["markdown"]).startswith("| ") and "| --- |" in str(e["markdown"])],
)
def test_gfm_pipe_tables_repeat_their_header_once_per_chunk_when_split(ex: dict[str, object]) -> None:
    md = str(ex["markdown"])
    header = "\n".join(md.split("\n")[:2]) + "\n"
    cells = header.split("\n")[0].count("|") - 1
    rows = "".join("| " + " | ".join(f"r{i}c{j}" for j in range(cells)) + " |\n" for i in range(40))
    md = header + rows
    chunks = split(md, ChunkingConfig(chunk_size=len(header) + 60, chunk_overlap=0))
    check_chunks(md, chunks)
    assert len(chunks) > 3
    for c in chunks:
        assert c.content.count(header.split("\n")[0]) == 1, c.content
        assert len(c.content) <= len(header) + 60


# Lines built from container markers, indentation and fence-ish runs: lists, quotes, tildes, unclosed
# fences, fences closed by longer runs or with info strings, HTML blocks that swallow fences.
_PREFIX = st.sampled_from(["", " ", "   ", "    ", "> ", ">", "- ", "1. ", "  - ", "> - ", "* ", "\t"])
_BODY = st.sampled_from(
    ["```", "````", "~~~", "~~~~", "``` bash", "```py", "~~~ a ``` b", "``` a ` b", "``", "text", "# head",
     "<!--", "-->", "<pre>", "</pre>", "---", "| a | b |", ""]
)  # fmt: skip
fence_soup = st.lists(st.tuples(_PREFIX, _BODY).map("".join), max_size=30).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(text=fence_soup, trailing_newline=st.booleans())
def test_fenced_blocks_match_a_full_commonmark_parse(text: str, trailing_newline: bool) -> None:
    text += "\n" if trailing_newline else ""
    try:
        expected = commonmark_fences(text)
    except IndexError:  # markdown-it-py's own bug (StateBlock.getLines past the text: `> - <!--\n> `)
        reject()
    assert [(f.start, f.end) for f in fenced_blocks(text)] == expected


# Plain paragraph lines and blank lines too: the windowed parse restarts after blank lines, after closed
# top-level fences and on plain lines inside top-level paragraphs.
_LINE = st.one_of(
    st.tuples(_PREFIX, _BODY).map("".join),
    st.sampled_from(
        ["a", "b c", "中文", "", "", "[a]: /u 'ti", "tle'", "<x-tag>", "<pre>", "===", "\r", "a\r"]
    ),
)
windowed_soup = st.lists(_LINE, max_size=40).map("\n".join)


@settings(max_examples=300, deadline=None)
@given(
    text=windowed_soup, trailing=st.sampled_from(["", "\n", "\n  ", "\t"]), window=st.sampled_from([1, 3, 20])
)
def test_fenced_blocks_parsed_a_window_at_a_time_match_a_full_parse(
    text: str, trailing: str, window: int
) -> None:
    """Windows of a line or a few: every restart rule and the top-level closing-line search are crossed."""
    text += trailing
    try:
        expected = commonmark_fences(text)
        closed = commonmark_fences(text, closed_only=True)
    except IndexError:  # markdown-it-py's own bug, as above
        reject()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(blocks_module, "WINDOW", window)
        found = fenced_blocks(text)
    assert [(f.start, f.end) for f in found] == expected
    assert [(f.start, f.end) for f in found if f.closed] == closed
