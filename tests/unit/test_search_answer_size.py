"""A search answer stays within Lambda's 6 MB response (as the API writes it: JSON, non-ASCII escaped): past
its budget the hits' images lose their texts (each image's texts are hits of their own), then the last hits
are left out; an answer within it is untouched."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.operations import search


def _hit(n: int, text: str) -> dict[str, Any]:
    return {
        "id": f"c{n}",
        "content": text,
        "images": [{"url": f"https://files.example/{n}.png", "caption": text, "ocr_text": text}],
    }


def test_an_answer_within_its_budget_is_untouched() -> None:
    answer = [_hit(n, "港口" * 100) for n in range(10)]
    assert search.within_answer_size(json.loads(json.dumps(answer))) == answer


def test_past_its_budget_the_images_lose_their_texts_then_the_last_hits_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search, "SEARCH_ANSWER_MAX_BYTES", 70_000)
    page = "港口" * 2000  # 24 KB once escaped
    only_images = search.within_answer_size([_hit(n, "港口" * 500) for n in range(10)])
    assert len(only_images) == 10  # 10 × (6 KB + 12 KB of image texts): the texts go, every hit stays
    assert all(
        i == {"url": f"https://files.example/{n}.png"} for n, h in enumerate(only_images) for i in h["images"]
    )

    cut = search.within_answer_size([_hit(n, page) for n in range(10)])
    assert [h["id"] for h in cut] == ["c0", "c1"]
    assert len(json.dumps(cut)) <= 70_000
    # one hit is always answered, whatever its size
    assert [h["id"] for h in search.within_answer_size([_hit(0, page * 4)])] == ["c0"]
