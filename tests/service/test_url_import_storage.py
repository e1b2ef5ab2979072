"""A URL import's size on the fakes: known only once the worker fetches it, recorded on the row by the
docreader (for its own try only) and counted against the tenant's storage when the document is indexed."""

from __future__ import annotations

from typing import Any

from chalicelib.adapters.memory import MemoryKnowledgeRepo, ScriptedUrlImporter
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest, UrlImportRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import EnableStatus, Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import FetchedDocument
from chalicelib.tasks.reparse import reparse

from .conftest import MAIN_STAGES, drain

URL = "https://example.org/tides.md"
BODY = b"# Tides\n\n" + b"Spring tides follow the full moon and the new moon. " * 100


def import_url(deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, body: bytes = BODY) -> Knowledge:
    from chalicelib.operations.create import create_from_url

    urls.answer(URL, FetchedDocument("tides.md", "md", body, "Tides"))
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=URL))
    assert created.file_size == 0  # nothing is fetched by the API
    return created


def parsed(deps: Services, row: Knowledge) -> int:
    """The size of the attempt's parsed Markdown, which the row counts with the fetched document."""
    key = parsed_markdown_key(row.tenant_id, row.id, row.attempt)
    return deps.files.size(deps.files.backend(row.storage_backend).url_for(key))


def used(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_used


def test_a_url_import_counts_its_fetched_size_and_a_reparse_counts_the_new_one(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    created = import_url(deps, kb, urls)
    drain(deps, MAIN_STAGES)
    row = rows.get(created.id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED
    counted = len(BODY) + parsed(deps, row)
    assert (row.file_size, row.storage_size, used(deps, kb)) == (len(BODY), counted, counted)

    shorter = b"# Tides\n\nSpring tides follow the full moon.\n"
    urls.answer(URL, FetchedDocument("tides.md", "md", shorter, "Tides"))  # the page changed since
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps, MAIN_STAGES)
    again = rows.get(created.id)
    assert again is not None and again.attempt == 2 and again.enable_status == EnableStatus.ENABLED
    counted = len(shorter) + parsed(deps, again)
    assert (again.file_size, again.storage_size, used(deps, kb)) == (len(shorter), counted, counted)


def test_a_url_import_that_does_not_fit_the_storage_left_fails_at_indexing(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=100, document_quota=0)
    created = import_url(deps, kb, urls)  # ~5 KB against 100 bytes
    drain(deps, MAIN_STAGES)
    row = rows.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == SpanErrorCode.QUOTA_EXCEEDED.value and row.enable_status == EnableStatus.DISABLED
    assert (row.storage_size, used(deps, kb)) == (0, 0)


def test_the_fetched_size_is_written_only_for_the_try_that_fetched_it(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    created = import_url(deps, kb, urls)
    real_fetch = urls.fetch

    def fetch_then_cancelled(url: str) -> Any:
        fetched = real_fetch(url)
        cancel(deps, kb.tenant_id, created.id)  # the user cancels while the page downloads
        return fetched

    urls.fetch = fetch_then_cancelled  # type: ignore[method-assign]
    drain(deps, MAIN_STAGES)
    row = rows.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.CANCELLED
    # its fetched size is not written; the Markdown its parse stored after the cancel is kept, and counts
    kept = parsed(deps, row)
    assert (row.file_size, row.storage_size, used(deps, kb)) == (0, kept, kept)


def test_a_redelivered_docreader_message_records_the_same_size_once(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.stages import docreader

    created = import_url(deps, kb, urls)
    drain(deps, ("docreader",))
    first = rows.get(created.id)
    assert first is not None and first.file_size == len(BODY)
    message = docreader.StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=1)
    docreader.run(deps, message)  # at-least-once: the same message again, before chunking ran
    drain(deps, MAIN_STAGES)
    row = rows.get(created.id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED
    counted = len(BODY) + parsed(deps, row)
    assert (row.file_size, row.storage_size, used(deps, kb)) == (len(BODY), counted, counted)
