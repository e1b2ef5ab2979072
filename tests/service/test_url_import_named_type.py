"""A file URL import with the type (or the file name) the tenant gave reads the download as that type,
WeKnora's download mode: neither the URL's extension, the server's Content-Type nor the bytes decide (they
had: the given type was never passed to the importer). The parser still checks the bytes against the type,
as an upload's: a PDF named docx is refused. With no type given, what the URL serves decides (the
sniffing of tests/service/test_url_import_served_type.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chalicelib.adapters.memory import ScriptedUrlImporter
from chalicelib.bootstrap import Services, build_services
from chalicelib.commands import UrlImportRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import FetchedDocument
from chalicelib.settings import Settings

from .conftest import MAIN_STAGES, drain

LOOPBACK = ("127.0.0.0/8:*",)
ROWS = b"name,port\nalpha,80\nbravo,443\ncharlie,8080\n"


@pytest.fixture
def real_urls(deps: Services) -> Services:
    deps.settings = replace(deps.settings, ssrf_allow=LOOPBACK)
    deps.urls = build_services(Settings(ssrf_allow=LOOPBACK)).urls
    return deps


def imported(deps: Services, kb: KnowledgeBase, request: UrlImportRequest) -> Knowledge:
    from chalicelib.operations.create import create_from_url

    created = create_from_url(deps, kb.tenant_id, kb.id, request)
    assert created.type.value == "file_url"
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.get(created.id)
    assert row is not None
    return row


def text_of(deps: Services, row: Knowledge) -> str:
    return "\n".join(chunk.content for chunk in deps.chunks.list(row.id))


@pytest.mark.parametrize("named", [{"file_type": "csv"}, {"file_name": "ports.csv"}, {"file_type": ".CSV"}])
def test_a_given_type_reads_a_download_served_as_octet_stream_as_that_type(
    real_urls: Services, kb: KnowledgeBase, server, named: dict[str, str]
) -> None:
    deps = real_urls
    server.body("/export", ROWS, "application/octet-stream")
    row = imported(deps, kb, UrlImportRequest(url=server.url("/export?id=9"), **named))
    assert row.parse_status != ParseStatus.FAILED, row.error_message  # indexed: on to the later stages
    assert "| alpha | 80 |" in text_of(deps, row)  # a table, not a page's paragraph of commas


def test_a_given_type_wins_over_the_urls_extension(
    real_urls: Services, kb: KnowledgeBase, server, corpus: Path
) -> None:
    deps = real_urls
    server.body("/report.pdf", (corpus / "python-howto-sorting.docx").read_bytes(), "application/pdf")
    row = imported(deps, kb, UrlImportRequest(url=server.url("/report.pdf"), file_type="docx"))
    assert row.parse_status != ParseStatus.FAILED, row.error_message  # indexed: on to the later stages
    assert row.file_type == "docx" and "sort" in text_of(deps, row).lower()


def test_the_parser_still_refuses_bytes_that_are_not_the_given_type(
    real_urls: Services, kb: KnowledgeBase, server, corpus: Path
) -> None:
    deps = real_urls
    server.body("/paper.pdf", (corpus / "screenplay-example.pdf").read_bytes(), "application/pdf")
    row = imported(deps, kb, UrlImportRequest(url=server.url("/paper.pdf"), file_name="paper.docx"))
    assert row.parse_status == ParseStatus.FAILED
    assert row.error_code == SpanErrorCode.UNSUPPORTED_TYPE
    assert deps.chunks.list(row.id) == []


def test_with_no_type_given_the_bytes_still_decide(
    real_urls: Services, kb: KnowledgeBase, server, corpus: Path
) -> None:
    deps = real_urls
    server.body("/notes.txt", (corpus / "screenplay-example.pdf").read_bytes(), "text/plain")
    row = imported(deps, kb, UrlImportRequest(url=server.url("/notes.txt")))
    assert row.file_type == "txt"  # what create records: the URL path's type, not a type the tenant gave
    assert row.parse_status != ParseStatus.FAILED, row.error_message  # indexed: on to the later stages
    assert text_of(deps, row).strip() and "%PDF" not in text_of(deps, row)


def test_the_worker_hands_the_given_type_to_the_importer_port(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    url = "https://example.org/export?id=4"
    urls.answer(url, FetchedDocument("export.md", "md", ROWS, "Export"))  # what the server would make of it
    row = imported(deps, kb, UrlImportRequest(url=url, file_type="csv"))
    assert row.parse_status != ParseStatus.FAILED, row.error_message
    assert "| alpha | 80 |" in text_of(deps, row)
