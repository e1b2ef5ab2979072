"""A CommonMark block parse of a big text a window at a time, with markdown-it-py, giving the tokens of a parse
of the whole text (the chunker's fences, the active-content cleaner's HTML blocks and paragraphs).

markdown-it keeps five lists per line of what it parses and a few tokens per block: ~80 bytes a rune of
short lines for a whole text, GBs for the 50 M runes a document may hold. `block_windows` parses windows of
about `size` runes instead: a window's tokens are kept up to its last safe restart, a line where the parse
of the whole text would be at the top level, starting a block with nothing before it left open or looked
past: the start of a top-level block after a blank line, after a closed top-level fence, or that is a fence
itself, or a plain line inside a top-level paragraph (block parsing never looks back, and such a line goes
on as a paragraph either way), or inside a top-level list or block quote (`_inner_restart`), so one
container spanning most of a text needs no big window. The next window starts there. A top-level fence or
HTML block still open at a window's end is followed to its end in the text, with the parser's rule for it.
A window grows only while it holds no safe restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import accumulate

from markdown_it import MarkdownIt
from markdown_it.rules_block.html_block import HTML_SEQUENCES
from markdown_it.token import Token


@dataclass(frozen=True, slots=True)
class Parsed:
    """A window's parse: its tokens whose first line is before `keep` are the whole text's (line numbers in
    the window). A paragraph (or setext heading) may go on past `keep`: its lines before `keep` are the
    whole parse's, and it goes on from line 0 of the next window."""

    base: int  # offset of the window in the text
    window: str
    tokens: list[Token]
    starts: list[int]  # offset in the window of each line start; the last entry is one past its end
    keep: int


@dataclass(frozen=True, slots=True)
class OpenFence:
    """A top-level fence open at a window's end, followed in the text: `closing` is its closing line's
    (start, end), None when it runs to the end of the text."""

    start: int  # offset of the opening fence line
    closing: tuple[int, int] | None


@dataclass(frozen=True, slots=True)
class OpenHtml:
    """A top-level HTML block open at a window's end, followed in the text: it holds the lines from `start`
    to `after` (the offset of the line after it), or to the end of the text when `after` is None."""

    start: int
    after: int | None


Part = Parsed | OpenFence | OpenHtml


# A line that starts a paragraph wherever it is: no indentation, no block or container marker, no
# link reference definition (`[`), no HTML, no setext underline.
_NOT_PLAIN = frozenset(" \t\r\n>-+*_#`~<[=|\\0123456789")
_BLANK = re.compile(r"[ \t]*\n")
# A line that can close a top-level fence: a run of 3+ backticks or tildes after up to three columns of
# indentation (checked apart), then only spaces and tabs.
_CLOSER = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*$", re.M)
# Block quote lines: a restart inside a top-level quote starts with `>` in column 0 (see `_inner_restart`).
_QUOTE_START = re.compile(r">[^\t]")
_QUOTED_PLAIN = re.compile(r">[ ]?[^" + re.escape("".join(sorted(_NOT_PLAIN))) + r"]")
_QUOTED_BLANK = re.compile(r" {0,3}>[ \t]*\n")
# A line of only spaces and tabs (it ends HTML blocks of kinds 6 and 7).
_BLANK_LINE = re.compile(r"^[ \t]*$", re.M)


def block_windows(text: str, parser: MarkdownIt, size: int, stop: int) -> Iterator[Part]:
    """The parts of `text` in order, parsed by `parser` (block rules only: no normalisation, which would
    move offsets) over windows of about `size` runes, until a window starts after offset `stop`."""
    n = len(text)
    s = 0
    grown = size
    while s <= stop:
        nl = text.find("\n", s + grown - 1)
        e = n if nl < 0 else nl + 1
        window = text[s:e]
        env: dict[str, object] = {}
        tokens = parser.parse(window, env)
        # Offset of every line start in the window; the last entry is one past its end.
        starts = list(accumulate(map((1).__add__, map(len, window.split("\n"))), initial=0))
        if e == n:
            yield Parsed(s, window, tokens, starts, len(starts))
            return
        lines = len(starts) - 2  # the window ends with a newline: its last split piece is empty
        blocks = [t for t in tokens if t.level == 0 and t.map]
        if (
            blocks
            and blocks[-1].type == "fence"
            and _lines(blocks[-1])[1] >= lines
            and not is_closed(blocks[-1])
        ):
            # A top-level fence open at the window's end: find its closing line in the text.
            fence = blocks[-1]
            first = _lines(fence)[0]
            yield Parsed(s, window, tokens, starts, first)
            found = _closing_line(text, s + starts[first + 1], fence.markup)
            yield OpenFence(s + starts[first], found)
            if found is None:
                return
            s = found[1] + 1
            grown = size
            continue
        if blocks and blocks[-1].type == "html_block" and _lines(blocks[-1])[1] >= lines:
            # A top-level HTML block open at the window's end: find its end in the text.
            first = _lines(blocks[-1])[0]
            yield Parsed(s, window, tokens, starts, first)
            after = _html_block_end(text, s + starts[first])
            yield OpenHtml(s + starts[first], after)
            if after is None:
                return
            s = after
            grown = size
            continue
        # A link reference definition leaves no token and may end sooner in the window than in the text (a
        # title cut short at the window's end): the blocks after it in a container may not be the whole
        # parse's (a review's finding), so no restart inside a container follows one that may go on.
        cut = _inner_restart(window, starts, tokens, _before_open_references(env, window, starts, lines))
        if cut is None:
            cut = _restart(window, starts, blocks, lines)
        if cut is None:
            grown *= 4  # e.g. one huge list item: the parses add up to ~4/3 of the last
            continue
        yield Parsed(s, window, tokens, starts, cut)
        s += starts[cut]
        grown = size


# A line that no link reference title goes on over (blank, in or out of block quotes).
_TITLE_BREAK = re.compile(r"[ \t>]*\n")


def _before_open_references(env: dict[str, object], window: str, starts: list[int], lines: int) -> int:
    """The line before which a restart inside a container is safe: the first line of the first link
    reference definition with no blank line after it in the window (its title may go on past the window's
    end in the text: a title never crosses a blank line); `lines` when there is none. markdown-it keeps
    each definition's lines in `env` (`references`, and `duplicate_refs` for a label defined again)."""
    found = env.get("references")
    maps = [r["map"] for r in found.values()] if isinstance(found, dict) else []
    duplicates = env.get("duplicate_refs")
    maps += [r["map"] for r in duplicates] if isinstance(duplicates, list) else []
    if not maps:
        return lines
    last_break = next((k for k in range(lines - 1, -1, -1) if _TITLE_BREAK.match(window, starts[k])), -1)
    return min([a for a, z in maps if z > last_break], default=lines)


def _restart(window: str, starts: list[int], blocks: list[Token], lines: int) -> int | None:
    """The window's last safe restart line (> 0), if any: see the module's docstring."""

    def fresh(i: int) -> bool:  # blocks[i] starts where the whole text's parse is at the top level
        c = _lines(blocks[i])[0]
        if c == 0:
            return True
        if blocks[i].type == "fence" or _BLANK.match(window, starts[c - 1]) is not None:
            return True
        prev = blocks[i - 1] if i else None
        return prev is not None and prev.type == "fence" and _lines(prev)[1] == c and is_closed(prev)

    best = None
    for i in range(len(blocks) - 1, -1, -1):
        b = blocks[i]
        if i == len(blocks) - 1 and b.type == "fence" and is_closed(b) and fresh(i):
            best = _lines(b)[1]  # after a closed top-level fence
            break
        if i == len(blocks) - 1 and b.type == "paragraph_open" and fresh(i):
            a, z = b.map  # type: ignore[misc]
            head = window[starts[a] : starts[a] + 4].lstrip(" \t")
            if not head.startswith("["):  # not a link reference definition that the window cut short
                for line in range(min(z, lines) - 1, a, -1):
                    if window[starts[line]] not in _NOT_PLAIN:
                        best = line
                        break
                if best is not None:
                    break
        c = _lines(b)[0]
        if c > 0 and fresh(i):
            best = c
            break
    return best


def _inner_restart(window: str, starts: list[int], tokens: list[Token], lines: int) -> int | None:
    """A safe restart inside the window's last top-level block when it is a list or a block quote (one
    container can span most of a text): the last line > 0 that starts an item of the top-level list at
    column 0 (a parse from there starts a list with the same item: an item's extent and content follow
    from its own marker line and the lines after it), or, in a top-level block quote, a line starting with
    `>` that starts one of the quote's blocks after a blank quoted line, or a plain quoted line (`>`, an
    optional space, a plain character) inside the quote's last paragraph that did not start with `[` (a
    parse from there starts a quote whose paragraph goes on as the whole parse's does)."""
    head = -1
    for i in range(len(tokens) - 1, -1, -1):
        if tokens[i].level == 0 and tokens[i].map:
            head = i
            break
    if head < 0:
        return None
    kind = tokens[head].type
    top = _lines(tokens[head])[0]
    inner = [t for t in tokens[head + 1 :] if t.level == 1 and t.map and t.nesting >= 0]
    if kind in ("bullet_list_open", "ordered_list_open"):
        for t in reversed(inner):
            c = _lines(t)[0]
            if t.type == "list_item_open" and top < c < lines and window[starts[c]] not in " \t":
                return c
        return None
    if kind != "blockquote_open":
        return None
    last = inner[-1] if inner else None
    if last is not None and last.type == "paragraph_open":
        a, z = _lines(last)
        if _unquote(window, starts[a]).startswith("["):
            a = z  # a paragraph that may be a link reference definition cut short: no line of it
        for line in range(min(z, lines) - 1, a, -1):
            if _QUOTED_PLAIN.match(window, starts[line]) is not None:
                return line
    for t in reversed(inner):
        c = _lines(t)[0]
        if (
            top < c < lines
            and _QUOTE_START.match(window, starts[c]) is not None
            and _QUOTED_BLANK.match(window, starts[c - 1]) is not None
        ):
            return c
    return None


def _unquote(window: str, pos: int) -> str:
    """The first characters of a quoted line after its `>` and the spaces and tabs after it."""
    return window[pos : pos + 8].lstrip(" ")[1:].lstrip(" \t")


def _html_block_end(text: str, start: int) -> int | None:
    """Offset of the line after a top-level HTML block that starts at `start` (the line where a parse of the
    text goes on), None when it runs to the text's end: markdown-it's rule with no container. Its first
    line (after spaces and tabs) picks the kind; kinds 1-5 end on the line holding their closing sequence
    (none spans lines), kinds 6-7 before the first line of only spaces and tabs."""
    nl = text.find("\n", start)
    eol = len(text) if nl < 0 else nl
    line = text[start:eol].lstrip(" \t")
    pos = eol - len(line)
    closing = next(seq[1] for seq in HTML_SEQUENCES if seq[0].search(line))  # the parser's first match
    if closing.search(""):  # kinds 6 and 7
        if nl < 0:
            return None
        m = _BLANK_LINE.search(text, nl + 1)
        return None if m is None or m.start() >= len(text) else m.start()
    m = closing.search(text, pos)
    if m is None:
        return None
    nl = text.find("\n", m.end())
    return None if nl < 0 else nl + 1


def _lines(t: Token) -> tuple[int, int]:
    """A block token's lines: [first line, line after the block)."""
    first, stop = t.map  # type: ignore[misc]
    return first, stop


def _closing_line(text: str, pos: int, markup: str) -> tuple[int, int] | None:
    """(start, end) of the first line from `pos` on that closes a top-level fence opened by `markup`:
    markdown-it's rule with no container (indentation under four columns, tabs to multiples of four)."""
    for m in _CLOSER.finditer(text, pos):
        run = m.group(2)
        if run[0] != markup[0] or len(run) < len(markup):
            continue
        col = 0
        for ch in m.group(1):
            col += 4 - col % 4 if ch == "\t" else 1
        if col < 4:
            return m.start(), m.end()
    return None


def is_closed(fence: Token) -> bool:
    """A closed block spans its content lines plus the two fence lines, an unclosed one plus one."""
    first, stop = fence.map  # type: ignore[misc]
    content = fence.content
    content_lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return stop - first - content_lines == 2
