"""Active content out of Markdown: `<script>` and `<style>` elements, event-handler attributes (`onerror=`),
`javascript:` URLs and embedding tags in the raw HTML a Markdown text carries.

One implementation for every way text gets in: hand-written (manual) knowledge and the Markdown parsed from
uploaded or imported files (md, html, anything an engine turns into Markdown), so a chunk shown in a
WeKnora front end never runs a tenant's script.

Only the HTML of the Markdown is touched: markdown-it finds the HTML blocks and inline HTML tags exactly as
a CommonMark renderer would (code spans and fenced code stay as written, since a renderer escapes them), and
each fragment is cleaned by nh3 (the Ammonia sanitizer). Text without anything suspicious is returned as is
without parsing.
"""

from __future__ import annotations

import re

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

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

_BLOCKS: MarkdownIt | None = None
_INLINE: MarkdownIt | None = None


def _block_parser() -> MarkdownIt:
    """Block structure only (fast, linear): HTML blocks, and the paragraphs that may hold inline HTML."""
    global _BLOCKS
    if _BLOCKS is None:
        md = MarkdownIt("commonmark")
        md.core.ruler.enableOnly(["block"])  # no normalisation: it would move line numbers
        _BLOCKS = md
    return _BLOCKS


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
    again until a pass changes nothing, so what a pass joins is cleaned too; a text still changing after
    MAX_PASSES (built to) keeps no HTML at all."""
    text = markdown
    for _ in range(MAX_PASSES):
        cleaned = _strip_once(text)
        if cleaned == text:
            return cleaned
        text = cleaned
    return text.replace("<", "&lt;")


def _strip_once(markdown: str) -> str:
    if "<" not in markdown or not _SUSPECT.search(markdown):
        return markdown
    lines = markdown.split("\n")
    replaced: dict[int, list[str]] = {}  # first line of a block -> its new lines
    dropped: set[int] = set()
    for token in _block_parser().parse(markdown):
        if token.map is None:
            continue
        first, stop = token.map
        if token.type == "html_block" and _SUSPECT.search(token.content):
            cleaned = clean_html(token.content.rstrip("\n"))
            replaced[first] = cleaned.split("\n") if cleaned else []
            dropped.update(range(first + 1, stop))
        elif token.type == "inline" and "<" in token.content and _SUSPECT.search(token.content):
            parsed = _inline_parser().parseInline(token.content)
            children = parsed[0].children if parsed and parsed[0].children else []
            _clean_inline(lines, first, stop, children)
    out: list[str] = []
    for index, line in enumerate(lines):
        if index in replaced:
            out.extend(replaced[index])
        elif index not in dropped:
            out.append(line)
    return "\n".join(out)


def _clean_inline(lines: list[str], first: int, stop: int, children: list[Token]) -> None:
    """Cleans the inline HTML tags of a paragraph in place, in source order; a `<script>` or `<style>`
    element written inline goes with its content, up to its end tag."""
    tags = [child.content for child in children if child.type == "html_inline"]
    if not tags:
        return
    text = "\n".join(lines[first:stop])
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
    count = stop - first  # later tokens index lines: keep the paragraph's line count
    if len(new_lines) < count:
        new_lines += [""] * (count - len(new_lines))
    elif len(new_lines) > count:
        new_lines = [*new_lines[: count - 1], " ".join(new_lines[count - 1 :])]
    lines[first:stop] = new_lines
