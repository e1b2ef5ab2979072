"""CommonMark block structure the chunker needs: fenced code blocks (spec 0.31.2, §4.5), from markdown-it-py.

Backtick and tilde fences of 3+ characters indented up to 3 spaces, an info string after optional spaces
(a backtick fence's info string may not contain backticks), a closing fence of the same character at least
as long as the opening one and without an info string, an unclosed fence running to the end of its
container (block quote, list item) or of the document: the tokenizer's block parser decides all of it, so
fences pair exactly as CommonMark pairs them. Only the block rules run (no inline parsing), and only when
the text contains a fence marker at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

from markdown_it import MarkdownIt
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


def fenced_blocks(text: str) -> list[Fence]:
    """The fenced code blocks of `text` in document order (nested ones included, e.g. in list items)."""
    if "```" not in text and "~~~" not in text:
        return []
    last = None
    for last in _CANDIDATE.finditer(text):  # noqa: B007 - only the last candidate line matters
        pass
    if last is None:
        return []
    # Block parsing is incremental, line by line: no line after the last one that can open or close a
    # fence changes a fence before it, so parse up to there. Only a fence still open at that point runs
    # on, to the end of its container: then the whole text is parsed.
    cut = text.find("\n", last.end())
    fences = _fences(text[: cut + 1] if cut >= 0 else text)
    if fences and cut >= 0 and not _is_closed(fences[-1]):
        fences = _fences(text)
    if not fences:
        return []
    # Offset of every line start; the last entry is one past the end of the text.
    line_starts = list(accumulate(map((1).__add__, map(len, text.split("\n"))), initial=0))
    n = len(text)
    out = []
    for t in fences:
        first, stop = t.map  # type: ignore[misc]  # [first line, line after the block)
        end_line = min(stop, len(line_starts) - 1) - 1
        out.append(
            Fence(
                start=line_starts[first],
                end=min(n, line_starts[end_line + 1] - 1),
                last_line=line_starts[end_line],
                closed=_is_closed(t),
            )
        )
    return out


def closed_fenced_blocks(text: str) -> list[Fence]:
    """The fenced blocks the chunker protects: only closed ones. WeKnora's fence pattern needs a closing
    fence, so an unclosed one is plain text there; protecting it would make the rest of the document (or
    of its container) one span of 7,500-rune chunks whose headings are ignored."""
    return [f for f in fenced_blocks(text) if f.closed]


def _fences(text: str) -> list[Token]:
    return [t for t in _parser().parse(text) if t.type == "fence" and t.map]


def _is_closed(fence: Token) -> bool:
    """A closed block spans its content lines plus the two fence lines, an unclosed one plus one."""
    first, stop = fence.map  # type: ignore[misc]
    content = fence.content
    content_lines = content.count("\n") + (1 if content and not content.endswith("\n") else 0)
    return stop - first - content_lines == 2
