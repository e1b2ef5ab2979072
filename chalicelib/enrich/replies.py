"""Reading what a chat model answered: fenced or bare JSON, numbered lines. A reply that does not parse is
an empty result, never an exception that fails a document."""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.S)
_NUMBERING = re.compile(r"^\s*(?:[-*•]+|\(?\d+[.)、:]|Q\d*[:.]|question\s*\d*[:.])\s*", re.I)


def json_reply(text: str) -> Any | None:
    """The first JSON value in the reply (inside a code fence when there is one), else None."""
    candidates = [m.group(1) for m in _FENCE.finditer(text)] or [text]
    for candidate in candidates:
        candidate = candidate.strip()
        # the outermost value: whichever bracket opens first (an object holding a list is the object)
        starts = sorted(i for i in (candidate.find("["), candidate.find("{")) if i >= 0)
        for start in starts:
            try:
                value, _ = json.JSONDecoder().raw_decode(candidate[start:])
            except ValueError:
                continue
            return value
    return None


def lines(text: str) -> list[str]:
    """Non-empty lines with list numbering and bullets removed."""
    out = []
    for line in text.splitlines():
        cleaned = _NUMBERING.sub("", line).strip().strip('"').strip()
        if cleaned:
            out.append(cleaned)
    return out
