"""Active content out of Markdown: `<script>` and `<style>` elements, event-handler attributes (`onerror=`),
`javascript:` URLs and embedding tags in the raw HTML a Markdown text carries.

One implementation for every way text gets in: hand-written (manual) knowledge and the Markdown parsed from
uploaded or imported files (md, html, anything an engine turns into Markdown), so a chunk shown in a
WeKnora front end never runs a tenant's script.

Only the HTML of the Markdown is touched: markdown-it finds the HTML blocks and inline HTML tags exactly as
a CommonMark renderer would (code spans and fenced code stay as written, since a renderer escapes them), and
each fragment is cleaned by nh3 (the Ammonia sanitizer). Text without anything suspicious is returned as is
without parsing. The block parse runs a window of the text at a time (`markdown_windows`, as the chunker's),
with the blocks a parse of the whole text finds: that parse kept 20 (paragraphs) to 100 (a list) bytes a
rune, GBs for a big document with one `<script>` in it. A paragraph is still read whole when it is suspect
(its inline parse).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import nh3
from markdown_it import MarkdownIt
from markdown_it.common import utils as markdown_it_utils
from markdown_it.rules_block import StateBlock
from markdown_it.token import Token

from chalicelib.domain.markdown_windows import OpenHtml, Parsed, block_windows

#: anything that could be active: a quick test before parsing (most documents have none)
_SUSPECT = re.compile(
    r"<\s*/?\s*(?:script|style|iframe|frame|frameset|object|embed|applet|base|meta|link|form|svg|math)\b"
    r"|\bon[a-z]+\s*="
    r"|(?:java|vb)script\s*:"
    r"|data\s*:\s*text/html",
    re.IGNORECASE,
)
#: absolute URLs kept in attributes (relative ones always are); javascript:, vbscript: and data: are not
URL_SCHEMES = {"http", "https", "mailto", "tel", "ftp", "s3", "local", "mem"}

#: elements whose content goes with them (nh3's clean_content_tags)
_CONTENT_ELEMENT = re.compile(r"^<\s*(script|style)\b", re.IGNORECASE)
_CLOSING = re.compile(r"^</\s*([a-zA-Z][\w-]*)\s*>$")
_SPACES = re.compile(r"[ \t]*")

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
            if _SUSPECT.search(content):
                out.replace(part.start, stop, _cleaned_lines(content))
            continue
        if not isinstance(part, Parsed):
            continue
        for token in _read_whole(part.tokens):
            if token.map is None or token.map[0] >= part.keep:
                continue
            first, stop = token.map
            start = part.base + part.starts[first]
            if token.type == "html_block" and _SUSPECT.search(token.content):
                out.replace(start, part.base + part.starts[stop], _cleaned_lines(token.content))
            elif token.type == "inline":
                content = token.content
                if (pending is not None and first == 0) or stop > part.keep:  # only paragraphs are cut
                    read: str = token.meta["lines"]  # its lines as read, untrimmed
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
                    content = (
                        _trim("\n".join(pending.pieces)) if any("<" in p for p in pending.pieces) else ""
                    )
                    pending = None
                if "<" in content and _SUSPECT.search(content):
                    out.inline(start, part.base + part.starts[stop], content)
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

    def inline(self, start: int, stop: int, content: str) -> None:
        """A paragraph's inline HTML tags cleaned (`content`: its text as the parser read it)."""
        parsed = _inline_parser().parseInline(content)
        children = _read_whole(parsed[0].children or []) if parsed else []
        written = self.source[start : stop - 1]
        self.replace(start, stop, _clean_inline(written, written.count("\n") + 1, children))

    def text(self) -> str:
        if not self.parts and self.cursor == 0:  # nothing replaced: no copy of a big text
            return self.source
        if self.cursor <= len(self.source):
            self.parts.append(self.source[self.cursor :])
        return "\n".join(self.parts)


def _cleaned_lines(html: str) -> list[str]:
    cleaned = clean_html(html.rstrip("\n"))
    return cleaned.split("\n") if cleaned else []


def _clean_inline(text: str, count: int, children: list[Token]) -> list[str]:
    """The `count` lines of a paragraph (`text`) with their inline HTML tags cleaned in source order; a
    `<script>` or `<style>` element written inline goes with its content, up to its end tag."""
    tags = [child.content for child in children if child.type == "html_inline"]
    if not tags:
        return text.split("\n")
    spans: list[tuple[int, int]] = []  # where each tag is in the text
    cursor = 0
    for tag in tags:
        at = text.find(tag, cursor)
        if at < 0:  # a tag written across container markers (`> ` of a block quote): clean it all as HTML
            spans = []
            break
        spans.append((at, at + len(tag)))
        cursor = at + len(tag)
    if len(spans) != len(tags):
        new_text = clean_html(text)
    else:
        out = []
        cursor = 0
        index = 0
        while index < len(tags):
            start, end = spans[index]
            out.append(text[cursor:start])
            element = _CONTENT_ELEMENT.match(tags[index])
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
                out.append(_clean_tag(tags[index]))
            cursor = end
            index += 1
        out.append(text[cursor:])
        new_text = "".join(out)
    new_lines = new_text.split("\n")
    if len(new_lines) < count:  # keep the paragraph's line count (as the cleaning always did)
        new_lines += [""] * (count - len(new_lines))
    elif len(new_lines) > count:
        new_lines = [*new_lines[: count - 1], " ".join(new_lines[count - 1 :])]
    return new_lines
