"""Active content is cleaned from a big text a window at a time, with the output of a parse of the whole text.

`markup.strip_active_content` ran markdown-it over the whole text as soon as it held a `<` and anything
suspect: ~20 bytes a rune for paragraphs, ~100 for a list (its tokens and the parser's five lists a line),
GBs in the docreader Lambda for a big Markdown or HTML document with one `<script>` or `onclick=` anywhere.
It now parses windows restarting where a parse of the whole text is at a safe boundary (the chunker's
`markdown_windows.block_windows`), a paragraph cut by a window read on in the next one.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from chunker_helpers import peak_bytes, repeated
from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.domain import markup
from chalicelib.domain.markup import strip_active_content

#: big enough that a whole-text parse stands far above a window's (tracemalloc is slow)
RUNES = 300_000
SCRIPT_AT_THE_END = "\n<script>alert(1)</script>\n"


TEXTS: dict[str, Callable[[int], str]] = {
    "paragraphs": lambda runes: (
        repeated(lambda k: f"Paragraph {k} with *some* words and a [link](https://x.example/{k}).\n\n", runes)
        + SCRIPT_AT_THE_END
    ),
    "inline tags": lambda runes: (
        repeated(
            lambda k: f'Text <b>bold {k}</b> and <span class="c">s</span> <img src="a{k}.png">.\n\n', runes
        )
        + SCRIPT_AT_THE_END
    ),
    "bullet list": lambda runes: repeated(lambda k: f"- item <b>{k}</b>\n", runes) + SCRIPT_AT_THE_END,
    "block quote": lambda runes: repeated(lambda k: f"> quoted line {k}\n", runes) + SCRIPT_AT_THE_END,
    "html block": lambda runes: (
        "<div>\n" + repeated(lambda k: f"html line {k}\n", runes) + "</div>\n" + SCRIPT_AT_THE_END
    ),
}


@pytest.mark.parametrize(
    ("kind", "bound"),
    [("paragraphs", 2), ("inline tags", 2), ("bullet list", 6), ("block quote", 3), ("html block", 2)],
)
def test_a_big_text_with_one_script_is_cleaned_in_bounded_memory(kind: str, bound: int) -> None:
    """Traced peak in MB for 0.3 M runes before: 6.5 (paragraphs), 6.2 (inline tags), 29.7 (list), 5.3
    (quote), 5.2 (HTML block), growing with the text (5 M runes of paragraphs: 105); now the text out and a
    window's parse: 0.8, 0.7, 3.6, 2.0, 0.9."""
    text = TEXTS[kind](RUNES)
    peak, n = peak_bytes(lambda: len(strip_active_content(text)))
    assert n == len(text) - len("<script>alert(1)</script>\n")
    assert peak < bound * 1e6, f"{peak / 1e6:.1f} MB traced for {len(text) / 1e6:.1f} M runes"


def _whole_parse_once(text: str) -> str:
    """One pass as it was written before windows: a block parse of the whole text, each suspect block's lines
    replaced by its cleaned lines."""
    if "<" not in text or not markup._SUSPECT.search(text):
        return text
    lines = text.split("\n")
    replaced: dict[int, list[str]] = {}
    dropped: set[int] = set()
    for token in markup._block_parser().parse(text):
        if token.map is None:
            continue
        first, stop = token.map
        written = "\n".join(lines[first:stop])
        if token.type == "html_block" and markup._SUSPECT.search(token.content):
            replaced[first] = markup._cleaned_html(written, token.content)
        elif token.type == "inline" and "<" in token.content and markup._SUSPECT.search(token.content):
            replaced[first] = markup._cleaned_paragraph(written, token.meta.get("lines") or written)
        else:
            continue
        dropped.update(range(first + 1, stop))
    out: list[str] = []
    for index, line in enumerate(lines):
        if index in replaced:
            out.extend(replaced[index])
        elif index not in dropped:
            out.append(line)
    return "\n".join(out)


_SUSPECTS = [
    "<b onclick=x>b</b>", "<img src=x onerror=y>", "<script>s()</script>", "<script>", "</script>", "<span",
    "onclick=z>", "<a href='javascript:x'>a</a>", "<iframe src=u>", "<style>p{}</style>", "`<b onclick=c>`",
]  # fmt: skip
_BODIES = [
    "```", "~~~", "``` html", "text", "x y", "[r]: /u 'ti", "tle'", "[r]", "<div>", "<div onclick=d>", "</div>",
    "<!--", "-->", "<!-- <script> -->", "<pre>", "</pre>", "<script>", "</script>", "<style>", "</style>",
    "<textarea>", "</textarea>", "<?p", "?>", "<!X", "<![CDATA[", "]]>", "<x-t>", "<x-t onmouseover=m>",
    "</x-t>", "---", "===", "# h <b onclick=h>", "", "1 z", "a\r", "w  ", "\xa0w\xa0", "\x0cv", "w\\",
]  # fmt: skip
_MARKERS = ["- ", "* ", "1. ", "2) ", " - ", "-   "]
_QUOTES = [">", "> ", "> ", ">  ", " > ", ">\t", ">> ", "> - ", ""]
_INDENTS = ["", " ", "  ", "   ", "    ", "\t"]


def _line(r: random.Random) -> str:
    """A body line, often with inline HTML (suspect or not) before or after it."""
    body = r.choice(_BODIES)
    if r.random() < 0.35:
        tag = r.choice(_SUSPECTS)
        body = f"{body} {tag}" if r.random() < 0.5 else f"{tag} {body}"
    return body


def _soup(r: random.Random) -> str:
    """Lists whose items hold fences, HTML and blank lines; block quotes with long paragraphs, fences,
    reference definitions and blank quoted lines; HTML blocks of every kind; paragraphs; inline HTML in all."""
    lines: list[str] = []
    for _ in range(r.randint(1, 6)):
        kind = r.randrange(5)
        for _ in range(r.randint(2, 25)):
            if kind == 0:
                lines.append(r.choice(_MARKERS) + _line(r))
                lines += [r.choice(_INDENTS) + _line(r) for _ in range(r.randrange(4))]
            elif kind == 1:
                lines.append(r.choice(_QUOTES) + r.choice([_line(r), "w", "more words", "w", "[y]"]))
            elif kind == 2:
                lines.append(
                    r.choice(["<div>", "<!--", "<pre>", "<?x", "<!X", "<x-t>", "  <div>", "<script>"])
                )
                lines += [r.choice(_INDENTS[:3]) + _line(r) for _ in range(r.randrange(6))]
            elif kind == 3:
                lines += [
                    r.choice(["w", "words", "w  ", "w\\"]) + " " + _line(r) for _ in range(r.randrange(8))
                ]
            else:
                lines.append(r.choice(_INDENTS) + _line(r))
    return "\n".join(lines) + r.choice(["", "\n", "\n  ", "\n\n"])


@pytest.mark.parametrize("seed", range(6))
def test_a_text_cleaned_a_window_at_a_time_is_cleaned_as_a_whole_parse_cleans_it(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of a line, a few lines and more: every restart (a top-level block, a plain line of a
    paragraph, an item of a list, a block or line of a quote) and every HTML block followed to its end is
    crossed, with inline HTML around each."""
    r = random.Random(seed)
    checked = 0
    for _ in range(120):
        text = _soup(r)
        try:
            expected = _whole_parse_once(text)
        except IndexError:  # markdown-it-py's own bug (test_chunker_fences)
            continue
        checked += 1
        for window in (1, 4, 30):
            monkeypatch.setattr(markup, "WINDOW", window)
            assert markup._strip_once(text) == expected, (window, text)
    assert checked > 100


_CUT_PARAGRAPHS = [
    # a tag over two lines of a paragraph, cut between them; trailing and leading CommonMark spaces
    "w <img src=x  \nonerror=y> z\nmore\n",
    "w\xa0\n\xa0<b\nonclick=x>b</b>\nmore",
    "> quoted <img src=x\n> onerror=y> q\n> more\n",
    "> [a]: /url\n> 'title\n> <b onclick=t>\n> bar'\n> after <i onclick=u>i</i>\n",
    "w <span\nonclick=z>\nsetext <b onclick=s>\n===\n",
    "<div>\n<p onclick=p>\n</div>\n\nw <b onclick=b>\n",
]


@pytest.mark.parametrize("text", _CUT_PARAGRAPHS)
def test_a_paragraph_read_over_windows_is_cleaned_as_one(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _whole_parse_once(text)
    assert expected != text
    for window in range(1, len(text) + 2):
        monkeypatch.setattr(markup, "WINDOW", window)
        assert markup._strip_once(text) == expected, window
        assert strip_active_content(text) == strip_active_content(text + "")  # passes agree too


_PREFIXES = ["", "", "> ", ">", "- ", "  ", "1. ", "    ", "\t"]
_WORDS = ["w", "words", "w  ", "\xa0", "`", "``", "<b", "onclick=x>", "<img src=x onerror=y>", "</b>", "[r]: /u",
          "'t", "t'", "<div>", "<!--", "-->", "<script>", "</script>", "===", "---", "```", "\\"]  # fmt: skip


@given(
    st.lists(
        st.tuples(st.sampled_from(_PREFIXES), st.lists(st.sampled_from(_WORDS), max_size=4)),
        min_size=1,
        max_size=30,
    ),
    st.integers(min_value=1, max_value=40),
)
@settings(max_examples=300, deadline=None)
def test_any_window_cleans_as_a_whole_parse(lines: list[tuple[str, list[str]]], window: int) -> None:
    text = "\n".join(prefix + " ".join(words) for prefix, words in lines)
    try:
        expected = _whole_parse_once(text)
    except IndexError:  # markdown-it-py's own bug (test_chunker_fences)
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(markup, "WINDOW", window)
        assert markup._strip_once(text) == expected
