"""A URL import whose server serves binary data under no type it names (`application/octet-stream`), or
as a page: the document fails as unsupported, never becomes Markdown of its bytes (it had: a page parsed
from an executable's or an archive's bytes, indexed and searchable)."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.bootstrap import Services, build_services
from chalicelib.commands import UrlImportRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.settings import Settings

from .conftest import drain

LOOPBACK = ("127.0.0.0/8:*",)
BLOB = b"MZ\x90\x00" + bytes(range(256)) * 16


def test_binary_data_served_without_its_type_fails_as_unsupported(
    deps: Services, kb: KnowledgeBase, server
) -> None:
    from chalicelib.operations.create import create_from_url

    deps.settings = replace(deps.settings, ssrf_allow=LOOPBACK)
    deps.urls = build_services(Settings(ssrf_allow=LOOPBACK)).urls
    server.body("/download", BLOB, "application/octet-stream")
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=server.url("/download?id=3")))
    drain(deps, ("docreader",))
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == SpanErrorCode.UNSUPPORTED_TYPE
    assert deps.queue.bodies("chunking") == []  # type: ignore[attr-defined]
