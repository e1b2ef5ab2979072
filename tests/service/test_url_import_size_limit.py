"""WEKNORA_MAX_FILE_SIZE holds for a URL import as for an upload: the size is known only once the worker
fetches it, so the document fails with `file_too_large` (the upload's code) and the limit as its reason,
and the real importer, as bootstrap builds it, stops reading at the limit instead of downloading it all."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest
from loopback import LoopbackServer

from chalicelib.adapters.memory import ScriptedUrlImporter
from chalicelib.bootstrap import Services, build_services
from chalicelib.commands import UrlImportRequest
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import EnableStatus, KnowledgeBase, ParseStatus
from chalicelib.ports import FetchFailed
from chalicelib.settings import Settings

from .conftest import MAIN_STAGES, drain, upload
from .test_url_import_storage import import_url

LIMIT = 1000
BODY = b"# Tides\n\n" + b"Spring tides follow the full moon. " * 150  # ~5 KB
LOOPBACK = ("127.0.0.0/8:*",)


def test_a_url_import_past_the_file_size_limit_fails_as_an_upload_is_refused(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    deps.settings = replace(deps.settings, max_file_size=LIMIT)
    with pytest.raises(AppError) as refused:
        upload(deps, kb, "tides.md", BODY)
    assert refused.value.code == "file_too_large"

    created = import_url(deps, kb, urls, BODY)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == "file_too_large" and f"{LIMIT} bytes" in row.error_message


def test_a_url_import_within_the_limit_is_indexed(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    deps.settings = replace(deps.settings, max_file_size=len(BODY))
    created = import_url(deps, kb, urls, BODY)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED, row.error_message
    assert row.file_size == len(BODY)


@pytest.fixture
def endless(server: LoopbackServer) -> Iterator[str]:
    """A page with no declared length that sends 2 KB, then holds the connection until the test ends: a
    client that reads on past the limit waits for the rest (and, after 10 s, gets it and succeeds)."""
    released = threading.Event()

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/markdown")
        h.end_headers()
        h.wfile.write(b"# Endless\n\n" + b"x" * 2000)
        h.wfile.flush()
        released.wait(10)
        with contextlib.suppress(OSError):  # the client has hung up
            h.wfile.write(b"the rest\n")

    server.routes["/endless.md"] = route
    yield server.url("/endless.md")
    released.set()


def test_the_importer_bootstrap_builds_stops_reading_at_the_file_size_limit(endless: str) -> None:
    importer = build_services(Settings(max_file_size=LIMIT, ssrf_allow=LOOPBACK)).urls
    with pytest.raises(FetchFailed) as failed:
        importer.fetch(endless)
    assert failed.value.permanent and failed.value.code == "file_too_large"
    assert f"{LIMIT} bytes" in failed.value.message


def test_a_url_import_through_the_real_importer_fails_with_file_too_large(
    deps: Services, kb: KnowledgeBase, endless: str
) -> None:
    from chalicelib.operations.create import create_from_url

    deps.settings = replace(deps.settings, max_file_size=LIMIT, ssrf_allow=LOOPBACK)
    deps.urls = build_services(Settings(max_file_size=LIMIT, ssrf_allow=LOOPBACK)).urls
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=endless))
    drain(deps, ("docreader",))
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == "file_too_large" and f"{LIMIT} bytes" in row.error_message
