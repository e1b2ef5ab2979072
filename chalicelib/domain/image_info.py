"""A text chunk's `image_info` (spec §1.9, §1.11): one entry per stored image its text shows, in order of
appearance, which the multimodal task completes with the image's caption and OCR text."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from chalicelib.domain.answer_size import json_size

#: a stored object's URL as the rewritten Markdown shows it (the default, S3, in-memory and named backends)
INTERNAL_URL = re.compile(r"(?:local|s3|mem|storage)://[^\s()<>\[\]\"'`]+")


class ShownImages:
    """Which of an attempt's stored images a text shows: one scan of the text for stored URLs and a set
    lookup, not a substring test per image (a document can have hundreds of images and thousands of chunks).
    A URL of another shape, if any, is looked for as a substring."""

    def __init__(self, images: Iterable[Mapping[str, Any]]) -> None:
        """`images`: the attempt's image manifest (each with its `url`; `original_ref`, the link the
        source itself had, becomes the entry's `original_url` when it is a web address)."""
        self.entries: dict[str, dict[str, str]] = {}
        for image in images:
            url = str(image.get("url") or "")
            if not url or url in self.entries:
                continue
            entry = {"url": url}
            ref = str(image.get("original_ref") or "")
            if ref.startswith(("http://", "https://")):
                entry["original_url"] = ref
            self.entries[url] = entry
        self.other_shapes = [url for url in self.entries if not INTERNAL_URL.fullmatch(url)]

    def urls(self, text: str) -> list[str]:
        """The images' URLs the text shows, once each, in order of appearance."""
        if not self.entries:
            return []
        first: dict[str, int] = {}
        for match in INTERNAL_URL.finditer(text):
            if match.group(0) in self.entries:
                first.setdefault(match.group(0), match.start())
        for url in self.other_shapes:
            if (at := text.find(url)) >= 0:
                first.setdefault(url, at)
        return sorted(first, key=first.__getitem__)

    def image_info(self, text: str) -> list[dict[str, Any]]:
        return [dict(self.entries[url]) for url in self.urls(text)]


#: what a text chunk's image_info may hold, as stored (JSON, non-ASCII escaped: a CJK character is 6 bytes):
#: its images' texts are the image chunks'; this copy is clipped so the chunk stays far within DynamoDB's
#: 400 KB item (a paragraph showing a dozen scanned pages would otherwise pass it, and every write fail)
IMAGE_INFO_MAX_BYTES = 64 * 1024


def _clipped(text: str, max_bytes: int) -> str:
    """The longest prefix of `text` whose JSON string is at most `max_bytes` ("" when not even a character)."""
    if json_size(text) <= max_bytes:
        return text
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if json_size(text[:mid]) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return text[:low]


def with_image_fields(
    image_info: Sequence[Mapping[str, Any]], url: str, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """`image_info` with `fields` set on the entry of `url` (an entry added at the end when there is none),
    their texts clipped to keep the texts within IMAGE_INFO_MAX_BYTES (an entry past it keeps its url only)."""
    merged = [dict(entry) for entry in image_info]
    entry = next((e for e in merged if e.get("url") == url), None)
    if entry is None:
        entry = {"url": url}
        merged.append(entry)
    for name, value in fields.items():
        held = entry.get(name)
        if isinstance(value, str) and isinstance(held, str) and held and value.startswith(held):
            continue  # written before (clipped as it fitted then): the same again changes nothing
        entry.pop(name, None)
        if isinstance(value, str):
            room = IMAGE_INFO_MAX_BYTES - json_size(merged) - json_size(name) - 4  # `, "name": `
            value = _clipped(value, max(room, 0))
            if not value:  # no room left: the entry keeps its url (the image chunks hold the texts)
                continue
        entry[name] = value
    return merged
