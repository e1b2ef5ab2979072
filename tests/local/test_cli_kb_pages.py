"""The CLI reads GET /knowledge-bases page after page (`next_cursor` beside `data`), so `kb list` and a
knowledge base named on the command line find every one, not only the first page's."""

from __future__ import annotations

from typing import Any

from chalicelib.local.cli.client import ApiClient


class Paged(ApiClient):
    def __init__(self, pages: dict[str | None, tuple[list[dict[str, Any]], str | None]]) -> None:
        super().__init__("http://127.0.0.1:9/api/v1", "k")
        self.pages = pages
        self.asked: list[str | None] = []

    def call(self, method: str, path: str, **kw: Any) -> Any:
        assert (method, path) == ("GET", "/knowledge-bases") and kw.get("whole") is True
        cursor = (kw.get("params") or {}).get("cursor")
        self.asked.append(cursor)
        data, next_cursor = self.pages[cursor]
        return {"success": True, "data": data, "next_cursor": next_cursor}


def test_every_page_is_read_and_a_name_on_a_later_page_is_found() -> None:
    client = Paged(
        {
            None: ([{"id": "kb-1", "name": "alpha"}], "c1"),
            "c1": ([], "c2"),  # a page may come short, even empty: the cursor says go on
            "c2": ([{"id": "kb-9", "name": "shared", "shared": True}], None),
        }
    )
    assert [kb["id"] for kb in client.knowledge_bases()] == ["kb-1", "kb-9"]
    assert client.asked == [None, "c1", "c2"]
    assert client.kb_id("shared") == "kb-9"
