"""Which stored images a chunk's text shows (domain/image_info): the manifest's URLs in order of first
appearance, once each, with the source's own web link as `original_url`; a URL of another shape than the
stores' is still found; a link that only begins with a stored URL is not that image."""

from __future__ import annotations

import json
from typing import Any

from chalicelib.domain.image_info import IMAGE_INFO_MAX_BYTES, ShownImages, with_image_fields

A, B, C = "mem://files/t/a.png", "storage://eu/t/b.png", "s3://bucket/t/c.png"


def test_the_images_a_text_shows_in_order_once_each() -> None:
    shown = ShownImages(
        [
            {"url": A, "original_ref": "https://example.org/a.png"},
            {"url": B, "original_ref": "data-uri"},
            {"url": C, "original_ref": "image1.png"},
            {"url": A, "original_ref": "https://example.org/again.png"},  # a range's copy: the first counts
        ]
    )
    text = f'![b]({B}) then ![a]({A}) and <img src="{B}"> and [x]({C}x) and {A}.png'
    assert shown.image_info(text) == [{"url": B}, {"url": A, "original_url": "https://example.org/a.png"}]
    assert shown.image_info("no images here") == []
    assert ShownImages([]).urls(f"![a]({A})") == []


def test_a_url_of_another_shape_is_found_as_a_substring() -> None:
    odd = "https://cdn.example.org/kept image.png"
    shown = ShownImages([{"url": odd}, {"url": A}])
    assert shown.urls(f"![a]({A}) ![k]({odd})") == [A, odd]


def test_fields_merge_into_the_urls_entry_or_a_new_one() -> None:
    info = [{"url": A}, {"url": B, "caption": "old"}]
    assert with_image_fields(info, B, {"caption": "new", "ocr_text": "t"}) == [
        {"url": A},
        {"url": B, "caption": "new", "ocr_text": "t"},
    ]
    assert with_image_fields(info, C, {"caption": "c"}) == [*info, {"url": C, "caption": "c"}]
    assert info == [{"url": A}, {"url": B, "caption": "old"}]  # the input is left as it was


def test_a_chunk_showing_many_scanned_pages_keeps_its_image_info_within_its_budget() -> None:
    """Twelve pages of Chinese OCR text (8,000 characters each, 6 bytes each once stored) would pass
    DynamoDB's 400 KB item: the copies in image_info are clipped, the first ones whole while they fit."""
    page = "港口" * 4000
    info: list[dict[str, Any]] = []
    for n in range(12):
        info = with_image_fields(info, f"s3://b/t/exports/{n}.png", {"ocr_text": page, "caption": "a page"})
    urls_only = sum(len(json.dumps({"url": entry["url"]})) for entry in info)
    assert len(json.dumps(info)) <= IMAGE_INFO_MAX_BYTES + urls_only
    assert [entry["url"] for entry in info] == [f"s3://b/t/exports/{n}.png" for n in range(12)]
    assert info[0]["ocr_text"] == page and info[-1] == {"url": "s3://b/t/exports/11.png"}
    assert all(page.startswith(entry.get("ocr_text", "")) for entry in info)
    # merging the same texts again changes nothing
    assert with_image_fields(info, "s3://b/t/exports/0.png", {"ocr_text": page, "caption": "a page"}) == info
