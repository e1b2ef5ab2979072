"""Reading what a chat model answered: fenced or bare JSON, numbered lines. A reply with no JSON in it is an
empty result; a reply too large or too deeply nested to read safely is a ModelReplyMalformed, which fails
only the subtask that asked (it is never retried: the same paid call would come back the same)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from chalicelib.domain.strict_json import nests_deeper_than
from chalicelib.ports import ModelRequestError

#: far above what a 4,096-token answer holds; a server that ignores max_tokens is not read further
MAX_REPLY_CHARS = 200_000
#: our replies nest three or four levels; past this the reply is not one of ours
MAX_JSON_DEPTH = 32

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_NUMBERING = re.compile(r"^\s*(?:[-*•]+|\(?\d+[.)、:]|Q\d*[:.]|question\s*\d*[:.])\s*", re.I)


class ModelReplyMalformed(ModelRequestError):
    """The model answered, but not in a shape we can read safely."""

    code = "model_reply_malformed"


def json_reply(text: str) -> Any | None:
    """The first JSON value in the reply (inside a code fence when there is one), else None. Raises
    ModelReplyMalformed for a reply too long or too deeply nested to decode."""
    if len(text) > MAX_REPLY_CHARS:
        raise ModelReplyMalformed(f"the model's reply is longer than {MAX_REPLY_CHARS} characters")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] or [text]
    for candidate in candidates:
        candidate = candidate.strip()
        # the outermost value: whichever bracket opens first (an object holding a list is the object)
        starts = sorted(i for i in (candidate.find("["), candidate.find("{")) if i >= 0)
        for start in starts:
            if nests_deeper_than(candidate, MAX_JSON_DEPTH, start):
                raise ModelReplyMalformed(f"the model's reply nests deeper than {MAX_JSON_DEPTH} levels")
            try:
                value, _ = json.JSONDecoder().raw_decode(candidate[start:])
            except RecursionError as error:  # a thread's stack can be shallower than the depth cap allows
                raise ModelReplyMalformed("the model's reply nests too deeply to decode") from error
            except ValueError:
                continue
            return value
    return None


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
