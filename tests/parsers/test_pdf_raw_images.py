"""`pdf_pdfium.RawImage` (an image object over plain addresses, issue 27) answers as pypdfium2's `PdfImage`
does for every call the parser makes: bounds, pixel size, metadata, filters, raw and decoded data, bitmap,
and so the figure file made from it; on every kind of figure the figure-file tests write, nested ones too."""

from __future__ import annotations

import ctypes

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from test_pdf_figure_files import CASES, _pdf_with_image
from test_pdf_figures import _nested_pdf, build_pdf

from chalicelib.parsers.pdf_figures import figure_image
from chalicelib.parsers.pdf_pdfium import RawImage, address, image_handles, natives, page_size


def _documents() -> dict[str, bytes]:
    docs = {case: _pdf_with_image(make(), image_dict) for case, (make, image_dict) in CASES.items()}
    docs["flat"], docs["form-xobject"] = build_pdf(), _nested_pdf()
    return docs


DOCUMENTS = _documents()


def _metadata(meta: c.FPDF_IMAGEOBJ_METADATA) -> tuple[object, ...]:
    return tuple(getattr(meta, name) for name, _ in meta._fields_)


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_a_raw_image_answers_as_pypdfium2s_image(name: str) -> None:
    pdf = pdfium.PdfDocument(DOCUMENTS[name])
    fn = natives(c)
    try:
        compared = 0
        for i in range(len(pdf)):
            page = pdf[i]
            expected = list(page.get_objects(filter=(c.FPDF_PAGEOBJ_IMAGE,), max_depth=4))
            ours = [
                RawImage(h, address(page.raw), level, fn, c)
                for h, level in image_handles(address(page.raw), c)
            ]
            assert page_size(address(page.raw), fn) == page.get_size()
            assert len(ours) == len(expected)
            for raw, obj in zip(ours, expected, strict=True):
                assert raw.level == obj.level
                assert raw.get_bounds() == obj.get_bounds()
                assert raw.get_px_size() == obj.get_px_size()
                assert _metadata(raw.get_metadata()) == _metadata(obj.get_metadata())
                assert raw.get_filters() == obj.get_filters()
                for decode in (False, True):
                    assert bytes(raw.get_data(decode_simple=decode)) == bytes(
                        obj.get_data(decode_simple=decode)
                    )
                assert raw.get_bitmap().to_pil().tobytes() == obj.get_bitmap(render=False).to_pil().tobytes()
                assert figure_image(raw, c) == figure_image(obj, c)
                compared += 1
            page.close()
        assert compared >= 1
    finally:
        pdf.close()


def test_a_raw_image_that_pdfium_cannot_place_raises_pdfiums_error() -> None:
    """A NULL object: each call fails as pypdfium2's does (a PdfiumError, which the parser takes as an
    unreadable page), not with a crash."""
    fn = natives(c)
    pdf = pdfium.PdfDocument(DOCUMENTS["jpeg-rgb"])
    try:
        page = pdf[0]
        raw = RawImage(0, address(page.raw), 0, fn, c)
        for call in (raw.get_bounds, raw.get_px_size, raw.get_metadata, raw.get_bitmap):
            with pytest.raises(pdfium.PdfiumError):
                call()
        assert raw.get_filters() == [] and bytes(raw.get_data()) == b""
        assert ctypes.sizeof(raw.get_data(decode_simple=True)) == 0
        page.close()
    finally:
        pdf.close()
