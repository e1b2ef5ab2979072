"""Active content out of Markdown: `<script>` and `<style>` elements, event-handler attributes (`onerror=`),
`javascript:` URLs and embedding tags in the raw HTML a Markdown text carries.

One implementation for every way text gets in: hand-written (manual) knowledge and the Markdown parsed from
uploaded or imported files (md, html, anything an engine turns into Markdown), so a chunk shown in a
WeKnora front end never runs a tenant's script.

Only the HTML of the Markdown is touched: markdown-it finds the HTML blocks and inline HTML tags exactly as
a CommonMark renderer would (code spans and fenced code stay as written, since a renderer escapes them), and
each fragment is cleaned by nh3 (the Ammonia sanitizer). A block in a block quote or a list item is read
without its `>` markers and indentation: its cleaned lines go back behind each line's own (`_put_back`).
Text without anything suspicious (`_SUSPECT`, which reads URLs as a browser decodes them) is returned as is
without parsing. The block parse runs a window of the text at a time (`markdown_windows`, as the chunker's),
with the blocks a parse of the whole text finds: that parse kept 20 (paragraphs) to 100 (a list) bytes a
rune, GBs for a big document with one `<script>` in it. A paragraph is still read whole when it is suspect
(its inline parse).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from html import entities as html_entities

import nh3
from markdown_it import MarkdownIt
from markdown_it.common import utils as markdown_it_utils
from markdown_it.rules_block import StateBlock
from markdown_it.token import Token

from chalicelib.domain.markdown_windows import OpenHtml, Parsed, block_windows


def _references(char: str) -> list[str]:
    """Patterns of the character references a browser decodes to `char` (either case of a letter) in an
    attribute value: decimal and hex with any leading zeros and no `;` needed, and the named ones."""
    codes = sorted({ord(char.lower()), ord(char.upper())})
    decimal = "|".join(str(code) for code in codes)
    hexadecimal = "|".join(f"{code:x}" for code in codes)
    named = [
        "&" + re.escape(name)
        for name, value in html_entities.html5.items()
        if value in (char.lower(), char.upper())
    ]
    return [rf"&#0*(?:{decimal})(?!\d);?", rf"&#x0*(?:{hexadecimal})(?![0-9a-f]);?", *named]


def _gap(chars: str) -> str:
    """A pattern for what a browser skips at a point of a URL (`chars`, written as such or as references),
    and a line end with the `>` markers and indentation after it, which a parser reading a block quote or a
    list item takes out of an attribute written over lines."""
    written = "".join(f"\\x{ord(char):02x}" for char in chars if char != "\n")
    references = [ref for char in chars for ref in _references(char)]
    return "(?:" + "|".join([f"[{written}]", r"\n[ \t>]*+", *references]) + ")*"


#: a URL parser drops tab and line ends anywhere; a data: URL's type may start after ASCII whitespace
_IN_URL = _gap("\t\n\r")
_BEFORE_TYPE = _gap("\t\n\r\f ")


def _as_read(word: str) -> str:
    """A pattern for `word` as a browser reads it in a URL attribute: each character written as itself or as a
    character reference, with what a URL parser drops between."""
    return _IN_URL.join("(?:" + "|".join([re.escape(char), *_references(char)]) + ")" for char in word)


#: anything that could be active: a quick test before parsing (most documents have none). It reads the raw
#: text as a browser decodes an attribute: a script URL's scheme written with references, tabs or line ends
#: in it (`&#106;avascript:`, `java&Tab;script:`) is one, and so is one written over a block quote's lines.
#: The lookahead of the characters an alternative starts with makes the scan several times faster.
_SUSPECT = re.compile(
    r"(?=[<oOjJvVdD&])(?:"
    r"<\s*/?\s*(?:script|style|iframe|frame|frameset|object|embed|applet|base|meta|link|form|svg|math)\b"
    r"|\bon[a-z]+(?:[^\S\n]|\n[ \t>]*+)*="
    + "".join(f"|{_as_read(scheme)}" for scheme in ("javascript:", "vbscript:"))
    + f"|{_as_read('data:')}{_BEFORE_TYPE}(?:"
    + "|".join(_as_read(kind) for kind in ("text/html", "application/xhtml", "image/svg"))
    + "))",
    re.IGNORECASE,
)
#: absolute URLs kept in attributes (relative ones always are); javascript:, vbscript: and data: are not
URL_SCHEMES = {"http", "https", "mailto", "tel", "ftp", "s3", "local", "mem"}

#: elements whose content goes with them (nh3's clean_content_tags)
_CONTENT_ELEMENT = re.compile(r"^<\s*(script|style)\b", re.IGNORECASE)
_CLOSING = re.compile(r"^</\s*([a-zA-Z][\w-]*)\s*>$")
_SPACES = re.compile(r"[ \t]*")
_LINE_END = re.compile(r"\r\n?")

_BLOCKS: MarkdownIt | None = None
_INLINE: MarkdownIt | None = None


def _block_parser() -> MarkdownIt:
    """Block structure only (fast, linear): HTML blocks, and the paragraphs that may hold inline HTML."""
    global _BLOCKS
    if _BLOCKS is None:
        md = MarkdownIt("commonmark")
        md.core.ruler.enableOnly(["block"])  # no normalisation: it would move line numbers
        for rule in md.block.ruler.__rules__:  # neither terminates another block (no `alt` to keep)
            if rule.name in ("paragraph", "lheading"):
                md.block.ruler.at(rule.name, _keeping_lines(rule.fn))
        _BLOCKS = md
    return _BLOCKS


def _keeping_lines(
    rule: Callable[[StateBlock, int, int, bool], bool],
) -> Callable[[StateBlock, int, int, bool], bool]:
    """The paragraph (setext heading) rule, keeping its lines as read untrimmed in its inline token's
    `meta["lines"]`: a paragraph that a window cuts is read in two windows, and its text is theirs joined."""

    def keeping(state: StateBlock, start: int, end: int, silent: bool) -> bool:
        pushed = len(state.tokens)
        if not rule(state, start, end, silent):
            return False
        for token in state.tokens[pushed:]:
            if token.type == "inline" and token.map:
                token.meta["lines"] = state.getLines(token.map[0], token.map[1], state.blkIndent, False)
        return True

    return keeping


def _inline_parser() -> MarkdownIt:
    """Inline rules, run only on a paragraph that looks suspicious (inline parsing is the slow part)."""
    global _INLINE
    if _INLINE is None:
        _INLINE = MarkdownIt("commonmark")
    return _INLINE


def clean_html(fragment: str) -> str:
    """One HTML fragment without scripts, styles, event handlers or script URLs (nh3, Ammonia's rules)."""
    return str(nh3.clean(fragment, url_schemes=URL_SCHEMES, link_rel=None))


def _clean_tag(tag: str) -> str:
    """One inline tag as written (`<span onclick=x>`, `</span>`): nh3 closes what it opens, so an opening
    tag comes back without the end tag nh3 adds."""
    closing = _CLOSING.match(tag)
    if closing:  # an end tag alone is dropped by an HTML sanitizer: keep it when its element is allowed
        name = closing.group(1).lower()
        return f"</{name}>" if name in nh3.ALLOWED_TAGS else ""
    cleaned = clean_html(tag)
    name = re.match(r"<\s*([a-zA-Z][\w-]*)", tag)
    if name and cleaned.endswith(f"</{name.group(1).lower()}>") and not tag.rstrip().endswith("/>"):
        cleaned = cleaned[: -len(f"</{name.group(1).lower()}>")]
    return cleaned


#: cleaning passes before a text that keeps changing loses every `<` (one pass takes a tag out and joins the
#: text either side, which can form a tag again: `<im<script></script>g onerror=…>`)
MAX_PASSES = 8


def strip_active_content(markdown: str) -> str:
    """`markdown` with the active content of its HTML removed; everything else stays as written. Cleaned
    again until a pass changes nothing, so what a pass joins is cleaned too. A text the parser cannot be
    trusted to read keeps no HTML at all: one still changing after MAX_PASSES (built to), one nested as
    deep as the parser reads (below it markdown-it emits nothing, and a renderer that nests deeper would
    show the HTML there), one that makes markdown-it-py fail (an IndexError of its own on some quoted lists
    holding an open comment)."""
    text = markdown
    if "\r" in text and "<" in text and _SUSPECT.search(text):
        # a renderer reads `\r\n` and `\r` as line ends (CommonMark's), the block parse here only `\n` (no
        # normalisation: it would move offsets): a fence closed by "```\r" ran on to the end of a `\r\n`
        # text there, and the HTML after it was left as code
        text = _LINE_END.sub("\n", text)
    try:
        for _ in range(MAX_PASSES):
            cleaned = _strip_once(text)
            if cleaned == text:
                return cleaned
            text = cleaned
    except (_TooDeep, IndexError):
        text = markdown
    return _without_html(text)


def _without_html(text: str) -> str:
    return text.replace("<", "&lt;")


class _TooDeep(Exception):
    """The parse reached markdown-it's nesting limit: what lies deeper was not read."""


#: a token at this level may hold content the parser did not read (commonmark's maxNesting is 20)
_DEEPEST = 20 - 1


def _read_whole(tokens: list[Token]) -> list[Token]:
    if any(token.level >= _DEEPEST for token in tokens):
        raise _TooDeep
    return tokens


#: how markdown-it trims a paragraph's text: CommonMark's whitespace from markdown-it-py 4 on, str.strip before
_trim: Callable[[str], str] = getattr(markdown_it_utils, "mdTrim", str.strip)

#: runes of text per block parse (markdown_windows): a parse of the whole text kept ~100 bytes a rune
WINDOW = 1 << 14


def _strip_once(markdown: str) -> str:
    """One cleaning pass: the HTML blocks and the paragraphs (headings) of the text found by a CommonMark block
    parse a window at a time (`block_windows`: the tokens of a parse of the whole text), each suspect one
    cleaned; the text between them is copied as written."""
    if "<" not in markdown or not _SUSPECT.search(markdown):
        return markdown
    out = _Output(markdown)
    pending: _Paragraph | None = None  # a paragraph going on past a window's end
    for part in block_windows(markdown, _block_parser(), WINDOW, len(markdown)):
        if isinstance(part, OpenHtml):  # a top-level HTML block followed to its end
            stop = part.after if part.after is not None else _after_the_last_line(markdown)
            content = markdown[part.start : stop]
            if _SUSPECT.search(content):  # read as written (at the top level)
                out.replace(part.start, stop, _cleaned_html(markdown[part.start : stop - 1], content))
            continue
        if not isinstance(part, Parsed):
            continue
        for token in _read_whole(part.tokens):
            if token.map is None or token.map[0] >= part.keep:
                continue
            first, stop = token.map
            start = part.base + part.starts[first]
            if token.type == "html_block" and _SUSPECT.search(token.content):
                end = part.base + part.starts[stop]
                out.replace(start, end, _cleaned_html(markdown[start : end - 1], token.content))
            elif token.type == "inline":
                content = token.content
                # a paragraph's lines as the parser read them (container markers out), untrimmed; an ATX
                # heading has none: its one line holds its text as written
                read: str = token.meta.get("lines", "")
                if (pending is not None and first == 0) or stop > part.keep:  # only paragraphs are cut
                    if stop > part.keep:  # it goes on in the next window: its lines before the cut
                        rest = read.split("\n", part.keep - first)[-1]
                        read = read[: len(read) - len(rest) - 1]
                    if pending is not None:  # the paragraph the last window cut goes on here
                        start = pending.start
                        pending.pieces.append(read)
                    else:
                        pending = _Paragraph(start, [read])
                    if stop > part.keep:
                        continue
                    # its text only when it may be suspect (a long quote is one paragraph)
                    content = ""
                    if any("<" in p for p in pending.pieces):
                        read = "\n".join(pending.pieces)
                        content = _trim(read)
                    pending = None
                if "<" in content and _SUSPECT.search(content):
                    end = part.base + part.starts[stop]
                    written = markdown[start : end - 1]
                    out.replace(start, end, _cleaned_paragraph(written, read or written))
    return out.text()


def _after_the_last_line(text: str) -> int:
    """Offset of the line after the last one the parser counts: not a final line of only spaces and tabs
    (or empty), which a block running to the end of the text leaves out."""
    nl = text.rfind("\n")
    return nl + 1 if _SPACES.fullmatch(text, nl + 1) else len(text) + 1


@dataclass(slots=True)
class _Paragraph:
    start: int  # offset of its first line
    pieces: list[str]  # its lines as read in each window (container markers out), untrimmed


class _Output:
    """The cleaned text, written in order: lines replaced, and the lines between copied as written (the text's
    lines joined by newlines, as `str.split` and `str.join` see them)."""

    def __init__(self, text: str) -> None:
        self.source = text
        self.parts: list[str] = []
        self.cursor = 0  # offset of the first line not written yet

    def replace(self, start: int, stop: int, lines: list[str]) -> None:
        """The lines from offset `start` to the line starting at `stop` become `lines`."""
        if start > self.cursor:
            self.parts.append(self.source[self.cursor : start - 1])
        if lines:
            self.parts.append("\n".join(lines))
        self.cursor = stop

    def text(self) -> str:
        if not self.parts and self.cursor == 0:  # nothing replaced: no copy of a big text
            return self.source
        if self.cursor <= len(self.source):
            self.parts.append(self.source[self.cursor :])
        return "\n".join(self.parts)


def _cleaned_lines(html: str) -> list[str]:
    cleaned = clean_html(html.rstrip("\n"))
    return cleaned.split("\n") if cleaned else []


def _cleaned_html(written: str, read: str) -> list[str]:
    """The lines of an HTML block (`written`) cleaned by nh3 (`read`: its lines as the parser read them,
    ending with a line end unless the text does)."""
    return _put_back(written, read.removesuffix("\n"), _html_lines)


def _html_lines(html: str) -> tuple[list[str], list[int]]:
    """What nh3 leaves of a block goes on its lines in order: the lines it joins (a tag or a script over
    lines) go from the block's end."""
    lines = _cleaned_lines(html)
    last = html.count("\n")
    return lines, [min(i, last) for i in range(len(lines))]


def _cleaned_paragraph(written: str, read: str) -> list[str]:
    """The lines of a paragraph or heading (`written`) with its inline HTML tags cleaned (`read`: its lines as
    the parser read them, untrimmed)."""
    return _put_back(written, read, _inline_lines)


def _inline_lines(text: str) -> tuple[list[str], list[int]]:
    parsed = _inline_parser().parseInline(_trim(text))  # the paragraph's text, as the parser has it
    return _clean_inline(text, _read_whole(parsed[0].children or []) if parsed else [])


def _put_back(written: str, read: str, clean: Callable[[str], tuple[list[str], list[int]]]) -> list[str]:
    """A block's lines (`written`) cleaned by `clean` (its lines, and the line each starts on) from its text as
    the parser read it, each line behind the container markers of the written line it starts on: the parser
    read a block in a block quote or a list item without them, and a line without its `>` or its
    indentation leaves the container. What can't be put back exactly keeps no HTML (the last resort of
    `strip_active_content`, for the block: the next pass reads what that makes of it)."""
    margins = _margins(written.split("\n"), read.split("\n"))
    if margins is not None:
        placed = _placed(margins, *clean(read))
        if placed is not None:
            return placed
    return _without_html(written).split("\n")


@dataclass(frozen=True, slots=True)
class _Margin:
    """A line as the parser read it, and what it has before that as written."""

    prefix: str  # the markers of its containers (`> `, a list item's marker or indentation)
    spaces: int  # the columns of a tab ending `prefix` past a list item's indentation, read as spaces
    text: str  # as read


def _margins(written: list[str], read: list[str]) -> list[_Margin] | None:
    """Each line's margin, from the line as written and as the parser read it (the end of the written one,
    or after a tab that a list item's indentation cuts, the spaces for the rest of the tab and the text
    after it); None when a line is neither."""
    if len(written) != len(read):
        return None
    margins = []
    for line, text in zip(written, read, strict=True):
        for spaces in range(4):  # a tab is at most four columns: at most three left past an indentation
            rest = text[spaces:]
            cut = len(line) - len(rest)
            if (
                text[:spaces] == " " * spaces
                and cut >= 0
                and line.endswith(rest)
                and (spaces == 0 or (cut > 0 and line[cut - 1] == "\t"))
            ):
                margins.append(_Margin(line[:cut], spaces, text))
                break
        else:
            return None
    return margins


def _placed(margins: list[_Margin], lines: list[str], origins: list[int]) -> list[str] | None:
    """The cleaned `lines` each in the margin of the line it starts on (`origins`). The block's lines that
    none starts on go, as a top-level block's always did, and so do the lines the cleaning emptied (a blank
    line would end a paragraph, and a block quote before a lazy line), but the first one's markers, which
    open the block's containers (`- ` alone is still the item). None when a line can't be put there exactly:
    behind the first line's markers again (a new item), on a line read blank (a list item's blank line has
    no indentation to carry the item), or without the spaces its tab was read as."""
    first = margins[0]
    placed: list[str] = []
    opened = False  # a line is behind the first line's markers
    for line, origin in zip(lines, origins, strict=True):
        margin = margins[origin]
        blank = not line.strip(" \t")
        if blank and margin.text.strip(" \t"):
            continue
        if first.prefix and ((placed and origin == 0) or (not blank and not margin.text.strip(" \t"))):
            return None
        if line[: margin.spaces] != " " * margin.spaces:
            return None
        placed.append(margin.prefix + line[margin.spaces :])
        opened = opened or origin == 0
    return placed if opened or not first.prefix else [first.prefix, *placed]


def _clean_inline(text: str, children: list[Token]) -> tuple[list[str], list[int]]:
    """The lines of a paragraph's text as the parser read it (`text`) with its inline HTML tags cleaned in
    source order, a `<script>` or `<style>` element written inline going with its content up to its end
    tag; and the line of `text` each starts on: the text after a tag taken out over lines goes on the line
    the tag starts on, so every other line starts as it did (and reads as the same block) behind its own
    container markers."""
    tags = [child.content for child in children if child.type == "html_inline"]
    spans: list[tuple[int, int]] = []  # where each tag is in the text
    cursor = 0
    for tag in tags:
        at = text.find(tag, cursor)
        if at < 0:  # not as read (the inline parse reads NUL as U+FFFD): clean it all as HTML
            lines = clean_html(text).split("\n")
            last = text.count("\n")
            return lines, [min(i, last) for i in range(len(lines))]
        spans.append((at, at + len(tag)))
        cursor = at + len(tag)
    out: list[str] = []
    origins = [0]
    row = 0  # the line of `text` at `cursor`

    def put(written: str, cleaned: str) -> None:
        """`cleaned` for `written`: a line end it keeps starts the line after, one it drops joins them."""
        nonlocal row
        ends = written.count("\n")
        origins.extend(min(row + k, row + ends) for k in range(1, cleaned.count("\n") + 1))
        row += ends
        out.append(cleaned)

    cursor = 0
    index = 0
    while index < len(tags):
        start, end = spans[index]
        put(text[cursor:start], text[cursor:start])
        element = _CONTENT_ELEMENT.match(tags[index])
        cleaned = ""
        if element:  # drop through the matching end tag (or the tag alone when it is never closed)
            name = element.group(1).lower()
            close = next(
                (j for j in range(index + 1, len(tags)) if re.match(rf"</\s*{name}\s*>", tags[j], re.I)),
                None,
            )
            if close is not None:
                end = spans[close][1]
                index = close
        else:
            cleaned = _clean_tag(tags[index])
        put(text[start:end], cleaned)
        cursor = end
        index += 1
    put(text[cursor:], text[cursor:])
    return "".join(out).split("\n"), origins
