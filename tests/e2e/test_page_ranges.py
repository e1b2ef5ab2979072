"""Issue 12: a PDF over `parse_parallel_pages` is parsed as page ranges in parallel (a fan-out on the
docreader queue), each range in its own invocation with its own sub-span, then put together in page order."""

from __future__ import annotations

import ctypes
import io
import re
from dataclasses import replace

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .stored import stored_keys

WORDS = [
    "anchor",
    "buoy",
    "cargo",
    "dock",
    "ebb",
    "ferry",
    "gale",
    "hull",
    "inlet",
    "jetty",
    "keel",
    "lantern",
    "mast",
    "net",
    "oar",
    "pier",
    "quay",
    "rope",
    "sail",
    "tide",
    "usher",
    "vessel",
    "wharf",
    "yacht",
    "zenith",
    "beacon",
    "channel",
    "drift",
    "estuary",
    "fathom",
    "harbour",
    "island",
]


def _line(pdf: pdfium.PdfDocument, page: pdfium.PdfPage, text: str, y: float, size: float = 11) -> None:
    obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(size))
    encoded = ctypes.create_string_buffer((text + "\0").encode("utf-16-le"))
    c.FPDFText_SetText(obj, ctypes.cast(encoded, ctypes.POINTER(c.FPDF_WCHAR)))
    c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 72, y)
    c.FPDFPage_InsertObject(page.raw, obj)


def long_pdf(pages: int) -> bytes:
    pdf = pdfium.PdfDocument.new()
    for number in range(1, pages + 1):
        page = pdf.new_page(612, 792)
        # varied words: lines that repeat on most pages (digits aside) are running headers and are dropped
        words = [WORDS[(number * 7 + k * 3) % len(WORDS)] for k in range(6)]
        _line(pdf, page, f"{' '.join(words[:3]).capitalize()} came with the morning boats.", 700)
        _line(
            pdf,
            page,
            f"Marker {number:04d}: the keeper logs entry {number:04d} ({' '.join(words[3:])}).",
            686,
        )
        _line(pdf, page, f"{' '.join(words[::-1]).capitalize()} was noted by the pilot.", 672)
        _line(pdf, page, "Harbour Manual", 40, 9)  # a running footer: removed in every range
        c.FPDFPage_GenerateContent(page.raw)
    buffer = io.BytesIO()
    pdf.save(buffer)
    return buffer.getvalue()


@pytest.mark.slow
def test_a_thousand_page_pdf_is_parsed_in_ranges_and_put_together_in_order(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    parse_in_ranges(api, runtime, services, pages=1000, range_pages=250)


def test_a_long_pdf_is_parsed_in_ranges_even_when_every_message_comes_twice(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The default suite's size: 90 pages in ranges of 30, every message delivered twice (at-least-once):
    each range is parsed once, the document once, in order."""
    runtime.inject_duplicates(True)
    try:
        parse_in_ranges(api, runtime, services, pages=90, range_pages=30)
    finally:
        runtime.inject_duplicates(None)


def parse_in_ranges(
    api: Api, runtime: LocalRuntime, services: Services, *, pages: int, range_pages: int
) -> None:
    services.replace_embedding_model(HashingEmbedding(64))
    services.settings = replace(
        services.settings, parse_parallel_pages=range_pages + 1, parse_range_pages=range_pages
    )
    kb = api.create_kb()
    created = api.upload(kb["id"], "manual.pdf", long_pdf(pages))
    assert created.status_code in (200, 201), created.json_body
    knowledge_id = created.json_body["data"]["id"]
    runtime.drain(timeout=900)

    knowledge = api.knowledge(knowledge_id)
    assert knowledge["parse_status"] == "completed", knowledge["error_message"]
    spans = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
    docreader = next(s for s in spans if s["span_id"] == "docreader")
    ranges = sorted(child["span_id"] for child in docreader["children"])
    expected = [
        f"docreader.pages[{a + 1}-{min(pages, a + range_pages)}]" for a in range(0, pages, range_pages)
    ]
    assert ranges == sorted(expected)  # one sub-span per range
    assert all(child["status"] == "done" for child in docreader["children"])
    assert docreader["outputs"]["pages_total"] == pages and docreader["outputs"]["ranges"] == len(expected)
    assert docreader["progress"]["done"] == docreader["progress"]["total"] == pages

    markdown = services.files.read(
        services.files.url_for(parsed_markdown_key(knowledge["tenant_id"], knowledge_id, 1))
    ).decode()
    markers = [int(n) for n in re.findall(r"Marker (\d{4})", markdown)]
    assert markers == list(range(1, pages + 1))  # every page, once, in page order
    assert "Harbour Manual" not in markdown

    probe = f"{pages * 3 // 4:04d}"
    hits = api.post(
        f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": f"keeper logs entry {probe}"}
    )
    assert any(probe in hit["content"] for hit in hits.json_body["data"][:5])
    # the ranges' objects are cleaned up once the document is put together
    document = f"{knowledge['tenant_id']}/{knowledge_id}/"
    assert f"{document}parsed/attempt-1.md" in stored_keys(services.files, document)  # the listing sees it
    assert not [key for key in stored_keys(services.files, document) if ".ranges/" in key]
