"""DynamoDB's size limits, and the budgets the graph and the wiki index keep within them: an item holds at
most 400 KB (names and values, in UTF-8 bytes), a sort key 1,024 bytes. Writes past them are refused for
good (ValidationException), so what a model's reply brings is cut to fit before it is written."""

from __future__ import annotations

import json
from collections.abc import Iterable

from chalicelib.domain.graph import entity_key

ITEM_MAX_BYTES = 400 * 1024
SORT_KEY_MAX_BYTES = 1024

#: an entity's name and a relation in a graph sort key (`e#a#relation#b#knowledge`: 2 × 400 + 150 + a
#: 36-character knowledge id and separators stay under 1,024 bytes); also how long a stored name may be
GRAPH_NAME_BYTES = 400
GRAPH_RELATION_BYTES = 150
GRAPH_ATTRIBUTE_BYTES = 400
#: what one knowledge's fact item collects over a document: chunk ids past this many are not recorded (the
#: fact is known; more places to find it add little), attributes past this many not added (a mention adds
#: at most 20): about 1,000 × 60 + 120 × 400 bytes, far under the item limit
GRAPH_MAX_CHUNK_IDS = 1000
GRAPH_MAX_ATTRIBUTES = 100
#: the wiki index is stored in parts of at most this many bytes (of its JSON text), an item each
WIKI_INDEX_PART_BYTES = 300 * 1024


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def clip_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` of at most `max_bytes` UTF-8 bytes (never half a character)."""
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def split_json_text(text: str, max_bytes: int) -> list[str]:
    """`text` in consecutive parts each at most `max_bytes` once written as a JSON string (as a
    JSONAttribute keeps it: non-ASCII escaped, a CJK character 6 bytes); at least one part."""
    parts: list[str] = []
    rest = text
    while True:
        part = rest[:max_bytes]
        while (size := len(json.dumps(part))) > max_bytes:
            part = part[: max(1, len(part) * max_bytes // size - 1)]
        parts.append(part)
        rest = rest[len(part) :]
        if not rest:
            return parts


def item_size(values: Iterable[tuple[str, object]]) -> int:
    """What DynamoDB counts for an item of these (attribute name, value) pairs: names and values in UTF-8
    (strings, string sets, anything else as its JSON text), numbers at most 21 bytes."""
    total = 0
    for name, value in values:
        total += utf8_size(name)
        if isinstance(value, str):
            total += utf8_size(value)
        elif isinstance(value, set | frozenset | list | tuple):
            total += sum(utf8_size(str(v)) for v in value)
        elif isinstance(value, int | float):
            total += 21
        elif value is not None:
            total += utf8_size(json.dumps(value))
    return total


# ---------------------------------------------------------------- the graph's facts


def graph_name(name: str) -> str:
    """An entity's name as stored (and as the parser keeps it): at most GRAPH_NAME_BYTES."""
    return clip_utf8(name.strip(), GRAPH_NAME_BYTES)


def graph_relation(relation: str) -> str:
    return clip_utf8(relation.strip(), GRAPH_RELATION_BYTES)


def graph_attributes(attributes: Iterable[str]) -> list[str]:
    return [clip_utf8(a.strip(), GRAPH_ATTRIBUTE_BYTES) for a in attributes]


def graph_name_part(name: str) -> str:
    """An entity's part of a graph key: its `entity_key`, cut to GRAPH_NAME_BYTES (NFKC may lengthen a name
    the parser cut already), so a name read by its full text finds what was stored under its cut one."""
    return clip_utf8(entity_key(name), GRAPH_NAME_BYTES)


def graph_relation_part(relation: str) -> str:
    return clip_utf8(relation.casefold(), GRAPH_RELATION_BYTES)
