"""Reading what a chat model answered: fenced or bare JSON, numbered lines. A reply with no JSON in it is an
empty result; a reply too large or too deeply nested to read safely is a ModelReplyMalformed, which fails
only the subtask that asked (it is never retried: the same paid call would come back the same). The adapters
remove the model's reasoning and mark a reply cut off at max_tokens (`was_truncated`): a reader keeps only
what is complete in it, and a cut-off JSON reply with no complete item is a ModelReplyTruncated."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from chalicelib.domain.charsets import well_formed
from chalicelib.domain.strict_json import nests_deeper_than
from chalicelib.ports.models import ModelReplyMalformed, ModelReplyTruncated, was_truncated

__all__ = ["ModelReplyMalformed", "clip", "complete_part", "json_reply", "lines"]

#: far above what a 4,096-token answer holds; a server that ignores max_tokens is not read further
MAX_REPLY_CHARS = 200_000
#: our replies nest three or four levels; past this the reply is not one of ours
MAX_JSON_DEPTH = 32
#: where a JSON value may begin: prose before it can hold brackets of its own ("found [3 items]:")
MAX_JSON_STARTS = 64
#: cut-off values a reply is mended from (each is one linear pass)
MAX_SALVAGES = 4

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)(?:```|\Z)", re.S)
_NUMBERING = re.compile(r"^\s*(?:[-*•]+|\(?\d+[.)、:]|Q\d*[:.]|question\s*\d*[:.])\s*", re.I)
_OPENING = re.compile(r"[\[{]")
_BRACKET = re.compile(r"[\[\]{}]")
#: what a pass over a JSON text stops at: a whole string (skipped), an unterminated one, brackets, commas
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|"|[\[\]{},]', re.S)
#: where a cut-off text's last whole sentence or line ends
_SENTENCE_END = re.compile(r"[.!?。！？…](?=[\s\"'”’)\]]|$)|\n")


def json_reply(text: str, expect: type[list[Any]] | type[dict[str, Any]] | None = None) -> Any | None:
    """The first JSON object, or list of objects, in the reply (of the `expect`ed kind when given), else
    None. Fenced blocks are read first, then the whole reply; at each bracket in turn the value opening
    there is decoded (a bracket of the prose before the JSON, or a list like `[1]`, is passed over). A list
    cut off mid-way is read as its complete items. Raises ModelReplyMalformed for a reply too long or too
    deeply nested to decode, and ModelReplyTruncated when the model was cut off and nothing complete is in
    its reply."""
    if len(text) > MAX_REPLY_CHARS:
        raise ModelReplyMalformed(f"the model's reply is longer than {MAX_REPLY_CHARS} characters")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text]
    for candidate in candidates:
        value = _first_value(candidate, expect)
        if value is not None:
            return _well_formed(value)
    if was_truncated(text):
        raise ModelReplyTruncated("the model's reply was cut off at max_tokens before any complete item")
    return None


def _well_formed(value: Any) -> Any:
    """The value with each of its strings `well_formed`: the model's JSON may spell a lone surrogate itself
    (`\\ud83d`), which the adapter saw as six plain characters (its depth is capped: MAX_JSON_DEPTH)."""
    if isinstance(value, str):
        return well_formed(value)
    if isinstance(value, list):
        return [_well_formed(item) for item in value]
    if isinstance(value, dict):
        return {well_formed(key): _well_formed(item) for key, item in value.items()}
    return value


def _wanted(value: Any, expect: type[list[Any]] | type[dict[str, Any]] | None) -> bool:
    """An object, or a list of objects (empty or not): the shapes our prompts ask for."""
    if expect is not None and not isinstance(value, expect):
        return False
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and (not value or any(isinstance(item, dict) for item in value))


def _first_value(candidate: str, expect: type[list[Any]] | type[dict[str, Any]] | None) -> Any | None:
    """At each bracket in turn (at most MAX_JSON_STARTS), the value opening there; the brackets inside a
    value read whole, or closed but not JSON, are not tried (an item of a broken list is not the reply)."""
    decoder = json.JSONDecoder()
    salvages = 0
    shallow = _bracket_depth(candidate) <= MAX_JSON_DEPTH  # then no value in it nests deeper
    position = 0
    for _ in range(MAX_JSON_STARTS):
        opening = _OPENING.search(candidate, position)
        if opening is None:
            break
        start = position = opening.start()
        if not shallow and nests_deeper_than(candidate, MAX_JSON_DEPTH, start):
            raise ModelReplyMalformed(f"the model's reply nests deeper than {MAX_JSON_DEPTH} levels")
        try:
            value, position = decoder.raw_decode(candidate, start)
        except RecursionError as error:  # a thread's stack can be shallower than the depth cap allows
            raise ModelReplyMalformed("the model's reply nests too deeply to decode") from error
        except ValueError:
            value, closed_at = None, None
            if salvages < MAX_SALVAGES:
                salvages += 1
                value, closed_at = _complete_items(candidate, start)
            position = closed_at or start + 1
        if value is not None and _wanted(value, expect):
            return value
    return None


def _bracket_depth(text: str) -> int:
    """The deepest the brackets of the text nest, counted from its start and never below 0 (brackets in
    strings too): one pass that bounds how deep a value opening anywhere in it can nest."""
    depth = deepest = 0
    for bracket in _BRACKET.finditer(text):
        depth = depth + 1 if bracket.group() in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    return deepest


def _complete_items(text: str, start: int) -> tuple[Any | None, int | None]:
    """(the value opening at `start` mended, where it closes). A value the text ends inside (a reply cut off
    at max_tokens) is mended from the complete items of its outermost list: the list and everything around
    it closed after its last complete item; an item cut off is never kept in part (an auto-tag match without
    its confidence would count as sure). None for a value with no complete item, or one that closes (it
    is not JSON, as it did not decode: the position after it is given)."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []  # (end of the kept text, the closers it needs)
    for token in _STRUCTURE.finditer(text, start):
        char = token.group()
        if char.startswith('"'):
            if len(char) == 1:  # a string never closed: the text ends in it
                break
            continue
        if char in "[{":
            stack.append("]" if char == "[" else "}")
            continue
        if char in "]}":
            if not stack or stack.pop() != char:
                return None, None
            if not stack:
                return None, token.end()
            if stack.count("]") == 1 and stack[-1] == "]":  # an item of the outermost list ended
                cuts.append((token.end(), "".join(reversed(stack))))
            continue
        if stack.count("]") == 1 and stack[-1] == "]":  # a comma between items of the outermost list
            cuts.append((token.start(), "".join(reversed(stack))))
    for end, closers in reversed(cuts[-MAX_SALVAGES:]):
        try:
            return json.loads(text[start:end] + closers), None
        except ValueError:
            continue
    return None, None


def complete_part(reply: str) -> str:
    """A cut-off reply up to the end of its last whole sentence or line ('' when it has none); any other
    reply as it is."""
    if not was_truncated(reply):
        return str(reply)
    ends = [match.end() for match in _SENTENCE_END.finditer(reply)]
    return reply[: ends[-1]].rstrip() if ends else ""


def lines(text: str) -> Iterator[str]:
    """Non-empty lines with list numbering and bullets removed, lazily (a caller stops when it has enough)."""
    for line in text.splitlines():
        cleaned = _NUMBERING.sub("", line).strip().strip('"').strip()
        if cleaned:
            yield cleaned


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut at the last whitespace in the final tenth when there is one."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = max(cut.rfind(" "), cut.rfind("\n"))
    return (cut[:space] if space >= limit * 9 // 10 else cut).rstrip()
