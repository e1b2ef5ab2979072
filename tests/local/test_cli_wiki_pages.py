"""`kb wiki` reads GET /knowledge-bases/{id}/wiki page after page (`next_cursor` in `data`): the index's parts
joined and every page, not only the first page's (the route answers a page at a time, under Lambda's 6 MB)."""

from __future__ import annotations

from typing import Any

from chalicelib.local.cli.client import ApiClient


class PagedWiki(ApiClient):
    def __init__(self, pages: dict[str | None, dict[str, Any]]) -> None:
        super().__init__("http://127.0.0.1:9/api/v1", "k")
        self.pages = pages
        self.asked: list[str | None] = []

    def call(self, method: str, path: str, **kw: Any) -> Any:
        assert (method, path) == ("GET", "/knowledge-bases/kb-1/wiki")
        cursor = (kw.get("params") or {}).get("cursor")
        self.asked.append(cursor)
        return self.pages[cursor]


def page(index: str, titles: list[str], next_cursor: str | None) -> dict[str, Any]:
    pages = [{"knowledge_id": "k", "document": "d.md", "title": t, "chunk_id": t} for t in titles]
    return {"index": index, "pages": pages, "next_cursor": next_cursor, "has_more": next_cursor is not None}


def test_kb_wiki_reads_every_page_and_joins_the_index() -> None:
    client = PagedWiki(
        {
            None: page("# Wiki index\n\n## d.md\n- A", ["A", "B"], "c1"),
            "c1": page("\n- B\n", [], "c2"),  # a page may come short, even empty: the cursor says go on
            "c2": page("", ["C"], None),
        }
    )
    wiki = client.wiki("kb-1")
    assert wiki == {
        "index": "# Wiki index\n\n## d.md\n- A\n- B\n",
        "pages": page("", ["A", "B", "C"], None)["pages"],
    }
    assert client.asked == [None, "c1", "c2"]
