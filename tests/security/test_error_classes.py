"""Every error in its right class: what a retry cannot fix fails at once with its reason (no four tries
of a 90-minute visibility timeout), and a knowledge base that cannot be served answers 4xx, not 500.

Regression (issue 9): OCR wrapped its own "too large to OCR" and Pillow's decompression-bomb error as
transient, so a PNG bomb stayed `processing` for about 90 minutes per try, four tries; a knowledge base
with an unusable embedding model or an unconfigured engine looped the same way and its search answered 500.
"""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from e2e.conftest import Api

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import PermanentStageError
from chalicelib.local.runtime import LocalRuntime
from chalicelib.parsers.ocr import _normalise_image

from . import hostile_files as H

# ---------------------------------------------------------------- OCR input


def _gif(width: int, height: int) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("L", (width, height), 200).save(buf, format="GIF")
    return buf.getvalue()


@pytest.mark.parametrize(
    ("what", "data", "words"),
    [
        ("a PNG decompression bomb", H.png_bomb(), "decompression bomb"),
        ("a GIF decompression bomb", H.gif_bomb(), "decompression bomb"),
        ("an image over the OCR cap", H.png_bomb(8000, 8000), "too large to OCR"),
        ("a truncated GIF", _gif(300, 300)[:60], "damaged"),
        ("a JPEG with no image data", H.jpeg_bomb(100, 100)[:40], "damaged"),
    ],
)
def test_ocr_input_that_can_never_be_read_is_a_permanent_error(what: str, data: bytes, words: str) -> None:
    with pytest.raises(PermanentStageError) as error:
        _normalise_image(data, upscale=True)
    assert words.lower() in error.value.message.lower(), (what, error.value.message)


# ---------------------------------------------------------------- knowledge bases that cannot be served


def _withdraw(services: Services, kb_id: str, **changes: str) -> None:
    """What a stored knowledge base looks like after the operator withdrew its model or engine (creation
    refuses such settings now, so the row is written as an older deployment left it)."""
    kb = services.kbs.get(kb_id)
    assert kb is not None
    services.kbs.put(replace(kb, **changes))


def _docreader_tries(api: Api, knowledge_id: str) -> list[dict[str, object]]:
    trace = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
    return [s for s in trace if s["span_id"] == "docreader"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"embedding_model_id": "openai/withdrawn-model"}, "is not offered here"),
        ({"retrieval_engine": "opensearch"}, "not configured"),
        ({"retrieval_engine": "solr"}, "does not exist"),
    ],
)
def test_an_unusable_knowledge_base_fails_documents_at_once_and_search_is_a_4xx(
    api: Api, runtime: LocalRuntime, services: Services, changes: dict[str, str], words: str
) -> None:
    if changes.get("retrieval_engine") == "opensearch" and services.settings.opensearch_url:
        pytest.skip("OpenSearch is configured in this run")
    kb = api.create_kb()
    _withdraw(services, kb["id"], **changes)
    created = api.upload(kb["id"], "note.md", b"# Note\n\nThe harbour lamp is lit at dusk.\n")
    assert created.status_code in (200, 201), created.json_body
    knowledge_id = created.json_body["data"]["id"]
    runtime.drain(timeout=120)
    row = api.knowledge(knowledge_id)
    assert row["parse_status"] == "failed", row
    assert words in row["error_message"], row["error_message"]
    # Failed as a permanent error in the first stage (an unclassified one reads "failed after 4 tries").
    assert row["error_code"] == "embedding_provider_fail" and "tries" not in row["error_message"]
    tries = _docreader_tries(api, knowledge_id)
    assert tries and tries[-1]["status"] == "failed"

    search = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "harbour lamp"})
    assert search.status_code == 409, search.json_body
    assert search.json_body["error"]["code"] == "knowledge_base_unusable"
    assert words in search.json_body["error"]["message"]


def test_a_usable_knowledge_base_is_unaffected(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "note.md", b"# Note\n\nThe harbour lamp is lit at dusk.\n").json_body[
        "data"
    ]
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    search = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "harbour lamp"})
    assert search.status_code == 200 and search.json_body["data"]


def test_a_document_of_a_knowledge_base_whose_model_was_withdrawn_can_still_be_deleted(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The delete does not wait forever on a configuration problem: the row, its chunks and its files go
    (the index entries of a model that is no longer offered cannot be named, and are left in place)."""
    kb = api.create_kb()
    created = api.upload(kb["id"], "note.md", b"# Note\n\nThe harbour lamp is lit at dusk.\n").json_body[
        "data"
    ]
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    _withdraw(services, kb["id"], embedding_model_id="openai/withdrawn-model")

    toggled = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"enable_status": "disabled"}',
    )
    assert 400 <= toggled.status_code < 500, toggled.json_body

    deleted = api.client.http.delete(f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code == 202, deleted.json_body
    runtime.drain(timeout=120)
    assert api.get(f"/knowledge/{created['id']}").status_code == 404
    assert services.chunks.list(created["id"]) == []
