"""Script URLs written as a browser decodes them (chalicelib/domain/markup.py): a browser decodes the character
references of an attribute value and its URL parser drops tab and line ends, so `&#106;avascript:`,
`javascript&colon;` and `java<TAB>script:` are `javascript:` URLs. The quick pre-filter (`_SUSPECT`) read the
raw text and let them through as written, nh3 never saw them. Each cleaned text is rendered by markdown-it
(HTML on) and every attribute of the output read as a browser would."""

from __future__ import annotations

import re
from html import unescape
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from chalicelib.domain.markup import strip_active_content

_RENDERERS = [MarkdownIt("commonmark", {"html": True}), MarkdownIt("default", {"html": True})]
#: what a URL parser drops anywhere (tab, LF, CR) and before the URL (C0 controls and space)
_DROPPED = re.compile(r"[\t\n\r]")
_LEADING = "".join(chr(c) for c in range(0x21))
_ACTIVE_DATA = re.compile(r"data:[\t\n\f\r ]*(?:text/html|application/xhtml|image/svg)")


def _active(url: str) -> bool:
    """Whether an attribute value (already decoded) is a URL that runs script."""
    url = _DROPPED.sub("", url).lstrip(_LEADING).lower()
    return url.startswith(("javascript:", "vbscript:")) or bool(_ACTIVE_DATA.match(url))


class _Attributes(HTMLParser):
    """Every attribute of every start tag, its value decoded (`convert_charrefs`: `html.unescape`)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [(name, value or "") for name, value in attrs]


def _dangers(markdown: str) -> list[tuple[str, str]]:
    """The script URLs and event handlers of `markdown` as rendered, by each renderer."""
    found = []
    for md in _RENDERERS:
        parser = _Attributes()
        parser.feed(md.render(markdown))
        parser.close()
        found += [(n, v) for n, v in parser.found if _active(v) or n.lower().startswith("on")]
    return found


SCHEMES = [
    "&#106;avascript:alert(1)",
    "javascript&colon;alert(1)",
    "java&Tab;script:alert(1)",
    "jav&#x09;ascript:alert(1)",
    "java\tscript:alert(1)",
    "java\nscript:alert(1)",
    "java\r\nscript:alert(1)",
    "JAVASCRIPT:alert(1)",
    "JaVaScRiPt&#X3A;alert(1)",
    "&#0000106;avascript:alert(1)",
    "&#106avascript:alert(1)",  # no semicolon: still decoded
    "&#x6A&#x61vascript:alert(1)",
    "&#x0006a;&#X41;vascript&#58alert(1)",
    "&#74;&#65;&#86;&#65;&#83;&#67;&#82;&#73;&#80;&#84;&#58;alert(1)",
    "j&NewLine;a&#10;v&#13;a&#x0D;s\tc\nr&Tab;i&#9p&#x9t:alert(1)",
    " \x01&#106;avascript:alert(1)",  # leading space and control: dropped by the URL parser
    "vbscript:msgbox(1)",
    "vb&#115;cript:msgbox(1)",
    "v&Tab;bscript&colon;msgbox(1)",
    "data:text/html,<script>alert(1)</script>",
    "data&colon;text&sol;html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==",
    "&#100;ata: text/html,x",
    "da\tta:\ttext/html,x",
    "data:image/svg+xml,<svg onload=alert(1)>",
    "data:application/xhtml+xml,x",
]

TEMPLATES = [
    '<a href="{url}">x</a>',
    'Text <a href="{url}">x</a> end.',
    "See <a href='{url}'>this</a>.",
    '<div>\n<a href="{url}">x</a>\n</div>',
    '- item <img src="{url}">',
    '> quote <a href="{url}">x</a>',
    '# Heading <a href="{url}">x</a>',
    '1. <button formaction="{url}">x</button>',
    '<table background="{url}"><tr><td>x</td></tr></table>',
    'x <video poster="{url}"></video>',
]


def _written(template: str, url: str) -> str:
    """`url` in `template`, a line end in it going on in the template's block quote or list item."""
    if template.startswith(">"):
        url = url.replace("\n", "\n> ")
    elif template.startswith(("- ", "1. ")):  # the item's content column
        url = url.replace("\n", "\n" + " " * (template.index(" ") + 1))
    return template.format(url=url)


@pytest.mark.parametrize("url", SCHEMES)
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_script_url_written_with_references_or_tabs_is_removed(template: str, url: str) -> None:
    text = _written(template, url)
    # the case is an attack as written (a line end ends a heading: no tag there)
    if not ("\n" in url and template.startswith("#")) and not any(q in url for q in "\"'<"):
        assert _dangers(text), text
    cleaned = strip_active_content(text)
    assert not _dangers(cleaned), (text, cleaned)


@pytest.mark.parametrize(
    "text",
    [
        "<a href=&#106;avascript:alert(1)>unquoted</a>",
        '> <a href="java\n> script:alert(1)">over a quote\'s lines</a>',
        '> > x <a href="jav\n> > &#x61;script:alert(1)">nested</a>',
        '- x <a href="java\n  script:alert(1)">over an item\'s lines</a>',
        "> <img src=x onerror\n> =alert(1)>",  # a handler whose `=` is on the next line of a quote
        "- <img src=x onload\n  =alert(1)>",
        '\t<a href="&#106;avascript:alert(1)">x</a>\n\nafter',  # indented code: stays text
    ],
)
def test_active_content_over_container_lines_is_removed(text: str) -> None:
    cleaned = strip_active_content(text)
    assert not _dangers(cleaned), (text, cleaned)


@pytest.mark.parametrize(
    "text",
    [
        "# Plain\n\nJava script: the language, and data: text/html, and on = off. a < b & c > d.",
        "Values only >= 0 <b>here</b>, j&amp;a < vascript: x",
        'Text <b>bold</b> <a href="https://x.example/?a=1&amp;b=2">l</a> &copy; &#169; <img src="a.png">',
        '> quote <span title="java">x</span>\n> script: not a URL',
    ],
)
def test_text_without_script_urls_is_kept_as_written(text: str) -> None:
    assert strip_active_content(text) == text


#: ways a browser reads each character of a scheme: itself in either case, decimal or hex references with
#: leading zeros, with or without `;`
def _encodings(char: str) -> st.SearchStrategy[str]:
    cases = sorted({char.lower(), char.upper()})
    decimal = st.builds(
        lambda c, zeros, semi: "&#" + "0" * zeros + str(ord(c)) + (";" if semi else ""),
        st.sampled_from(cases),
        st.integers(0, 3),
        st.booleans(),
    )
    hexadecimal = st.builds(
        lambda c, x, zeros, upper, semi: (
            "&#" + x + "0" * zeros + (f"{ord(c):X}" if upper else f"{ord(c):x}") + (";" if semi else "")
        ),
        st.sampled_from(cases),
        st.sampled_from(["x", "X"]),
        st.integers(0, 3),
        st.booleans(),
        st.booleans(),
    )
    named = ["&colon;"] if char == ":" else cases
    return st.one_of(st.sampled_from(cases), decimal, hexadecimal, st.sampled_from(named))


#: what may come between: nothing mostly, or tab and line ends as such or as references (`;` optional)
_GAPS = st.sampled_from(["", "", "", "\t", "\n", "&Tab;", "&NewLine;", "&#9;", "&#x0A;", "&#13", "&#x0009;"])


@st.composite
def _scheme(draw: st.DrawFn) -> str:
    word = draw(st.sampled_from(["javascript:", "vbscript:"]))
    pieces: list[str] = []
    for i, char in enumerate(word):
        piece = draw(_encodings(char))
        # a hex reference without `;` runs on through the hex digits after it (`&#x6Aa` is U+06AA)
        following = word[i + 1] if i + 1 < len(word) else "a"  # of alert(1)
        if piece[:3].lower() == "&#x" and not piece.endswith(";") and following in "abcdef":
            piece += ";"
        if i + 1 < len(word):
            piece += draw(_GAPS)
        pieces.append(piece)
    return "".join(pieces) + "alert(1)"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(url=_scheme(), template=st.sampled_from(TEMPLATES))
def test_no_encoding_of_a_script_scheme_survives(url: str, template: str) -> None:
    if "\n" in url and template.startswith("#"):
        template = TEMPLATES[0]  # a line end ends a heading
    text = _written(template, url)
    assert _dangers(text), text  # the generated text is an attack as a browser reads it
    assert _active(unescape(url))
    cleaned = strip_active_content(text)
    assert not _dangers(cleaned), (text, cleaned)
