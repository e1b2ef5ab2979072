"""Issue 24: the chunk routes (list by cursor, read, edit with re-embedding and a summary refresh, switch on or
off) and the download links to the stored original and parsed Markdown, through the public path."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from unittest.mock import patch
from urllib.parse import parse_qs, urlsplit

import requests

from chalicelib.bootstrap import Services
from chalicelib.chunker import index_text
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace, IndexUnavailable

from .conftest import Api

PARAGRAPHS = "\n\n".join(
    f"Paragraph {i}: the ferry to island {i} leaves the quay at dawn and returns with the mail."
    for i in range(24)
)
DOC = f"# Ferries\n\n{PARAGRAPHS}\n".encode()


def _put(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"/api/v1{path}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


def _search(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 10})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def _document(api: Api, runtime: LocalRuntime, **kb: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    base = api.create_kb(chunking_config={"chunk_size": 120, "chunk_overlap": 0}, **kb)
    created = api.upload(base["id"], "ferries.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    return base, api.knowledge(created["id"])


def test_chunks_are_listed_by_cursor_and_read_one_by_one(
    api: Api, runtime: LocalRuntime, other_api: Api
) -> None:
    _, row = _document(api, runtime)
    seen: list[dict[str, Any]] = []
    cursor = ""
    for _ in range(50):
        page = api.get(f"/knowledge/{row['id']}/chunks?limit=4&cursor={cursor}").json_body["data"]
        assert len(page["items"]) <= 4
        seen += page["items"]
        cursor = page["next_cursor"]
        if not cursor:
            break
    everything = api.get(f"/knowledge/{row['id']}/chunks?limit=200").json_body["data"]
    assert everything["next_cursor"] == "" and len(everything["items"]) > 4
    assert [c["id"] for c in seen] == [c["id"] for c in everything["items"]]
    assert len({c["id"] for c in seen}) == len(seen)
    assert [c["chunk_index"] for c in seen] == sorted(c["chunk_index"] for c in seen)
    one = api.get(f"/knowledge/{row['id']}/chunks/{seen[1]['id']}")
    assert one.status_code == 200 and one.json_body["data"]["content"] == seen[1]["content"]
    assert "context_header" not in one.json_body["data"]
    missing = api.get(f"/knowledge/{row['id']}/chunks/{row['id']}-a1-99999")
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "chunk_not_found"
    assert other_api.get(f"/knowledge/{row['id']}/chunks").status_code == 404
    assert other_api.get(f"/knowledge/{row['id']}/chunks/{seen[1]['id']}").status_code == 404
    bad = api.get(f"/knowledge/{row['id']}/chunks?cursor=someone-else")
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_cursor"


def test_an_edited_chunk_is_searched_by_its_new_text_and_the_summary_is_made_again(
    api: Api, runtime: LocalRuntime, other_api: Api
) -> None:
    kb, row = _document(api, runtime, summary_model_id="local/extractive")
    assert row["summary_status"] == "completed"
    chunk = api.get(f"/knowledge/{row['id']}/chunks?limit=3").json_body["data"]["items"][1]
    new = "The lighthouse keeper polishes the brass lens every Tuesday before the storm season."
    assert (
        other_api.client.http.put(
            f"/api/v1/knowledge/{row['id']}/chunks/{chunk['id']}",
            headers={"X-API-Key": other_api.api_key, "Content-Type": "application/json"},
            body=json.dumps({"content": new}),
        ).status_code
        == 404
    )
    edited = _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"content": new})
    assert edited.status_code == 200, edited.json_body
    assert edited.json_body["data"]["content"] == new and edited.json_body["data"]["id"] == chunk["id"]
    hits = _search(api, kb["id"], "brass lens polished every Tuesday")
    assert hits and chunk["id"] in (hits[0].get("chunk_id"), hits[0].get("id"))
    old_words = chunk["content"].strip()[-60:]
    assert all(h.get("chunk_id", h["id"]) != chunk["id"] for h in _search(api, kb["id"], old_words)[:1])
    assert api.knowledge(row["id"])["summary_status"] == "pending"  # the summary is made again
    runtime.drain(timeout=120)
    assert api.knowledge(row["id"])["summary_status"] == "completed"
    empty = _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"content": ""})
    assert empty.status_code == 400 and empty.json_body["error"]["code"] == "empty_content"


def test_an_index_that_does_not_answer_is_a_503_and_the_same_edit_sent_again_lands(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb, row = _document(api, runtime)
    chunk = api.get(f"/knowledge/{row['id']}/chunks?limit=3").json_body["data"]["items"][2]
    path = f"/knowledge/{row['id']}/chunks/{chunk['id']}"
    new = "The harbour master rings the copper bell when the fog rolls over the breakwater."
    engine = services.engine(services.kbs.get(kb["id"]).retrieval_engine)  # type: ignore[union-attr]
    down = IndexUnavailable("index busy (HTTP 503)")
    with patch.object(type(engine), "batch_index", side_effect=down):
        refused = _put(api, path, {"content": new})
    assert refused.status_code == 503, refused.json_body
    assert refused.json_body["error"]["code"] == "index_unavailable"
    assert api.get(path).json_body["data"]["content"] == chunk["content"]  # the row did not move ahead
    with patch.object(type(engine), "hybrid_search", side_effect=down):
        searched = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "copper bell"})
    assert searched.status_code == 503 and searched.json_body["error"]["code"] == "index_unavailable"
    again = _put(api, path, {"content": new})  # the same request once the index answers
    assert again.status_code == 200 and again.json_body["data"]["content"] == new
    hits = _search(api, kb["id"], "harbour master copper bell fog breakwater")
    assert hits and chunk["id"] in (hits[0].get("chunk_id"), hits[0].get("id"))


def test_a_chunk_switched_off_leaves_search_and_stays_off_when_its_document_comes_back(
    api: Api, runtime: LocalRuntime
) -> None:
    kb, row = _document(api, runtime)
    chunk = api.get(f"/knowledge/{row['id']}/chunks?limit=6").json_body["data"]["items"][5]
    query = chunk["content"].split(":", 1)[-1][:80]

    def found() -> bool:
        return any(h.get("chunk_id", h["id"]) == chunk["id"] for h in _search(api, kb["id"], query))

    assert found()
    off = _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"is_enabled": False})
    assert off.status_code == 200 and off.json_body["data"]["is_enabled"] is False
    assert not found()
    assert _put(api, f"/knowledge/{row['id']}", {"enable_status": "disabled"}).status_code == 200
    assert _put(api, f"/knowledge/{row['id']}", {"enable_status": "enabled"}).status_code == 200
    assert not found()  # its document came back; the chunk switched off on its own did not
    assert _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"is_enabled": True}).status_code == 200
    assert found()


def test_only_a_completed_documents_chunks_change(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "ferries.md", DOC).json_body["data"]
    runtime.poll_once()  # parsed and chunked, not indexed yet
    page = api.get(f"/knowledge/{created['id']}/chunks").json_body["data"]["items"]
    if page:
        refused = _put(api, f"/knowledge/{created['id']}/chunks/{page[0]['id']}", {"content": "x y z"})
        assert refused.status_code == 409 and refused.json_body["error"]["code"] == "not_completed"
    runtime.drain(timeout=120)


def _redirect(api: Api, link: str) -> str:
    """Follows a download link (`<base>/r/{token}`, no API key): the presigned GET it redirects to."""
    assert link.startswith("http://127.0.0.1:8000/r/"), link  # the test client names no Host: `make run`'s
    answer = api.client.http.get(urlsplit(link).path)
    assert answer.status_code == 302, answer.json_body
    assert answer.headers.get("Cache-Control") == "no-store"
    return str(answer.headers["Location"])


def _refusal(api: Api, link: str) -> tuple[int, str]:
    answer = api.client.http.get(urlsplit(link).path)
    return answer.status_code, answer.json_body["error"]["code"]


def test_download_links_to_the_original_and_the_parsed_markdown(
    api: Api, runtime: LocalRuntime, other_api: Api
) -> None:
    _, row = _document(api, runtime)
    assert row["file_resource"].startswith("resource://")
    original = api.get(f"/knowledge/{row['id']}/file-url?kind=original")
    assert original.status_code == 200, original.json_body
    link = original.json_body["data"]
    assert link["expires_in"] == 900 and link["file_name"] == "ferries.md"
    assert link["resource"] == row["file_resource"]
    signed_url = _redirect(api, link["url"])
    signed = parse_qs(urlsplit(signed_url).query)
    if "X-Amz-Expires" in signed:  # SigV4: the redirect's own signature is short-lived
        assert int(signed["X-Amz-Expires"][0]) <= 60
    else:  # SigV2: an absolute expiry
        assert int(signed["Expires"][0]) - time.time() <= 61
    got = requests.get(signed_url, timeout=30)
    assert got.status_code == 200 and got.content == DOC
    assert "ferries.md" in got.headers.get("Content-Disposition", "")
    parsed = api.get(f"/knowledge/{row['id']}/file-url?kind=parsed").json_body["data"]
    markdown = requests.get(_redirect(api, parsed["url"]), timeout=30)
    assert markdown.status_code == 200 and b"ferry to island 3" in markdown.content
    assert other_api.get(f"/knowledge/{row['id']}/file-url").status_code == 404
    bad = api.get(f"/knowledge/{row['id']}/file-url?kind=secrets")
    assert bad.status_code == 400
    kb = api.create_kb()
    page = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"content": "# Notes\n\nhand written", "status": "draft"},
    ).json_body["data"]
    draft = api.get(f"/knowledge/{page['id']}/file-url?kind=parsed")
    assert draft.status_code == 404 and draft.json_body["error"]["code"] == "file_not_found"


def test_a_link_stops_working_when_it_expires_or_its_document_is_deleted(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    _, row = _document(api, runtime)
    live = api.get(f"/knowledge/{row['id']}/file-url?kind=original").json_body["data"]["url"]
    assert _refusal(api, live[:-4] + "AAAA") == (404, "grant_not_found")
    assert _refusal(api, "/r/" + "x" * 500) == (404, "grant_not_found")
    services.settings = replace(services.settings, download_url_seconds=1)
    short = api.get(f"/knowledge/{row['id']}/file-url?kind=original").json_body["data"]["url"]
    time.sleep(1.2)
    assert _refusal(api, short) == (410, "grant_expired")
    assert requests.get(_redirect(api, live), timeout=30).content == DOC  # the other link still works
    assert (
        api.client.http.delete(
            f"/api/v1/knowledge/{row['id']}", headers={"X-API-Key": api.api_key}
        ).status_code
        == 202
    )
    runtime.drain(timeout=120)
    assert _refusal(api, live) == (410, "resource_deleted")


# ---------------------------------------------------------------- what the edit and the links promise besides


def _keyword_hits(api: Api, kb_id: str, query: str) -> set[str]:
    """Chunks BM25 matched (a vector search answers every query with something)."""
    return {h["chunk_id"] for h in _search(api, kb_id, query) if h["match_type"] in ("keyword", "hybrid")}


def test_an_edit_replaces_the_keywords_and_the_vector_and_a_switch_refreshes_the_summary(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb, row = _document(api, runtime, summary_model_id="local/extractive")
    chunk = api.get(f"/knowledge/{row['id']}/chunks?limit=3").json_body["data"]["items"][2]
    assert chunk["id"] in _keyword_hits(api, kb["id"], "island 1")
    new = "The zeppelin moored above the quarry while the xylophone band played for the miners."
    assert _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"content": new}).status_code == 200
    assert chunk["id"] in _keyword_hits(api, kb["id"], "zeppelin xylophone")
    assert chunk["id"] not in _keyword_hits(api, kb["id"], chunk["content"].split(":", 1)[-1][:60])
    # the entry's vector is the new text's: a vector-only search for it puts the chunk first
    stored = services.kbs.get(kb["id"])
    assert stored is not None
    model = services.embedding_model(stored.embedding_model_id)
    vector = model.embed([index_text(row["title"], "", new)])[0]
    nearest = services.engine(stored.retrieval_engine).hybrid_search(
        IndexSpace.of(model), kb["id"], "zeppelin", vector, 3, keyword=False
    )
    assert nearest[0].chunk_id == chunk["id"]
    runtime.drain(timeout=120)
    assert api.knowledge(row["id"])["summary_status"] == "completed"
    spans = json.dumps(api.get(f"/knowledge/{row['id']}/spans").json_body["data"])
    assert "postprocess.summary_refresh" in spans  # the summary was made again, from the new text
    # switching a chunk off makes the summary stale too (it is made from the enabled chunks)
    off = _put(api, f"/knowledge/{row['id']}/chunks/{chunk['id']}", {"is_enabled": False})
    assert off.status_code == 200 and api.knowledge(row["id"])["summary_status"] == "pending"
    runtime.drain(timeout=120)
    assert api.knowledge(row["id"])["summary_status"] == "completed"
    huge = api.get(f"/knowledge/{row['id']}/chunks/{row['id']}-a{row['attempt']}-{'9' * 2000}")
    assert huge.status_code == 404 and huge.json_body["error"]["code"] == "chunk_not_found"


def test_a_link_is_signed_for_the_configured_time_and_hand_written_text_has_no_original(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    _, row = _document(api, runtime)
    # Signature V4 signs its X-Amz-Date and X-Amz-Expires (S3 refuses the link after them; moto checks no
    # signature): signed now, for no longer than the grant lives
    services.settings = replace(services.settings, download_url_seconds=2)
    link = api.get(f"/knowledge/{row['id']}/file-url?kind=original").json_body["data"]
    assert link["expires_in"] == 2
    signed = parse_qs(urlsplit(_redirect(api, link["url"])).query)
    assert signed["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]
    assert int(signed["X-Amz-Expires"][0]) <= 2
    signed_at = datetime.strptime(signed["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert abs(signed_at.timestamp() - time.time()) <= 5
    kb = api.create_kb()
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# Notes\n\nhand written"}
    ).json_body["data"]
    runtime.drain(timeout=120)
    none = api.get(f"/knowledge/{manual['id']}/file-url?kind=original")
    assert none.status_code == 404 and none.json_body["error"]["code"] == "file_not_found"
    parsed = api.get(f"/knowledge/{manual['id']}/file-url?kind=parsed")
    assert (
        parsed.status_code == 200
        and b"hand written"
        in requests.get(_redirect(api, parsed.json_body["data"]["url"]), timeout=30).content
    )
