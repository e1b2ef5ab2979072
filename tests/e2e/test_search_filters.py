"""Issue 26 item 3 through the API: `hybrid-search` filtered by knowledge ids, tags, file types and metadata,
with a minimum score and each retriever; bad filters are 400s with stable codes; the body's schema is in the
OpenAPI document; an image in a hit is a signed link that serves the image, never an internal URL."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from typing import Any

import pytest

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

V1 = "/api/v1"


def _png() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (120, 90), (240, 120, 30)).save(buffer, "PNG")
    return buffer.getvalue()


DOCS = {
    "pilots.md": (
        b"# Pilots\n\nHarbour pilots guide ships past the breakwater at dawn.\n",
        ["ops"],
        {"dept": "ops", "year": 2024},
    ),
    "cranes.md": (
        b"# Cranes\n\nHarbour cranes lift containers onto ships at noon.\n",
        ["cargo"],
        {"dept": "cargo", "year": 2025},
    ),
    "fees.txt": (
        b"Harbour fees are paid at the office before ships leave.\n",
        [],
        {"dept": "ops", "year": 2023},
    ),
}


@pytest.fixture
def corpus(api: Api, runtime: LocalRuntime) -> dict[str, Any]:
    kb = api.create_kb()
    tags = {
        n: api.post(f"/knowledge-bases/{kb['id']}/tags", {"name": n}).json_body["data"]["id"]
        for n in ("ops", "cargo")
    }
    ids = {}
    for name, (data, tag_names, meta) in DOCS.items():
        fields = {"metadata": json.dumps(meta)}
        if tag_names:
            fields["tag_ids"] = json.dumps([tags[t] for t in tag_names])
        response = api.upload(kb["id"], name, data, fields)
        assert response.status_code == 200, response.json_body
        ids[name] = response.json_body["data"]["id"]
    image = base64.b64encode(_png()).decode()
    kiln = (
        f"# Kiln\n\nThe kiln glows orange in the pottery studio.\n\n![kiln](data:image/png;base64,{image})\n"
    )
    ids["kiln.md"] = api.upload(kb["id"], "kiln.md", kiln.encode()).json_body["data"]["id"]
    runtime.drain(timeout=180)
    for knowledge_id in ids.values():
        assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    return {"kb": kb, "tags": tags, "ids": ids}


def _search(api: Api, kb_id: str, **body: Any) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": "harbour ships", **body})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def test_filters_min_score_and_retrievers(api: Api, corpus: dict[str, Any]) -> None:
    kb_id, tags, ids = corpus["kb"]["id"], corpus["tags"], corpus["ids"]
    names = {v: k for k, v in ids.items()}

    def found(**body: Any) -> set[str]:
        return {names[h["knowledge_id"]] for h in _search(api, kb_id, retriever="keyword", **body)}

    assert found() == {"pilots.md", "cranes.md", "fees.txt"}
    assert found(knowledge_ids=[ids["cranes.md"], ids["kiln.md"]]) == {"cranes.md"}
    assert found(tag_ids=[tags["ops"]]) == {"pilots.md"}
    assert found(tag_ids=[tags["ops"], tags["cargo"]]) == {"pilots.md", "cranes.md"}
    assert found(file_types=["txt"]) == {"fees.txt"}
    assert found(metadata={"dept": "ops"}) == {"pilots.md", "fees.txt"}
    assert found(metadata={"dept": "ops", "year": {"in": [2024, 2025]}}) == {"pilots.md"}
    assert found(metadata={"year": {"in": [2023, 2025]}}, file_types=["md"]) == {"cranes.md"}

    keyword = _search(api, kb_id, retriever="keyword")
    assert {h["match_type"] for h in keyword} == {"keyword"} and keyword[0]["score"] == pytest.approx(1.0)
    vector = _search(api, kb_id, retriever="vector", tag_ids=[tags["cargo"]])
    assert [names[h["knowledge_id"]] for h in vector] == ["cranes.md"] and vector[0]["match_type"] == "vector"
    hybrid = _search(api, kb_id, retriever="hybrid", vector_weight=0.5, match_count=20)
    assert hybrid and all(h["score"] > 0 for h in hybrid + keyword + vector)  # no score-0 hit
    best = _search(api, kb_id, retriever="keyword", min_score=1.0)
    assert [h["knowledge_id"] for h in best] == [keyword[0]["knowledge_id"]]
    assert all(h["copies"] == [] for h in hybrid)  # the field is always there; filled with collapse_copies


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"tag_ids": "t1"}, "invalid_tag_ids"),
        ({"knowledge_ids": []}, "invalid_knowledge_ids"),
        ({"file_types": [5]}, "invalid_file_types"),
        ({"metadata": {"year": {"gte": 2024}}}, "invalid_metadata_filter"),
        ({"min_score": -1}, "invalid_min_score"),
        ({"retriever": "semantic"}, "invalid_retriever"),
        ({"vector_weight": 2}, "invalid_vector_weight"),
        ({"max_chunks_per_document": 0}, "invalid_max_chunks_per_document"),
        ({"collapse_copies": "no"}, "invalid_collapse_copies"),
    ],
)
def test_a_bad_filter_is_a_400_with_a_stable_code(api: Api, body: dict[str, Any], code: str) -> None:
    kb = api.create_kb()
    response = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "x", **body})
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == code


def test_the_search_body_is_documented_with_its_codes(api: Api, client: Any) -> None:
    document = client.http.get(f"{V1}/openapi.json").json_body
    search = document["paths"][f"{V1}/knowledge-bases/{{kb_id}}/hybrid-search"]["post"]
    ref = search["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    codes = {name: prop.get("x-error-code") for name, prop in schema["properties"].items()}
    assert codes["metadata"] == "invalid_metadata_filter" and codes["retriever"] == "invalid_retriever"
    assert {"knowledge_ids", "tag_ids", "file_types", "min_score", "vector_weight"} <= set(codes)
    assert codes["max_chunks_per_document"] == "invalid_max_chunks_per_document"
    assert codes["collapse_copies"] == "invalid_collapse_copies"


def test_an_image_in_a_hit_is_a_signed_link_that_serves_it(api: Api, corpus: dict[str, Any]) -> None:
    """The S3 store signs its own links; a `local://` store's copy is in tests/service/test_search.py."""
    hits = _search(
        api, corpus["kb"]["id"], query_text="kiln pottery studio", knowledge_ids=[corpus["ids"]["kiln.md"]]
    )
    assert hits
    shown = json.dumps(hits)
    assert "local://" not in shown and "s3://" not in shown
    links = [part.split(")")[0] for part in hits[0]["content"].split("](")[1:]]
    assert links and all(link.startswith("http") for link in links)
    with urllib.request.urlopen(links[0], timeout=10) as response:
        assert response.read()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_short_documents_summary_that_repeats_it_stays_out_of_search(
    api: Api, runtime: LocalRuntime
) -> None:
    """Found in the README's curl walkthrough: a one-paragraph document's summary repeated its body, fused
    search ranked the summary first and gave the body, last in both lists of two, a score of 0, so the only
    hit was `# Summary` with no place in the document. The summary is now stored switched off."""
    kb = api.create_kb()
    body = b"# Pilots\n\nPilots guide ships past the breakwater at dawn. The pilot boards from the starboard side.\n"
    knowledge_id = api.upload(kb["id"], "pilots.md", body).json_body["data"]["id"]
    runtime.drain(timeout=120)
    row = api.knowledge(knowledge_id)
    assert row["summary_status"] == "completed" and "starboard" in row["description"]
    chunks = api.get(f"/knowledge/{knowledge_id}/chunks").json_body["data"]
    summary = next(c for c in chunks["items"] if c["chunk_type"] == "summary")
    assert summary["is_enabled"] is False and summary["metadata"]["repeats_body"] is True
    hits = _search(api, kb["id"], query_text="who boards the ship")
    assert [(h["chunk_type"], h["start_at"]) for h in hits] == [("text", 0)] and hits[0]["score"] > 0
