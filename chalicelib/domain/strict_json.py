"""JSON as RFC 8259 defines it. Python's json module also reads `NaN`, `Infinity` and numbers too large for a
float (`1e400` becomes infinity); stored, they come back out as tokens that browsers' and Go's parsers refuse,
so one such value would break every answer that carries it. It also keeps the last of two values given for one
key, where other parsers keep the first or refuse (RFC 8259 §4 leaves it undefined): a key given twice is
refused, so no two readers of one text disagree on what it says."""

from __future__ import annotations

import json
import math
import re
from typing import Any, Literal


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON value")


class DuplicateKey(ValueError):
    """An object of the text names one key twice."""

    def __init__(self, key: str) -> None:
        shown = repr(key) if len(key) <= 64 else repr(key[:64]) + "…"  # repr: no control characters
        super().__init__(f"an object names the key {shown} twice")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return obj


class RepeatedKeys(dict[str, Any]):
    """An object that names a key twice, read with `on_duplicate="mark"`: the values the last of each
    repeat gave (json's own rule), and the first key repeated, for the caller to refuse the object alone."""

    def __init__(self, pairs: list[tuple[str, Any]], repeated_key: str) -> None:
        super().__init__(pairs)
        self.repeated_key = repeated_key

    def refusal(self) -> str:
        return str(DuplicateKey(self.repeated_key))


def _marked_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    try:
        return _unique_keys(pairs)
    except DuplicateKey as repeat:
        return RepeatedKeys(pairs, repeat.key)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number is too large for a double")
    return value


def loads(text: str | bytes, on_duplicate: Literal["raise", "mark"] = "raise") -> Any:
    """json.loads without NaN, Infinity, -Infinity, a number beyond a double or a key given twice in one
    object; raises ValueError for them (DuplicateKey for the last). With `on_duplicate="mark"` an object
    that repeats a key is read as a RepeatedKeys instead, so a caller reading many records from one text
    can refuse the record that holds it and keep the others."""
    hook = _marked_keys if on_duplicate == "mark" else _unique_keys
    return json.loads(text, parse_constant=_not_json, parse_float=_finite, object_pairs_hook=hook)


#: what changes a JSON text's nesting: brackets, and the quotes and backslashes that hide them in strings
_NESTING = re.compile(r'[\[\]{}"\\]')


def nests_deeper_than(text: str, limit: int, start: int = 0) -> bool:
    """Whether the JSON text (the value opening at `start`) nests deeper than `limit`, in one linear pass
    before any parse: json.loads recurses once per level, so 100,000 nested arrays would exhaust the stack.
    Brackets inside strings do not count; the pass ends with the value."""
    depth = 0
    in_string = False
    escaped_at = -1
    for match in _NESTING.finditer(text, start):
        at, char = match.start(), match.group()
        if at == escaped_at:
            continue
        if in_string:
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return True
        elif char in "]}":
            depth -= 1
            if depth <= 0:
                return False
    return False


def loads_nested_at_most(text: str, max_depth: int) -> Any:
    """`loads` of a text from outside (a cursor, a reply) that may nest at most `max_depth` deep: one that
    nests deeper raises ValueError before it is parsed (json.loads would exhaust the stack: RecursionError)."""
    if nests_deeper_than(text, max_depth):
        raise ValueError(f"the JSON text nests deeper than {max_depth} levels")
    return loads(text)
