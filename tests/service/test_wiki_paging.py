"""GET /knowledge-bases/{id}/wiki answers a page at a time: up to `limit` page records (1,000 at most) and a
part of the index, with `next_cursor` to go on, as the other listings; the parts joined are the whole index
and the pages together are every current page, once. Before, one answer held the whole index and every page
record: 10,000 documents of 5 pages made 13.8 MB, past Lambda's 6 MB response. A cursor it did not give (or
another knowledge base's) is 400 `invalid_cursor`; a bad limit is 400 `invalid_query`."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key

from .wiki_scale import big_wiki

V1 = "/api/v1"
LAMBDA_RESPONSE_BYTES = 6 * 1024 * 1024
INDEX_CHARS = 200_000  # a page's part of the index (enrichment_outputs.WIKI_INDEX_CHARS)


class Reader:
    def __init__(self, deps: Services, client: Client) -> None:
        self.deps, self.client = deps, client
        _, self.key = create_tenant_with_key(deps, "wiki-reader")

    def kb(self, name: str) -> Any:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        created = self.client.http.post(
            f"{V1}/knowledge-bases", headers=headers, body=json.dumps({"name": name}).encode()
        )
        assert created.status_code == 201, created.json_body
        kb = self.deps.kbs.get(created.json_body["data"]["id"])
        assert kb is not None
        return kb

    def get(self, kb_id: str, **params: Any) -> Any:
        qs = "&".join(f"{k}={v}" for k, v in params.items())
        return self.client.http.get(
            f"{V1}/knowledge-bases/{kb_id}/wiki" + (f"?{qs}" if qs else ""), headers={"X-API-Key": self.key}
        )


@pytest.fixture
def reader(deps: Services, client: Client) -> Reader:
    return Reader(deps, client)


def test_a_big_wiki_comes_in_pages_under_lambdas_limit_that_make_the_whole_wiki(reader: Reader) -> None:
    kb = reader.kb("big")
    big_wiki(reader.deps, kb, documents=2_000, pages=5, title_chars=200)
    whole_index = reader.deps.wiki.get_index(kb.id)
    assert whole_index is not None and len(whole_index) > INDEX_CHARS  # more than one page's part

    parts, pages, answers = [], [], 0
    params: dict[str, Any] = {}
    while True:
        answer = reader.get(kb.id, **params)
        assert answer.status_code == 200, answer.json_body
        assert len(answer.body) < LAMBDA_RESPONSE_BYTES
        data = answer.json_body["data"]
        assert len(data["pages"]) <= 1_000
        parts.append(data["index"])
        pages += data["pages"]
        answers += 1
        assert data["has_more"] is (data["next_cursor"] is not None)
        if not data["next_cursor"]:
            break
        params = {"cursor": data["next_cursor"]}
    assert answers == max(10, -(-len(whole_index) // INDEX_CHARS))  # records or index parts
    assert "".join(parts) == whole_index
    assert len(pages) == len({(p["knowledge_id"], p["chunk_id"]) for p in pages}) == 10_000


def test_a_small_wiki_is_one_page_as_before(reader: Reader) -> None:
    kb = reader.kb("small")
    big_wiki(reader.deps, kb, documents=3, pages=2)
    data = reader.get(kb.id).json_body["data"]
    assert data["index"] == reader.deps.wiki.get_index(kb.id)
    assert len(data["pages"]) == 6 and data["next_cursor"] is None and data["has_more"] is False
    assert set(data["pages"][0]) == {"knowledge_id", "document", "title", "chunk_id"}


def test_limit_pages_the_records_and_the_cursor_goes_on(reader: Reader) -> None:
    kb = reader.kb("paged")
    big_wiki(reader.deps, kb, documents=3, pages=2)
    first = reader.get(kb.id, limit=4).json_body["data"]
    second = reader.get(kb.id, limit=4, cursor=first["next_cursor"]).json_body["data"]
    assert len(first["pages"]) == 4 and len(second["pages"]) == 2 and second["next_cursor"] is None
    assert second["index"] == ""  # the index came whole on the first page
    keys = [(p["knowledge_id"], p["chunk_id"]) for p in first["pages"] + second["pages"]]
    assert len(set(keys)) == 6


def _cursor(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def test_a_cursor_it_did_not_give_and_a_bad_limit_are_400(reader: Reader) -> None:
    kb, other = reader.kb("one"), reader.kb("two")
    big_wiki(reader.deps, kb, documents=3, pages=2)
    big_wiki(reader.deps, other, documents=3, pages=2)
    others = reader.get(other.id, limit=1).json_body["data"]["next_cursor"]
    forged = json.loads(base64.urlsafe_b64decode(others + "=" * (-len(others) % 4)))
    for cursor in (
        "not-a-cursor",
        others,  # another knowledge base's
        _cursor({**forged, "i": -1}),
        _cursor({**forged, "i": True}),
        _cursor({**forged, "a": ["only-one"]}),
        _cursor([1, 2]),
    ):
        answer = reader.get(kb.id, cursor=cursor)
        assert (answer.status_code, answer.json_body["error"]["code"]) == (400, "invalid_cursor"), cursor
    for limit in (0, 1001, "many"):
        answer = reader.get(kb.id, limit=limit)
        assert (answer.status_code, answer.json_body["error"]["code"]) == (400, "invalid_query"), limit
