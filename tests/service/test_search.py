"""Search that applications can use (issue 26 item 3), on the fakes: filters by knowledge, tag, file type and
metadata resolved on the knowledge rows and applied inside the engine query, the retrievers, the minimum
score, no score-0 hits, one hit for a summary that repeats its short body, and signed links for images."""

from __future__ import annotations

import io
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, SearchRequest, validate
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.repetition import near_duplicates, words_of
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, Tenant
from chalicelib.operations import search as search_module
from chalicelib.services import resources

from .conftest import drain

DOCS = {
    "a.md": (
        "Harbour pilots guide ships past the breakwater at dawn.",
        ["ops"],
        {"dept": "ops", "year": 2024},
    ),
    "b.md": (
        "Harbour cranes lift containers onto ships at noon.",
        ["cargo"],
        {"dept": "cargo", "year": 2025},
    ),
    "c.txt": (
        "Harbour fees are paid at the office before ships leave.",
        [],
        {"dept": "ops", "year": 2023, "labels": ["fees", "office"], "owner": {"name": "Ines"}},
    ),
    "d.md": ("The lighthouse keeper trims the wick at noon.", ["ops"], {}),
}


def _upload(deps: Services, kb: KnowledgeBase, name: str, data: bytes, **fields: Any) -> Knowledge:
    from chalicelib.operations.create import FileUpload, create_from_file

    return create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=data, file_name=name, **fields))


@pytest.fixture
def corpus(deps: Services, kb: KnowledgeBase) -> dict[str, Knowledge]:
    from chalicelib.operations.tags import create_tag

    tags = {n: create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name=n)).id for n in ("ops", "cargo")}
    rows = {
        name: _upload(deps, kb, name, text.encode(), tag_ids=[tags[t] for t in tag_names], metadata=meta)
        for name, (text, tag_names, meta) in DOCS.items()
    }
    drain(deps)
    rows["tags"] = tags  # type: ignore[assignment]
    return rows


def _search(deps: Services, kb: KnowledgeBase, **body: Any) -> list[dict[str, Any]]:
    request = validate(SearchRequest, {"query_text": "harbour ships", "match_count": 10, **body})
    return search_module.hybrid_search(deps, kb.tenant_id, kb.id, request)


def _names(hits: list[dict[str, Any]], corpus: dict[str, Any]) -> set[str]:
    by_id = {row.id: name for name, row in corpus.items() if isinstance(row, Knowledge)}
    return {by_id[h["knowledge_id"]] for h in hits}


def test_each_filter_limits_the_documents(deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]) -> None:
    tags = corpus["tags"]
    assert _names(_search(deps, kb, retriever="keyword"), corpus) == {"a.md", "b.md", "c.txt"}
    assert _names(_search(deps, kb, knowledge_ids=[corpus["a.md"].id]), corpus) == {"a.md"}
    assert _names(_search(deps, kb, tag_ids=[tags["ops"]], retriever="keyword"), corpus) == {"a.md"}
    both = _search(deps, kb, tag_ids=[tags["ops"], tags["cargo"]], retriever="keyword")
    assert _names(both, corpus) == {"a.md", "b.md"}
    assert _names(_search(deps, kb, file_types=["txt"]), corpus) == {"c.txt"}
    assert _names(_search(deps, kb, file_types=[".TXT", "md"], retriever="keyword"), corpus) == {
        "a.md",
        "b.md",
        "c.txt",
    }
    ops = _search(deps, kb, metadata={"dept": "ops"}, retriever="keyword")
    assert _names(ops, corpus) == {"a.md", "c.txt"}
    recent = _search(deps, kb, metadata={"year": {"in": [2024, 2025]}}, retriever="keyword")
    assert _names(recent, corpus) == {"a.md", "b.md"}
    both_keys = _search(deps, kb, metadata={"dept": "ops", "year": {"in": [2024, 2025]}})
    assert _names(both_keys, corpus) == {"a.md"}
    assert _names(_search(deps, kb, metadata={"labels": "fees"}), corpus) == {"c.txt"}  # an element of a list
    assert _names(_search(deps, kb, metadata={"owner.name": "Ines"}), corpus) == {"c.txt"}  # nested
    assert _search(deps, kb, metadata={"year": "2024"}) == []  # no coercion: "2024" is not 2024
    assert _search(deps, kb, metadata={"year": True}) == []
    combined = _search(
        deps, kb, knowledge_ids=[corpus["a.md"].id, corpus["b.md"].id], tag_ids=[tags["cargo"]]
    )
    assert _names(combined, corpus) == {"b.md"}


def test_a_filter_is_applied_before_the_top_k(
    deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]
) -> None:
    """match_count 1 with a filter that excludes the unfiltered best still answers one hit."""
    best = _search(deps, kb, retriever="keyword", match_count=1)
    assert len(best) == 1
    others = [n for n in ("a.md", "b.md", "c.txt") if corpus[n].id != best[0]["knowledge_id"]]
    filtered = _search(deps, kb, knowledge_ids=[corpus[others[0]].id], match_count=1)
    assert _names(filtered, corpus) == {others[0]}


def test_a_tag_given_after_indexing_is_honoured(
    deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]
) -> None:
    from chalicelib.services.tagging import relate_new

    tags = corpus["tags"]
    c = deps.knowledge.update_fields(corpus["c.txt"].id, {"tag_ids": [tags["cargo"]]})
    assert c is not None
    relate_new(deps, c)
    assert _names(_search(deps, kb, tag_ids=[tags["cargo"]], retriever="keyword"), corpus) == {
        "b.md",
        "c.txt",
    }


def test_other_knowledge_bases_documents_never_pass_a_filter(
    deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]
) -> None:
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    other = create_kb(deps, kb.tenant_id, CreateKnowledgeBase(name="other"))
    assert _search(deps, other, knowledge_ids=[corpus["a.md"].id]) == []


def test_retrievers_scores_and_min_score(deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]) -> None:
    keyword = _search(deps, kb, retriever="keyword")
    assert {h["match_type"] for h in keyword} == {"keyword"}
    assert keyword[0]["score"] == pytest.approx(1.0) and all(0 < h["score"] <= 1 for h in keyword)
    vector = _search(deps, kb, retriever="vector")
    assert vector and {h["match_type"] for h in vector} == {"vector"}
    hybrid = _search(deps, kb)
    assert hybrid and all(h["score"] > 0 for h in hybrid + vector)  # no score-0 hit
    assert [h["score"] for h in _search(deps, kb, retriever="keyword", min_score=1.0)] == [pytest.approx(1.0)]
    cut = 0.5 * (vector[0]["score"] + vector[-1]["score"])
    assert all(h["score"] >= cut for h in _search(deps, kb, retriever="vector", min_score=cut))
    by_words = _search(deps, kb, vector_weight=0.0)
    order = [h["knowledge_id"] for h in keyword]
    assert by_words and [h["knowledge_id"] for h in by_words] == order[: len(by_words)]


def test_an_empty_resolution_searches_nothing(
    deps: Services, kb: KnowledgeBase, corpus: dict[str, Any]
) -> None:
    calls: list[Any] = []
    engine = deps.engine(kb.retrieval_engine)
    real = engine.hybrid_search
    engine.hybrid_search = lambda *a, **k: (calls.append(k), real(*a, **k))[1]  # type: ignore[method-assign]
    assert _search(deps, kb, metadata={"dept": "nobody"}) == []
    assert calls == []


def test_a_filter_too_broad_is_a_400(
    deps: Services, kb: KnowledgeBase, corpus: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "MAX_FILTER_DOCUMENTS", 2)
    with pytest.raises(BadRequest) as raised:
        _search(deps, kb, metadata={"dept": "ops"})
    assert raised.value.code == "filter_too_broad"
    assert _names(_search(deps, kb, file_types=["txt"], metadata={"dept": "ops"}), corpus) == {"c.txt"}


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"tag_ids": []}, "invalid_tag_ids"),
        ({"knowledge_ids": "k1"}, "invalid_knowledge_ids"),
        ({"tag_ids": ["t1#2026-01-01T00:00:00.000Z"]}, "invalid_tag_ids"),  # a key separator in an id
        ({"knowledge_ids": ["k1 or 1=1"]}, "invalid_knowledge_ids"),
        ({"file_types": ["p df"]}, "invalid_file_types"),
        ({"metadata": {"year": {"gt": 2020}}}, "invalid_metadata_filter"),
        ({"metadata": {"year": [2024]}}, "invalid_metadata_filter"),
        ({"metadata": {"year": None}}, "invalid_metadata_filter"),
        ({"metadata": {"year": {"in": []}}}, "invalid_metadata_filter"),
        ({"min_score": 1.5}, "invalid_min_score"),
        ({"retriever": "bm25"}, "invalid_retriever"),
        ({"vector_weight": -0.1}, "invalid_vector_weight"),
        ({"collapse_copies": "yes"}, "invalid_collapse_copies"),
    ],
)
def test_bad_filters_have_stable_codes(body: dict[str, Any], code: str) -> None:
    with pytest.raises(BadRequest) as raised:
        validate(SearchRequest, {"query_text": "x", **body})
    assert raised.value.code == code


def test_a_summary_that_repeats_a_short_body_is_one_hit(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.services.indexing import write_extra_chunks

    text = "The tide table for Northgate lists the spring tides of March."
    created = _upload(deps, kb, "tides.md", text.encode())
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None
    summary = Chunk(
        id=f"{row.id}-a{row.attempt}-summary",
        tenant_id=row.tenant_id,
        kb_id=kb.id,
        knowledge_id=row.id,
        seq=10**6,
        content=f"# Summary\n\n{text}",
        chunk_type=ChunkType.SUMMARY,
    )
    assert write_extra_chunks(deps, row, kb, [summary])
    for retriever in ("hybrid", "keyword", "vector"):
        hits = [
            h
            for h in _search(deps, kb, query_text="summary: spring tides Northgate", retriever=retriever)
            if h["knowledge_id"] == row.id
        ]
        assert len(hits) == 1, (retriever, hits)
        if retriever != "hybrid":  # (fused, the body is last in both lists of two: min-max gives it 0)
            # the summary ranks first on its word "summary"; the body's chunk, which has a place in the
            # document, stands for both at the summary's score
            assert hits[0]["chunk_type"] == "text", (retriever, hits)


def test_near_duplicates_are_judged_on_words() -> None:
    def same(a: str, b: str) -> bool:
        return near_duplicates(words_of(a), words_of(b))

    assert same("# Summary\n\nThe tide is **high**.", "the TIDE is high")
    assert same("北门港的潮汐表", "# 摘要\n\n北门港的潮汐表。")
    assert not same("The tide is high.", "The tide is low at noon.")
    row = "Paragraph {0}: the ferry to island {0} leaves the quay at dawn and returns with the mail."
    assert not same(row.format(1), row.format(2))  # a template's rows are different facts
    assert not same("the tide is high", "the tide is higher")  # whole words
    assert not same("The tide is high.", "The tide is high. " + "Boats wait for the evening ebb. " * 3)


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (120, 90), (200, 80, 20)).save(buffer, "PNG")  # larger than an icon
    return buffer.getvalue()


def test_image_links_in_hits_are_signed_never_internal(deps: Services, kb: KnowledgeBase) -> None:
    from dataclasses import replace

    created = _upload(deps, kb, "kiln.md", b"# Kiln\n\nThe kiln glows orange at the pottery studio.\n")
    drain(deps)
    stored = deps.files.save(f"{kb.tenant_id}/{created.id}/images/kiln.png", _png())
    resources.register_written(deps, deps.knowledge.get(created.id), resources.ROLE_IMAGE, stored, None, 1)
    chunk = deps.chunks.list(created.id)[0]
    text = f"{chunk.content}\n\n![kiln]({stored})"
    deps.chunks.put_many([replace(chunk, content=text, image_info=[{"url": stored, "caption": "a kiln"}])])
    hits = _search(deps, kb, query_text="kiln pottery studio")
    assert hits and hits[0]["knowledge_id"] == created.id
    for hit in hits:
        assert "mem://" not in str(hit)
    top = hits[0]
    assert "![kiln](https://files.mem.invalid/" in top["content"]
    assert [(i["url"].startswith("https://files.mem.invalid/"), i["caption"]) for i in top["images"]] == [
        (True, "a kiln")
    ]


def test_a_store_that_cannot_sign_serves_images_from_one_copy_deleted_with_the_document(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `local://` store cannot sign links: the image is copied into the files bucket once (a second search
    signs the same copy) and the delete task removes the copy with the document."""
    from dataclasses import replace

    from chalicelib.adapters.memory import MemoryFileStore
    from chalicelib.tasks.delete import delete_one

    def cannot_sign(*_: Any, **__: Any) -> str:
        raise NotImplementedError("no presigned URLs here")

    monkeypatch.setattr(deps.files, "presign_get", cannot_sign)
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    created = _upload(deps, kb, "kiln.md", b"# Kiln\n\nThe kiln glows orange at the pottery studio.\n")
    drain(deps)
    stored = deps.files.save(f"{kb.tenant_id}/{created.id}/images/kiln.png", _png())
    resources.register_written(deps, deps.knowledge.get(created.id), resources.ROLE_IMAGE, stored, None, 1)
    chunk = deps.chunks.list(created.id)[0]
    with_image = replace(chunk, content=f"{chunk.content}\n\n![kiln]({stored})", image_info=[{"url": stored}])
    deps.chunks.put_many([with_image])
    saves: list[str] = []
    real_save = inbox.save
    monkeypatch.setattr(inbox, "save", lambda key, *a, **k: (saves.append(key), real_save(key, *a, **k))[1])
    first = _search(deps, kb, query_text="kiln pottery studio")[0]
    second = _search(deps, kb, query_text="kiln pottery studio")[0]
    copies = inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/image-")
    assert len(copies) == 1 and saves == copies  # copied once, signed twice
    assert copies[0] in first["images"][0]["url"] and copies[0] in second["content"]
    assert inbox.read(inbox.url_for(copies[0])) == _png()
    delete_one(deps, created.id)
    assert inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/") == []


def test_a_retriever_the_knowledge_base_has_no_index_for_is_a_400(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    keyword_only = create_kb(
        deps,
        kb.tenant_id,
        CreateKnowledgeBase.model_validate({"name": "words", "indexing_strategy": {"vector_enabled": False}}),
    )
    with pytest.raises(BadRequest) as raised:
        _search(deps, keyword_only, retriever="vector")
    assert raised.value.code == "retriever_unavailable"
    assert _search(deps, keyword_only) == [] and _search(deps, keyword_only, retriever="keyword") == []


def test_max_chunks_per_document_lets_other_documents_in(deps: Services, kb: KnowledgeBase) -> None:
    """A sheet whose every row names the query's columns fills the answer; with the cap, the short document
    that has the words once is in, and a search of the sheet alone still answers `match_count` hits."""
    rows = "\n\n".join(
        f"Berth {n}: harbour ships, harbour ships and harbour cranes at quay {n} of the eastern dock."
        for n in range(60)
    )
    sheet = _upload(deps, kb, "berths.md", rows.encode())
    note = _upload(deps, kb, "note.md", b"The office keeps a list of harbour ships and their agents.")
    drain(deps)
    plain = _search(deps, kb, retriever="keyword", match_count=3)
    assert [h["knowledge_id"] for h in plain] == [sheet.id] * 3
    for cap, count in ((1, 2), (2, 3)):
        capped = _search(deps, kb, retriever="keyword", match_count=count, max_chunks_per_document=cap)
        assert [h["knowledge_id"] for h in capped] == [sheet.id] * cap + [note.id], cap
    # two documents, three places: the sheet's second hit waits, then fills the place left
    filled = _search(deps, kb, retriever="keyword", match_count=3, max_chunks_per_document=1)
    assert [h["knowledge_id"] for h in filled] == [sheet.id, sheet.id, note.id]
    alone = _search(deps, kb, knowledge_ids=[sheet.id], match_count=3, max_chunks_per_document=1)
    assert [h["knowledge_id"] for h in alone] == [sheet.id] * 3  # no other document: the sheet's next hits


def test_max_chunks_per_document_is_validated_and_not_for_faq(deps: Services, tenant: Any) -> None:
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    for bad in (0, 101, "2"):
        with pytest.raises(BadRequest) as raised:
            validate(SearchRequest, {"query_text": "x", "max_chunks_per_document": bad})
        assert raised.value.code == "invalid_max_chunks_per_document"
    faq = create_kb(deps, tenant.id, CreateKnowledgeBase(name="faq", type="faq"))
    with pytest.raises(BadRequest) as raised:
        _search(deps, faq, max_chunks_per_document=1)
    assert raised.value.code == "option_not_supported"


def test_collapse_copies_lists_another_documents_same_passage_under_the_better_hit(
    deps: Services, kb: KnowledgeBase
) -> None:
    passage = "The night ferry to Northgate leaves the harbour at ten and carries the mail."
    first = _upload(deps, kb, "ferry.md", f"# Ferries\n\n{passage}\n".encode())
    second = _upload(deps, kb, "ferry-copy.txt", passage.encode())
    other = _upload(deps, kb, "buses.txt", b"The night bus to Northgate leaves the square at ten.")
    drain(deps)
    plain = _search(deps, kb, query_text="night ferry Northgate harbour mail", retriever="keyword")
    assert {h["knowledge_id"] for h in plain} >= {first.id, second.id}
    assert all(h["copies"] == [] for h in plain)
    folded = _search(
        deps, kb, query_text="night ferry Northgate harbour mail", retriever="keyword", collapse_copies=True
    )
    [best] = [h for h in folded if h["knowledge_id"] in (first.id, second.id)]  # one place for the passage
    [copy] = best["copies"]
    assert {best["knowledge_id"], copy["knowledge_id"]} == {first.id, second.id}
    assert copy["knowledge_title"] in ("ferry.md", "ferry-copy.txt") and copy["chunk_id"]
    assert 0 < copy["score"] <= best["score"]
    assert other.id in {h["knowledge_id"] for h in folded}  # a similar text of its own is not a copy


@pytest.mark.parametrize("retriever", ["keyword", "hybrid"])
def test_a_documents_children_folding_into_one_answer_do_not_cut_the_answer_short(
    deps: Services, tenant: Tenant, retriever: str
) -> None:
    """One book's 40 child chunks fold into its one parent; the engine is asked deeper until match_count
    answers come back (6 other notes match too)."""
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    chunking = {
        "enable_parent_child": True,
        "parent_chunk_size": 4096,
        "child_chunk_size": 64,
        "chunk_overlap": 0,
    }
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="books", chunking_config=chunking))
    book = "# Book\n\n" + "\n\n".join(f"Harbour pilots board vessel number {i} today." for i in range(40))
    _upload(deps, kb, "book.md", book.encode())
    for n in range(6):
        filler = " ".join(f"filler{n}word{j}" for j in range(60))
        _upload(
            deps,
            kb,
            f"note{n}.md",
            f"# Note {n}\n\nThe harbour pilots association met in hall {n}. {filler}".encode(),
        )
    drain(deps)
    for count in (3, 5):
        hits = _search(deps, kb, query_text="harbour pilots", match_count=count, retriever=retriever)
        assert len(hits) == count, [h["knowledge_title"] for h in hits]
