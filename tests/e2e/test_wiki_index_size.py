"""The wiki index of a large knowledge base on both adapters (DynamoDB on moto, the in-memory fake): it was one
item, refused past DynamoDB's 400 KB (1,000 documents × 5 pages), after which every finalize of the knowledge
base failed; it is kept in parts, an index stored as one item before still reads, and the fake refuses an
item past 400 KB as the table does."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chalicelib.adapters.dynamo.wiki import DynamoWikiRepo
from chalicelib.adapters.memory import wiki as memory_wiki
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.enrich.wiki import index_page
from chalicelib.ports import WikiRepo


@pytest.fixture(params=["dynamo", "memory"])
def wiki(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WikiRepo]:
    if request.param == "dynamo":
        services: Services = request.getfixturevalue("module_services")
        yield services.wiki
    else:
        yield memory_deps(index_dir=tmp_path / "index").wiki


def _table(services: Services) -> Any:
    repo = services.wiki
    assert isinstance(repo, DynamoWikiRepo)
    return repo.model


def _index(documents: int, word: str = "operational overview ") -> str:
    return index_page(
        [
            (f"report-{d:05d}.pdf", f"Page {p} of report {d}: " + word * 3)
            for d in range(documents)
            for p in range(5)
        ]
    )


def test_the_index_of_a_thousand_documents_is_stored_and_read_back(wiki: WikiRepo) -> None:
    kb_id = f"kb-{uuid.uuid4().hex[:8]}"
    big = _index(1_200)
    assert len(big.encode()) > 500_000
    wiki.put_index(kb_id, big)
    assert wiki.get_index(kb_id) == big
    cjk = _index(400, "运营概况与年度报告摘要")  # non-ASCII is 6 bytes an character in the item's JSON
    wiki.put_index(kb_id, cjk)
    assert wiki.get_index(kb_id) == cjk
    wiki.put_index(kb_id, cjk)  # unchanged: nothing written, still readable
    small = _index(2)
    wiki.put_index(kb_id, small)
    assert wiki.get_index(kb_id) == small
    wiki.delete_kb(kb_id)
    assert wiki.get_index(kb_id) is None


def test_a_smaller_index_leaves_no_parts_of_the_larger_one(module_services: Services) -> None:
    wiki, kb_id = module_services.wiki, f"kb-{uuid.uuid4().hex[:8]}"
    wiki.put_index(kb_id, _index(1_500))
    wiki.put_index(kb_id, _index(3))
    model = _table(module_services)
    keys = [i.key for i in model.query(kb_id, model.key.startswith("index"), consistent_read=True)]
    assert len(keys) == 2 and "index" in keys  # the head and one part


def test_an_index_stored_as_one_item_before_reads_and_is_replaced_by_the_first_write(
    module_services: Services,
) -> None:
    wiki, model, kb_id = module_services.wiki, _table(module_services), f"kb-{uuid.uuid4().hex[:8]}"
    model(kb_id, "index", body={"markdown": "# Wiki index\n\n## old.md\n- Old page\n"}).save()
    assert wiki.get_index(kb_id) == "# Wiki index\n\n## old.md\n- Old page\n"
    wiki.put_index(kb_id, _index(1_100))
    assert wiki.get_index(kb_id) == _index(1_100)


def test_the_fake_refuses_an_index_item_past_400_kb_as_the_table_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wiki = memory_deps(index_dir=tmp_path / "index").wiki
    monkeypatch.setattr(memory_wiki, "WIKI_INDEX_PART_BYTES", 10_000_000)  # as if kept in one item
    with pytest.raises(ValueError, match="400 KB"):
        wiki.put_index("kb-one-item", _index(1_000))
