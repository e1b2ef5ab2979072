"""Issue 3 through the real path: formats, images with OCR, audio with ASR, URL import, bad input."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from page_images import turned_png
from project_paths import corpus_bytes

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

from .conftest import Api


@pytest.mark.parametrize(
    "name",
    [
        "python-howto-sorting.docx",
        "debian-faq-customizing.htm",
        "python-howto-sorting.epub",
        "statsmodels-statecrime.xlsx",
        "python-pptx-notes.pptx",
        "lppl.pdf",
        "python-library-json.mhtml",
    ],
)
def test_office_web_and_pdf_formats_complete(name: str, api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], name, corpus_bytes(name))
    assert created.status_code == 200, created.json_body
    runtime.drain(timeout=180)
    knowledge = api.knowledge(created.json_body["data"]["id"])
    assert knowledge["parse_status"] == "completed", knowledge["error_message"]
    assert knowledge["chunk_count"] > 0


def test_docx_images_are_stored_and_their_links_rewritten(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "img.docx", corpus_bytes("python-docx-having-images.docx"))
    runtime.drain(timeout=180)
    knowledge_id = created.json_body["data"]["id"]
    assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    docreader = next(
        s
        for s in api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
        if s["span_id"] == "docreader"
    )
    assert docreader["outputs"]["images"] >= 1
    chunks = services.chunks.list(knowledge_id)
    links = [link for c in chunks for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)", c.content)]
    exports = services.files.url_for(f"{created.json_body['data']['tenant_id']}/exports/")
    stored = [link for link in links if link.startswith(exports)]
    assert stored and all(services.files.exists(link) for link in stored)  # links point at the stored copies


@pytest.mark.requires_tesseract
@pytest.mark.parametrize("turned", [0, 180])  # a scan fed upside down is read upright
def test_an_image_upload_gets_ocr_text_in_the_markdown(
    turned: int, api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    page = corpus_bytes("debian-reference-p40.png")
    created = api.upload(kb["id"], "page.png", turned_png(page, turned) if turned else page)
    assert created.status_code == 200, created.json_body
    runtime.drain(timeout=180)
    knowledge = api.knowledge(created.json_body["data"]["id"])
    assert knowledge["parse_status"] == "completed"
    truth_words = corpus_bytes("debian-reference-p40.png.truth.txt").decode().split()
    long_words = {w for w in truth_words if len(w) > 6 and w.isalpha()}
    text = " ".join(c.content for c in services.chunks.list(knowledge["id"]))
    assert sum(w in text for w in long_words) >= 0.9 * len(long_words)  # read, not guessed at
    query = " ".join(w for w in truth_words if len(w) > 6)[:60]
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": query, "match_count": 1})
    assert hits.json_body["data"][0]["knowledge_id"] == knowledge["id"]


@pytest.mark.requires_whisper
def test_audio_is_transcribed_then_indexed(api: Api, runtime: LocalRuntime, services: Services) -> None:
    assert services.asr() is not None, "the ASR extra is installed, so the local stack must offer ASR"
    kb = api.create_kb()
    created = api.upload(kb["id"], "preamble.ogg", corpus_bytes("speech-gpl-preamble.ogg"))
    runtime.drain(timeout=300)
    knowledge = api.knowledge(created.json_body["data"]["id"])
    assert knowledge["parse_status"] == "completed"
    chunks = services.chunks.list(knowledge["id"])
    assert "license" in " ".join(c.content.lower() for c in chunks)


def test_media_gates_reject_up_front(api: Api, runtime: LocalRuntime, services: Services) -> None:
    services.replace_ocr_asr(None, None)
    kb = api.create_kb()
    image = api.upload(kb["id"], "a.png", corpus_bytes("debian-reference-p40.png"))
    assert image.status_code == 400 and image.json_body["error"]["code"] == "image_needs_vlm_or_ocr"
    audio = api.upload(kb["id"], "a.ogg", corpus_bytes("speech-gpl-preamble.ogg"))
    assert audio.status_code == 400 and audio.json_body["error"]["code"] == "audio_needs_asr"


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [  # bytes read in the test, so that a missing corpus file skips only its case
        ("truncated.pdf", lambda: corpus_bytes("amsmath.truncated.pdf"), "pdf"),
        ("lies.docx", lambda: b"this is plain text pretending to be a docx", "docx"),
        ("broken.xlsx", lambda: b"PK\x03\x04 not really a zip", "xlsx"),
    ],
)
def test_broken_files_fail_with_a_clear_reason_and_no_retries(
    name: str, data: Callable[[], bytes], reason: str, api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], name, data()).json_body["data"]
    runtime.drain(timeout=120)
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert knowledge["error_code"] in ("docreader_parse_failed", "unsupported_type")
    assert len(knowledge["error_message"]) > 10 and "Traceback" not in knowledge["error_message"]


PAGE = b"""<html><head><title>Tide tables</title></head><body><nav>menu</nav>
<article><h1>Tide tables</h1><p>Spring tides happen twice a month, near the new and the full moon,
when the sun and the moon pull in line.</p><p>Neap tides come in between.</p></article></body></html>"""


@pytest.fixture
def loopback_site(services: Services) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/notes.md":
                body, kind = b"# Notes\n\nThe harbour opens at dawn.\n", "text/markdown"
            else:
                body, kind = PAGE, "text/html; charset=utf-8"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    # The operator's allow-list lets tests reach loopback.
    services.settings = replace(services.settings, ssrf_allow=("127.0.0.1:*",))
    services.urls = SafeUrlImporter(AllowList.parse(services.settings.ssrf_allow))
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_url_import_of_a_page_and_of_a_file(api: Api, runtime: LocalRuntime, loopback_site: str) -> None:
    kb = api.create_kb()
    page = api.post(f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": f"{loopback_site}/tides"})
    file = api.post(f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": f"{loopback_site}/notes.md"})
    assert page.status_code == 201 and file.status_code == 201
    assert page.json_body["data"]["type"] == "url" and file.json_body["data"]["type"] == "file_url"
    runtime.drain(timeout=120)
    assert api.knowledge(page.json_body["data"]["id"])["parse_status"] == "completed"
    assert api.knowledge(file.json_body["data"]["id"])["parse_status"] == "completed"
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "spring tides full moon"})
    assert hits.json_body["data"][0]["knowledge_id"] == page.json_body["data"]["id"]
    assert "menu" not in hits.json_body["data"][0]["content"]  # main content only
    again = api.post(f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": f"{loopback_site}/tides"})
    assert again.status_code == 409 and again.json_body["error"]["code"] == "duplicate_url"
    assert again.json_body["data"]["id"] == page.json_body["data"]["id"]
    bad = api.post(f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": "ftp://example.com/x"})
    assert bad.status_code == 400


def test_a_name_that_does_not_resolve_is_rejected_with_a_clear_message(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    response = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": "https://no-such-host.invalid/x"}
    )
    assert response.status_code == 400 and "URL rejected" in response.json_body["error"]["message"]


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/admin",
        "http://169.254.169.254/latest/meta-data/",
        "http://localhost:8080/",
        "http://[::ffff:10.0.0.1]/",
        "http://0x7f000001/",
        "http://metadata.google.internal/",
        "http://10.1.2.3:6379/",
    ],
)
def test_hostile_urls_are_rejected_by_the_api(url: str, api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    response = api.post(f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": url})
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == "ssrf_blocked"


def test_parser_engines_are_listed_with_availability(api: Api, runtime: LocalRuntime) -> None:
    engines = api.get("/parser-engines").json_body["data"]
    names = {e["name"]: e for e in engines}
    assert {"simple", "builtin", "markitdown"} <= set(names)
    assert "pdf" in names["builtin"]["file_types"] and isinstance(names["markitdown"]["available"], bool)


def test_the_markitdown_engine_can_be_picked_per_upload(api: Api, runtime: LocalRuntime) -> None:
    import json

    kb = api.create_kb()
    created = api.upload(
        kb["id"],
        "sorting.docx",
        corpus_bytes("python-howto-sorting.docx"),
        {"process_config": json.dumps({"parser_engine_rules": {"docx": "markitdown"}})},
    )
    runtime.drain(timeout=120)
    knowledge_id = created.json_body["data"]["id"]
    assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    docreader = next(
        s
        for s in api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
        if s["span_id"] == "docreader"
    )
    assert docreader["outputs"]["engine"] == "markitdown"


def test_tenant_engine_rules_apply_and_an_upload_overrides_them(api: Api, runtime: LocalRuntime) -> None:
    import json

    put = api.client.http.put(
        "/api/v1/tenant/settings",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps({"parser_engine_rules": {"docx": "markitdown"}}),
    )
    assert put.status_code == 200
    assert api.get("/tenant/settings").json_body["data"]["parser_engine_rules"] == {"docx": "markitdown"}
    kb = api.create_kb()
    data = corpus_bytes("python-howto-sorting.docx")
    by_tenant = api.upload(kb["id"], "a.docx", data).json_body["data"]
    by_upload = api.upload(
        kb["id"],
        "b.docx",
        corpus_bytes("python-tutorial-controlflow.docx"),
        {"process_config": json.dumps({"parser_engine_rules": {"docx": "builtin"}})},
    ).json_body["data"]
    runtime.drain(timeout=120)

    def engine(knowledge_id: str) -> str:
        trace = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
        return str(next(s for s in trace if s["span_id"] == "docreader")["outputs"]["engine"])

    assert engine(by_tenant["id"]) == "markitdown"
    assert engine(by_upload["id"]) == "builtin"
