"""A Flate figure without a predictor is inflated by `pdf_figures` itself when the file shows its stream
dictionary names no /DecodeParms (issue 27: pdfium's inflate was a LibreOffice diagram's biggest cost), and
its rows are filtered and deflated a block at a time. The PNG shows the pixels pdfium's own bitmap shows on
every path; a stream that may have a predictor (a TIFF predictor keeps the samples' size) or does not hold
the image's rows is left to pdfium."""

from __future__ import annotations

import io
import zlib

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from PIL import Image, ImageChops
from test_pdf_figure_files import CASES, H, W, _image_object, _pdf_with_image, _picture

from chalicelib.parsers import pdf_figures
from chalicelib.parsers.pdf_figures import _without_predictor, figure_image

RGB_DICT = "/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode"


def _tiff_predicted(image: Image.Image) -> bytes:
    """The picture's samples with TIFF predictor 2 applied (each sample minus the one a pixel to its left),
    deflated: as many bytes as the samples, so only the dictionary tells them apart."""
    channels = len(image.getbands())
    raw = image.tobytes()
    stride = W * channels
    out = bytearray(raw)
    for y in range(H):
        for x in range(stride - 1, channels - 1, -1):
            out[y * stride + x] = (raw[y * stride + x] - raw[y * stride + x - channels]) % 256
    return zlib.compress(bytes(out))


def _figure(document: bytes, with_document: bool) -> tuple[bytes, str, Image.Image, bool]:
    """(file, MIME type, pdfium's bitmap of the image, whether the file showed no predictor)."""
    pdf = pdfium.PdfDocument(document)
    try:
        obj = _image_object(pdf)
        stored = bytes(obj.get_data(decode_simple=False))
        width, height = obj.get_px_size()
        channels = obj.get_metadata().bits_per_pixel // 8
        inflated_here = _without_predictor(stored, width * height * channels, document)
        figure = figure_image(obj, c, document=document if with_document else None)
        expected = obj.get_bitmap(render=False).to_pil().convert("RGB")
    finally:
        pdf.close()
    assert figure is not None
    return figure[0], figure[1], expected, inflated_here


def _same_pixels(data: bytes, expected: Image.Image) -> None:
    got = Image.open(io.BytesIO(data))
    assert got.format == "PNG" and got.size == expected.size
    diff = ImageChops.difference(got.convert("RGB"), expected).getextrema()
    assert max(high for _low, high in diff) == 0, diff


@pytest.mark.parametrize("case", ["flate-rgb", "flate-grey"])
@pytest.mark.parametrize("block_bytes", [256 * 1024, 1000])  # one block; 3 rows (RGB) or 10 (grey) a block
def test_a_flate_figure_without_a_predictor_is_inflated_here_with_pdfiums_pixels(
    case: str, block_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pdf_figures, "_BLOCK_BYTES", block_bytes)
    make, image_dict = CASES[case]
    document = _pdf_with_image(make(), image_dict)
    data, mime, expected, inflated_here = _figure(document, with_document=True)
    assert inflated_here and mime == "image/png"
    _same_pixels(data, expected)
    # pdfium's samples through the same blocks: the same PNG
    assert _figure(document, with_document=False)[0] == data


def test_a_tiff_predicted_figure_is_left_to_pdfium() -> None:
    picture = _picture("RGB")
    stream = _tiff_predicted(picture)
    assert len(zlib.decompress(stream)) == len(picture.tobytes())
    parms = f"/DecodeParms << /Predictor 2 /Colors 3 /BitsPerComponent 8 /Columns {W} >>"
    document = _pdf_with_image(stream, f"{RGB_DICT} {parms}")
    data, _mime, expected, inflated_here = _figure(document, with_document=True)
    assert not inflated_here
    _same_pixels(data, expected)
    assert ImageChops.difference(expected, picture).getextrema() == ((0, 0), (0, 0), (0, 0))


@pytest.mark.parametrize(
    "extra",
    [
        "/DP << /Predictor 2 /Colors 3 /Columns 96 >>",  # the abbreviation (inline images)
        "/DecodeParm#73 << /Predictor 2 /Colors 3 /Columns 96 >>",  # a name spelt with an escape
        "/DecodeParms 9 0 R",  # an indirect dictionary
        "/Myobj true",  # the nearest `obj` is no object header
    ],
)
def test_a_dictionary_that_may_name_a_predictor_leaves_the_stream_to_pdfium(extra: str) -> None:
    stream = zlib.compress(_picture("RGB").tobytes())
    document = _pdf_with_image(stream, f"{RGB_DICT} {extra}")
    assert not _without_predictor(stream, W * H * 3, document)


def test_the_stream_found_twice_must_have_no_predictor_in_either_place() -> None:
    """As an incremental update would write it: the same object again, now with DecodeParms."""
    stream = zlib.compress(_picture("RGB").tobytes())
    document = _pdf_with_image(stream, RGB_DICT)
    assert _without_predictor(stream, W * H * 3, document)
    update = (
        f"6 0 obj\n<< /Type /XObject /Subtype /Image /Width {W} /Height {H} {RGB_DICT} /DecodeParms "
        f"<< /Predictor 2 /Colors 3 /Columns {W} >> /Length {len(stream)} >>\nstream\n"
    ).encode()
    assert not _without_predictor(stream, W * H * 3, document + update + stream + b"\nendstream\nendobj\n")


def test_a_stream_not_in_the_file_as_stored_or_in_a_big_file_is_left_to_pdfium() -> None:
    stream = zlib.compress(_picture("RGB").tobytes())
    document = _pdf_with_image(stream, RGB_DICT)
    assert not _without_predictor(stream, W * H * 3, document.replace(stream[:64], bytes(64)))
    assert not _without_predictor(stream, W * H * 3, document.replace(b"stream\n", b"stream \n"))
    assert not _without_predictor(stream, W * H * 3, document + bytes(4 * W * H * 3))
    assert not _without_predictor(stream, W * H * 3, None)


@pytest.mark.parametrize("rows", [H - 1, H + 1])
def test_a_stream_of_another_size_gives_what_pdfiums_samples_give(rows: int) -> None:
    """Rows short or over: not inflated here to a PNG (pdfium's samples and bitmap decide, as before)."""
    stream = zlib.compress(_picture("RGB").resize((W, rows)).tobytes())
    document = _pdf_with_image(stream, RGB_DICT)
    pdf = pdfium.PdfDocument(document)
    try:
        without = figure_image(_image_object(pdf), c)
        with_document = figure_image(_image_object(pdf), c, document=document)
    finally:
        pdf.close()
    assert with_document == without
