"""HTML cleaned inside block quotes and list items keeps every line's container markers
(chalicelib/domain/markup.py).

The parser reads a block in a container without its `>` markers and the item's indentation, and the cleaned
block was written back as read: `> > <img src=x onerror=…>` came out as `<img src="x">` (out of both quotes),
a list item's HTML block lost its item and the lines after it their list, and a tag written over two quoted
lines made the cleaning escape the quote's `>` markers."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from chalicelib.domain.markup import strip_active_content

CASES = [
    # (text, cleaned exactly)
    ("> > <img src=x onerror=alert(1)>", '> > <img src="x">'),
    ("- <div onclick=x>hi</div>\n- next", "- <div>hi</div>\n- next"),
    ("- <div onclick=x>\n  hi\n  </div>\n- next", "- <div>\n  hi\n  </div>\n- next"),
    ("1. <div onclick=x>\n   hi\n   </div>\n2. two", "1. <div>\n   hi\n   </div>\n2. two"),
    ("> - <img src=x onerror=alert(1)>\n>   more\n> - two", '> - <img src="x">\n>   more\n> - two'),
    ("- > <div onclick=x>\n  > hi\n  > </div>\n- next", "- > <div>\n  > hi\n  > </div>\n- next"),
    # multi-line HTML blocks in a quote: a tag over two lines, a script taken out with its lines
    ("> <div onclick=x>\n> hi\n> </div>\n> after", "> <div>\n> hi\n> </div>\n> after"),
    ("> <div\n> onclick=x>\n> hi\n> </div>\n\nout", "> <div>\n> hi\n> </div>\n\nout"),
    ("> a\n>\n> <script>\n> alert(1)\n> </script>\n>\n> b", "> a\n>\n> \n>\n> b"),
    ("- <script>\n  alert(1)\n  </script>\n  next", "- \n  next"),
    # paragraphs: a tag over quoted lines, lazy continuation lines (no `>`, less indentation)
    ("> quote <img src=x\n> onerror=alert(1)> tail\n> more", '> quote <img src="x"> tail\n> more'),
    ("> a <img src=x\nonerror=alert(1)> b\n> c", '> a <img src="x"> b\n> c'),
    ("> a <img src=x\n> onerror=y>\nlazy b\n> # h", '> a <img src="x">\nlazy b\n> # h'),
    ("- a <b onclick=x>b</b>\nlazy <i onclick=y>i</i>\n- c", "- a <b>b</b>\nlazy <i>i</i>\n- c"),
    ("> # h <b onclick=x>b</b> ##", "> # h <b>b</b> ##"),
    # a tab across the item's indentation; `\r\n` line ends (read as a renderer reads them)
    ("- a\n\n\t<div\n\tonclick=x>\n\thi", "- a\n\n\t<div>\n\thi</div>"),
    ("> <div onclick=x>\r\n> hi\r\n> </div>\r\n", "> <div>\n> hi\n> </div>\n"),
]

_CONTAINERS = ("blockquote_", "bullet_list_", "ordered_list_", "list_item_")


def _containers(text: str) -> list[tuple[str, int]]:
    """The block quotes and lists a CommonMark renderer makes of `text`, in order, with their nesting."""
    tokens = MarkdownIt("commonmark", {"html": True}).parse(text)
    return [(t.type, t.level) for t in tokens if t.type.startswith(_CONTAINERS)]


class _Elements(HTMLParser):
    """The elements and attributes an HTML parser (as a browser's) finds in a text."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, [name for name, _ in attrs]))


def _active(markdown: str) -> list[str]:
    """Active elements and attributes in what a renderer passing raw HTML through makes of `markdown`."""
    parser = _Elements()
    parser.feed(MarkdownIt("commonmark", {"html": True}).render(markdown))
    parser.close()
    return [tag for tag, _ in parser.found if tag in ("script", "style", "iframe")] + [
        name for _, names in parser.found for name in names if name.startswith("on")
    ]


@pytest.mark.parametrize(("text", "cleaned"), CASES)
def test_html_in_a_container_is_cleaned_in_place(text: str, cleaned: str) -> None:
    out = strip_active_content(text)
    assert out == cleaned
    assert _containers(out) == _containers(text)
    assert _active(text) and not _active(out)
    assert strip_active_content(out) == out


def test_what_cannot_be_put_back_exactly_keeps_no_html() -> None:
    """nh3 drops the line end after `<pre>`: the block's lines can't all be placed behind their markers (a
    blank line of a list item has none), so the block keeps no HTML and its lines as written."""
    text = "- <pre onclick=x>\n\n  code\n  </pre>\n- next"
    out = strip_active_content(text)
    assert out == "- &lt;pre onclick=x>\n\n  code\n  &lt;/pre>\n- next"
    assert _containers(out) == _containers(text) and not _active(out)


# (the first line's markers, the markers of the lines after it) of one container or nested ones
_CHAINS = [
    ("> ", "> "),
    ("> > ", "> > "),
    ("- ", "  "),
    ("1. ", "   "),
    ("> - ", ">   "),
    ("- > ", "  > "),
    ("1. > ", "   > "),
    ("- ", "\t"),
]
_PIECES = [
    "<div onclick=x>", "</div>", "<img src=x onerror=y>", "<img src=x", "onerror=y>", "<b onclick=z>b</b>",
    "<script>", "alert(1)", "</script>", "<style>p{}</style>", "<!--", "-->", "<pre>", "</pre>", "text",
    "<a href='javascript:x'>a</a>", "<span", "onmouseover=m>", "# h", "`<b onclick=c>`", "w  ",
]  # fmt: skip
_LINE = st.lists(st.sampled_from(_PIECES), min_size=1, max_size=3).map(" ".join)


@given(
    st.sampled_from(_CHAINS),
    _LINE,
    st.lists(st.one_of(_LINE, st.just("")), max_size=8),
    st.sampled_from(["\n", "\r\n"]),
)
@settings(max_examples=400, deadline=None)
def test_every_line_keeps_its_container_markers(
    chain: tuple[str, str], first: str, rest: list[str], line_end: str
) -> None:
    opening, going_on = chain
    text = line_end.join([opening + first, *(going_on + line for line in rest)])
    out = strip_active_content(text)
    lines = out.split("\n")
    assert lines[0].startswith(opening), out
    assert all(line.startswith(going_on) for line in lines[1:]), out
    assert not _active(out), out


@pytest.mark.parametrize(
    "text",
    [
        "```\r\ncode\r\n```\r\n<img src=x onerror=alert(1)>\r\n",
        "```\r\ncode\r\n```\r\n\r\ntext <img src=x onerror=alert(1)>\r\n",
        "para\n\n\r<div> `<b onclick=c>`",
    ],
)
def test_html_after_a_line_a_renderer_ends_at_a_carriage_return_is_cleaned(text: str) -> None:
    r"""A renderer reads `\r\n` and `\r` as line ends; the cleaner's block parse read only `\n`, so "```\r" did
    not close a fence and what came after it in a `\r\n` text was left as code, active in a renderer."""
    out = strip_active_content(text)
    assert _active(text) and not _active(out), out
    assert "\r" not in out
