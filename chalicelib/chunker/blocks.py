"""CommonMark block structure the chunker needs: fenced code blocks (spec 0.31.2, §4.5), from markdown-it-py.

Backtick and tilde fences of 3+ characters indented up to 3 spaces, an info string after optional spaces
(a backtick fence's info string may not contain backticks), a closing fence of the same character at least
as long as the opening one and without an info string, an unclosed fence running to the end of its
container (block quote, list item) or of the document: the tokenizer's block parser decides all of it, so
fences pair exactly as CommonMark pairs them. Only the block rules run (no inline parsing), only when
the text contains a fence marker at all, and over a window of the text at a time (`fenced_blocks`): the
parser's state is five lists per line, ~80 bytes a rune of short lines for a whole text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from markdown_it import MarkdownIt
from markdown_it.rules_block.html_block import HTML_SEQUENCES
from markdown_it.token import Token

_PARSER: MarkdownIt | None = None


def _parser() -> MarkdownIt:
    global _PARSER
    if _PARSER is None:
        md = MarkdownIt("commonmark")
        # Block structure only: no normalisation (it would move offsets) and no inline rules.
        md.core.ruler.enableOnly(["block"])
        _PARSER = md
    return _PARSER


@dataclass(frozen=True, slots=True)
class Fence:
    """One fenced code block, by offsets into the text."""

    start: int  # start of the opening fence line
    end: int  # end of the block's last line (closing fence, or last content line), newline excluded
    last_line: int  # start of the block's last line
    closed: bool  # False when the block runs to the end of its container or of the document


# A fence's opening line holds only container markers (block quote `>`, list bullets and numbers) and
# indentation before its backticks or tildes: without such a line the text has no fenced block.
_CANDIDATE = re.compile(r"^[ \t>*+\-0-9.)]*(?:```|~~~)", re.M)


# Runes of text per markdown-it parse (whole lines). The block parser keeps five lists per line of what
# it parses, so the text is parsed a window at a time; a window grows only while it holds no safe restart.
WINDOW = 1 << 14
# A line that starts a paragraph wherever it is: no indentation, no block or container marker, no
# link reference definition (`[`), no HTML, no setext underline.
_NOT_PLAIN = frozenset(" \t\r\n>-+*_#`~<[=|\\0123456789")
_BLANK = re.compile(r"[ \t]*\n")
_SPACES = re.compile(r"[ \t]*")
# A line that can close a top-level fence: a run of 3+ backticks or tildes after up to three columns of
# indentation (checked apart), then only spaces and tabs.
_CLOSER = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*$", re.M)
# Block quote lines: a restart inside a top-level quote starts with `>` in column 0 (see `_inner_restart`).
_QUOTE_START = re.compile(r">[^\t]")
_QUOTED_PLAIN = re.compile(r">[ ]?[^" + re.escape("".join(sorted(_NOT_PLAIN))) + r"]")
_QUOTED_BLANK = re.compile(r" {0,3}>[ \t]*\n")
# A line of only spaces and tabs (it ends HTML blocks of kinds 6 and 7).
_BLANK_LINE = re.compile(r"^[ \t]*$", re.M)


def fenced_blocks(text: str) -> list[Fence]:
    """The fenced code blocks of `text` in document order (nested ones included, e.g. in list items).

    The block parser runs over windows of about `WINDOW` runes. A window's blocks are kept up to its last
    safe restart, a line where the parse of the whole text would be at the top level, starting a block
    with nothing before it left open or looked past: the start of a top-level block after a blank line,
    after a closed top-level fence, or that is a fence itself, or a plain line inside a top-level
    paragraph (block parsing never looks back, and such a line goes on as a paragraph either way), or
    inside a top-level list or block quote (`_inner_restart`), so one container spanning most of a text
    needs no big window. The next window starts there. A top-level fence or HTML block still open at a
    window's end is followed to its end here, with the parser's rule for it. Parsing stops after the last
    line that can open a fence.
    """
    if "```" not in text and "~~~" not in text:
        return []
    last = None
    for last in _CANDIDATE.finditer(text):  # noqa: B007 - only the last candidate line matters
        pass
    if last is None:
        return []
    stop = last.start()  # no fence opens on a line starting after this offset
    n = len(text)
    out: list[Fence] = []
    s = 0
    size = WINDOW
    while s <= stop:
        nl = text.find("\n", s + size - 1)
        e = n if nl < 0 else nl + 1
        window = text[s:e]
        env: dict[str, object] = {}
        tokens = _parser().parse(window, env)
        fences = [t for t in tokens if t.type == "fence" and t.map]
        # Offset of every line start in the window; the last entry is one past its end.
        starts = list(accumulate(map((1).__add__, map(len, window.split("\n"))), initial=0))
        if e == n:
            _emit(out, fences, starts, s, len(window))
            break
        lines = len(starts) - 2  # the window ends with a newline: its last split piece is empty
        blocks = [t for t in tokens if t.level == 0 and t.map]
        if (
            blocks
            and blocks[-1].type == "fence"
            and _lines(blocks[-1])[1] >= lines
            and not _is_closed(blocks[-1])
        ):
            # A top-level fence open at the window's end: find its closing line in the text.
            fence = blocks[-1]
            first = _lines(fence)[0]
            _emit(out, [f for f in fences if _lines(f)[0] < first], starts, s, len(window))
            found = _closing_line(text, s + starts[first + 1], fence.markup)
            if found is None:
                out.append(_to_the_end(text, s + starts[first]))
                break
            a, b = found
            out.append(Fence(start=s + starts[first], end=b, last_line=a, closed=True))
            s = b + 1
            size = WINDOW
            continue
        if blocks and blocks[-1].type == "html_block" and _lines(blocks[-1])[1] >= lines:
            # A top-level HTML block open at the window's end: find its end in the text. It holds no fence.
            first = _lines(blocks[-1])[0]
            _emit(out, [f for f in fences if _lines(f)[0] < first], starts, s, len(window))
            after = _html_block_end(text, s + starts[first])
            if after is None:
                break
            s = after
            size = WINDOW
            continue
        # A link reference definition leaves no token and may end sooner in the window than in the text (a
        # title cut short at the window's end): the blocks after it in a container may not be the whole
        # parse's (a review's finding), so no restart inside a container follows one that may go on.
        cut = _inner_restart(window, starts, tokens, _before_open_references(env, window, starts, lines))
        if cut is None:
            cut = _restart(window, starts, blocks, lines)
        if cut is None:
            size *= 4  # e.g. one huge list item: the parses add up to ~4/3 of the last
            continue
        _emit(out, [f for f in fences if _lines(f)[0] < cut], starts, s, len(window))
        s += starts[cut]
        size = WINDOW
    return out


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
    """The window's last safe restart line (> 0), if any: see `fenced_blocks`."""

    def fresh(i: int) -> bool:  # blocks[i] starts where the whole text's parse is at the top level
        c = _lines(blocks[i])[0]
        if c == 0:
            return True
        if blocks[i].type == "fence" or _BLANK.match(window, starts[c - 1]) is not None:
            return True
        prev = blocks[i - 1] if i else None
        return prev is not None and prev.type == "fence" and _lines(prev)[1] == c and _is_closed(prev)

    best = None
    for i in range(len(blocks) - 1, -1, -1):
        b = blocks[i]
        if i == len(blocks) - 1 and b.type == "fence" and _is_closed(b) and fresh(i):
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


def _emit(out: list[Fence], fences: list[Token], starts: list[int], base: int, n: int) -> None:
    for t in fences:
        first, stop = t.map  # type: ignore[misc]  # [first line, line after the block)
        end_line = min(stop, len(starts) - 1) - 1
        out.append(
            Fence(
                start=base + starts[first],
                end=base + min(n, starts[end_line + 1] - 1),
                last_line=base + starts[end_line],
                closed=_is_closed(t),
            )
        )


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


def _to_the_end(text: str, start: int) -> Fence:
    """An unclosed top-level fence from `start` to the end of the text, as a parse of the whole text ends
    it: its last line is the text's last one that the parser counts (not a final empty line, nor a final
    line of only spaces and tabs)."""
    n = len(text)
    nl = text.rfind("\n")
    if _SPACES.fullmatch(text, nl + 1) is None:
        return Fence(start=start, end=n, last_line=nl + 1, closed=False)
    return Fence(start=start, end=nl, last_line=text.rfind("\n", 0, nl) + 1, closed=False)


def closed_fenced_blocks(text: str) -> list[Fence]:
    """The fenced blocks the chunker protects: only closed ones. WeKnora's fence pattern needs a closing
    fence, so an unclosed one is plain text there; protecting it would make the rest of the document (or
    of its container) one span of 7,500-rune chunks whose headings are ignored."""
    return [f for f in fenced_blocks(text) if f.closed]


def _is_closed(fence: Token) -> bool:
    """A closed block spans its content lines plus the two fence lines, an unclosed one plus one."""
    first, stop = fence.map  # type: ignore[misc]
    content = fence.content
    content_lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return stop - first - content_lines == 2
