"""CommonMark block structure the chunker needs: fenced code blocks (spec 0.31.2, §4.5), from markdown-it-py.

Backtick and tilde fences of 3+ characters indented up to 3 spaces, an info string after optional spaces
(a backtick fence's info string may not contain backticks), a closing fence of the same character at least
as long as the opening one and without an info string, an unclosed fence running to the end of its
container (block quote, list item) or of the document: the tokenizer's block parser decides all of it, so
fences pair exactly as CommonMark pairs them. Only the block rules run (no inline parsing), only when
the text contains a fence marker at all, and over a window of the text at a time (`fenced_blocks`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt
from markdown_it.token import Token

from chalicelib.domain.markdown_windows import OpenFence, Parsed, block_windows, is_closed

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


# Runes of text per markdown-it parse (whole lines): the block parser keeps five lists per line of what it
# parses, so the text is parsed a window at a time (`markdown_windows`).
WINDOW = 1 << 14
_SPACES = re.compile(r"[ \t]*")


def fenced_blocks(text: str) -> list[Fence]:
    """The fenced code blocks of `text` in document order (nested ones included, e.g. in list items).

    The block parser runs over windows of about `WINDOW` runes (`markdown_windows.block_windows`: the fences
    found are a parse's of the whole text). Parsing stops after the last line that can open a fence.
    """
    if "```" not in text and "~~~" not in text:
        return []
    last = None
    for last in _CANDIDATE.finditer(text):  # noqa: B007 - only the last candidate line matters
        pass
    if last is None:
        return []
    out: list[Fence] = []
    # no fence opens on a line starting after the last candidate
    for part in block_windows(text, _parser(), WINDOW, last.start()):
        if isinstance(part, Parsed):
            fences = [t for t in part.tokens if t.type == "fence" and t.map and t.map[0] < part.keep]
            _emit(out, fences, part.starts, part.base, len(part.window))
        elif isinstance(part, OpenFence):
            if part.closing is None:
                out.append(_to_the_end(text, part.start))
            else:
                a, b = part.closing
                out.append(Fence(start=part.start, end=b, last_line=a, closed=True))
    return out


def _emit(out: list[Fence], fences: list[Token], starts: list[int], base: int, n: int) -> None:
    for t in fences:
        first, stop = t.map  # type: ignore[misc]  # [first line, line after the block)
        end_line = min(stop, len(starts) - 1) - 1
        out.append(
            Fence(
                start=base + starts[first],
                end=base + min(n, starts[end_line + 1] - 1),
                last_line=base + starts[end_line],
                closed=is_closed(t),
            )
        )


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
