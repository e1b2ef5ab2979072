"""Upload → stages → state machine → `completed`, and found by hybrid search (issue 2's main path)."""

from __future__ import annotations

from project_paths import corpus_bytes

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

DOC = (
    b"# Sourdough starter\n\nFeed the starter with equal weights of flour and water every day.\n\n"
    b"## Baking\n\nBake the loaf in a Dutch oven at 250 degrees for twenty minutes with the lid on.\n"
)


def test_uploaded_markdown_completes_and_is_found_by_hybrid_search(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    response = api.upload(kb["id"], "bread.md", DOC)
    assert response.status_code == 200, response.json_body
    created = response.json_body["data"]
    assert created["parse_status"] == "pending" and created["enable_status"] == "disabled"

    runtime.drain(timeout=120)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed", knowledge
    assert knowledge["enable_status"] == "enabled"
    assert knowledge["chunk_count"] >= 1
    hits = api.post(
        f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "Dutch oven", "match_count": 3}
    )
    assert hits.status_code == 200
    top = hits.json_body["data"][0]
    assert "Dutch oven" in top["content"] and top["knowledge_id"] == created["id"]
    assert top["match_type"] == "hybrid"


def test_spans_show_every_stage_of_the_attempt(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "bread.md", DOC).json_body["data"]
    runtime.drain(timeout=120)

    spans = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]
    stages = {s["span_id"]: s for s in spans["trace"]}
    assert spans["attempt"] == 1 and spans["parse_status"] == "completed"
    assert [s["span_id"] for s in spans["trace"]] == [
        "docreader",
        "chunking",
        "embedding",
        "multimodal",
        "postprocess",
    ]
    assert stages["docreader"]["status"] == "done"
    assert stages["chunking"]["outputs"]["chunks_written"] >= 1
    assert (
        stages["embedding"]["outputs"]["entries_indexed"] == stages["chunking"]["outputs"]["chunks_written"]
    )
    assert stages["multimodal"]["status"] == "skipped"
    assert stages["postprocess"]["status"] == "done"
    assert spans["root"]["status"] == "done"


def test_a_corpus_csv_and_json_complete(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    ids = []
    for name in ("statsmodels-statecrime.csv", "vega-datasets-index.json", "korean-bill-1809890.ko.txt"):
        response = api.upload(kb["id"], name, corpus_bytes(name))
        assert response.status_code == 200, response.json_body
        ids.append(response.json_body["data"]["id"])
    runtime.drain(timeout=180)
    assert [api.knowledge(i)["parse_status"] for i in ids] == ["completed"] * 3


def test_summary_subtask_runs_through_the_enrichment_map(api: Api, runtime: LocalRuntime) -> None:
    """With a summary model the plan has one subtask: finalizing(1) → summary → decrement → completed."""
    kb = api.create_kb(summary_model_id="local/extractive")
    text = corpus_bytes("debian-faq-getting-debian.md")
    created = api.upload(kb["id"], "faq.md", text).json_body["data"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed"
    assert knowledge["summary_status"] == "completed"
    assert knowledge["pending_subtasks_count"] == 0
    assert len(knowledge["description"]) > 50


def test_chunker_preview_of_text_and_of_a_parsed_knowledge(api: Api, runtime: LocalRuntime) -> None:
    text = "# Guide\n\n" + "\n\n".join(f"Paragraph {i} about tides and moons." for i in range(60))
    preview = api.post(
        "/chunker/preview", {"text": text, "chunking_config": {"chunk_size": 200, "chunk_overlap": 0}}
    )
    assert preview.status_code == 200, preview.json_body
    data = preview.json_body["data"]
    assert data["total_chunks"] == len(data["chunks"]) > 5
    assert all(len(c["content"]) <= 200 for c in data["chunks"])
    assert data["diagnostics"]["effective_chunk_overlap"] == 0  # an explicit 0 is honoured

    kb = api.create_kb()
    created = api.upload(kb["id"], "bread.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    parsed = api.post("/chunker/preview", {"knowledge_id": created["id"], "limit": 1})
    assert parsed.status_code == 200 and len(parsed.json_body["data"]["chunks"]) == 1
    bad = api.post("/chunker/preview", {"text": "x", "chunking_config": {"chunk_size": 0}})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_chunking_config"


def test_parent_child_hits_return_the_parent_and_parents_are_not_indexed(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb(
        chunking_config={"enable_parent_child": True, "parent_chunk_size": 1200, "child_chunk_size": 200}
    )
    text = corpus_bytes("debian-faq-getting-debian.md")
    created = api.upload(kb["id"], "faq.md", text).json_body["data"]
    runtime.drain(timeout=180)
    spans = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]
    chunking = next(s for s in spans["trace"] if s["span_id"] == "chunking")["outputs"]
    embedding = next(s for s in spans["trace"] if s["span_id"] == "embedding")["outputs"]
    assert chunking["parents"] > 0 and chunking["children"] > chunking["parents"]
    assert embedding["entries_indexed"] == chunking["children"]  # parents stored, not indexed
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "CD-ROM", "match_count": 1})
    top = hits.json_body["data"][0]
    assert len(top["content"]) > 200  # the child's parent came back
