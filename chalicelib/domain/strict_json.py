"""JSON as RFC 8259 defines it. Python's json module also reads `NaN`, `Infinity` and numbers too large for a
float (`1e400` becomes infinity); stored, they come back out as tokens that browsers' and Go's parsers refuse,
so one such value would break every answer that carries it."""

from __future__ import annotations

import json
import math
from typing import Any


def _not_json(token: str) -> Any:
    raise ValueError(f"{token} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number is too large for a double")
    return value


def loads(text: str | bytes) -> Any:
    """json.loads without NaN, Infinity, -Infinity or a number beyond a double; raises ValueError for them."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)
