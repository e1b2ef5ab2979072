"""A search answer's in-text and image links are checked against the resource catalog in one batched read
(it had been one read per link: a hit with many images made many reads), and the check is the same: only
the hit's own document's live stored files get a signed link."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import SearchRequest, validate
from chalicelib.domain.resources import resource_id_for
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import search as search_module
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.services import resources

from .conftest import drain


class _CountingCatalog:
    """The catalog with its reads counted (a `get` is one read, a `get_many` one batch)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.reads: list[str] = []

    def get(self, resource_id: str) -> Any:
        self.reads.append("get")
        return self.inner.get(resource_id)

    def get_many(self, resource_ids: Any) -> Any:
        self.reads.append("get_many")
        return self.inner.get_many(resource_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_every_link_of_an_answer_is_checked_in_one_batched_read(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def upload(name: str, text: bytes) -> Any:
        return create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=text, file_name=name))

    own = upload("kiln.md", b"# Kiln\n\nThe kiln glows orange at the pottery studio.\n")
    other = upload("glaze.md", b"# Glaze\n\nThe glaze recipe uses ash and feldspar.\n")
    drain(deps)
    own_row, other_row = deps.knowledge.get(own.id), deps.knowledge.get(other.id)
    assert own_row is not None and other_row is not None

    def stored(row: Any, name: str) -> str:
        url = deps.files.save(f"{kb.tenant_id}/{row.id}/images/{name}", b"\x89PNG" + name.encode())
        resources.register_written(deps, row, resources.ROLE_IMAGE, url, None, 1)
        return url

    mine = [stored(own_row, f"kiln-{n}.png") for n in range(4)]
    removed = stored(own_row, "removed.png")
    deps.resources.mark_deleted(resource_id_for(removed), datetime.now(UTC))
    foreign = stored(other_row, "glaze.png")  # another document's object, named in this one's text
    urls = [*mine, removed, foreign]
    chunk = deps.chunks.list(own.id)[0]
    text = chunk.content + "".join(f"\n\n![image]({url})" for url in urls)
    deps.chunks.put_many([replace(chunk, content=text, image_info=[{"url": url} for url in urls])])

    counting = _CountingCatalog(deps.resources)
    monkeypatch.setattr(deps, "resources", counting)
    request = validate(SearchRequest, {"query_text": "kiln pottery studio", "match_count": 10})
    hits = search_module.hybrid_search(deps, kb.tenant_id, kb.id, request)

    top = next(hit for hit in hits if hit["knowledge_id"] == own.id)
    assert counting.reads == ["get_many"]
    assert len(top["images"]) == len(mine)
    assert all(image["url"].startswith("https://files.mem.invalid/") for image in top["images"])
    assert top["content"].count("https://files.mem.invalid/") == len(mine)
    for refused in (removed, foreign):  # not signed, and the internal URL is not shown either
        assert refused not in top["content"] and refused.rsplit("/", 1)[-1] not in str(top)
