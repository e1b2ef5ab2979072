"""A PDF figure becomes an image file without re-encoding where the stored stream already is one (issue 27):
a grey/RGB JPEG is kept byte for byte, a PNG-predicted Flate stream becomes the PNG's IDAT unchanged, and
other Flate images are written as PNG from pdfium's samples. Every path shows the pixels pdfium's own
image bitmap shows; CMYK JPEGs and other colour spaces still go through that bitmap."""

from __future__ import annotations

import io
import zlib

import pypdfium2 as pdfium
import pypdfium2.raw as c
import pytest
from PIL import Image, ImageChops, ImageDraw

from chalicelib.parsers.pdf_figures import figure_image
from chalicelib.ports import ReadRequest

W, H = 96, 88  # at least FIGURE_MIN_PX (80) each way: kept as a figure


def _picture(mode: str) -> Image.Image:
    """A picture with flat areas, edges and a gradient (every PNG row filter has work to do)."""
    image = Image.linear_gradient("L").resize((W, H)).convert(mode)
    draw = ImageDraw.Draw(image)
    draw.rectangle((10, 12, 50, 60), fill="white" if mode == "L" else (200, 30, 90))
    draw.line((0, H - 1, W - 1, 0), fill="black" if mode == "L" else (0, 0, 0), width=3)
    return image


def _samples(image: Image.Image) -> bytes:
    return image.tobytes()


def _predicted(image: Image.Image) -> bytes:
    """The picture's rows, each behind a PNG filter byte (cycling through None, Sub, Up, Average, Paeth
    would need the encoder; None and Up are enough to tell the rows apart), deflated."""
    channels = len(image.getbands())
    raw = image.tobytes()
    stride = W * channels
    out = bytearray()
    for y in range(H):
        row = raw[y * stride : (y + 1) * stride]
        if y % 2 and y:
            above = raw[(y - 1) * stride : y * stride]
            out += b"\x02" + bytes((a - b) % 256 for a, b in zip(row, above, strict=True))
        else:
            out += b"\x00" + row
    return zlib.compress(bytes(out), 6)


def _pdf_with_image(stream: bytes, image_dict: str) -> bytes:
    """A one-page PDF (a line of text and one image XObject drawn over a fifth of the page), written by
    hand: pypdfium2 cannot write an image stream with DecodeParms."""
    content = b"BT /F1 12 Tf 72 720 Td (A figure follows.) Tj ET q 300 0 0 250 150 300 cm /Im1 Do Q"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> /XObject << /Im1 6 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Type /XObject /Subtype /Image /Width {W} /Height {H} {image_dict} /Length {len(stream)} >>\n"
        "stream\n".encode()
        + stream
        + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.5\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def _jpeg(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


CASES = {
    "jpeg-rgb": (
        lambda: _jpeg(_picture("RGB")),
        "/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode",
    ),
    "jpeg-grey": (
        lambda: _jpeg(_picture("L")),
        "/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /DCTDecode",
    ),
    "jpeg-cmyk": (
        lambda: _jpeg(_picture("RGB").convert("CMYK")),
        "/ColorSpace /DeviceCMYK /BitsPerComponent 8 /Filter /DCTDecode",
    ),
    "flate-rgb": (
        lambda: zlib.compress(_samples(_picture("RGB"))),
        "/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode",
    ),
    "flate-grey": (
        lambda: zlib.compress(_samples(_picture("L"))),
        "/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode",
    ),
    "flate-rgb-png-predictor": (
        lambda: _predicted(_picture("RGB")),
        "/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /FlateDecode "
        f"/DecodeParms << /Predictor 15 /Colors 3 /BitsPerComponent 8 /Columns {W} >>",
    ),
    "flate-grey-png-predictor": (
        lambda: _predicted(_picture("L")),
        "/ColorSpace /DeviceGray /BitsPerComponent 8 /Filter /FlateDecode "
        f"/DecodeParms << /Predictor 15 /Colors 1 /BitsPerComponent 8 /Columns {W} >>",
    ),
    "flate-indexed": (
        lambda: zlib.compress(bytes((x * 7 + y) % 4 for y in range(H) for x in range(W))),
        "/ColorSpace [/Indexed /DeviceRGB 3 <FF000000FF000000FFFFFFFF>] /BitsPerComponent 8 /Filter /FlateDecode",
    ),
}
# how each case is written: the stored stream as it is, a PNG around the stored stream, or encoded anew
EXPECTED = {
    "jpeg-rgb": ("image/jpeg", "stored"),
    "jpeg-grey": ("image/jpeg", "stored"),
    "jpeg-cmyk": ("image/png", "encoded"),
    "flate-rgb": ("image/png", "encoded"),
    "flate-grey": ("image/png", "encoded"),
    "flate-rgb-png-predictor": ("image/png", "idat"),
    "flate-grey-png-predictor": ("image/png", "idat"),
    "flate-indexed": ("image/png", "encoded"),
}


def _image_object(pdf: pdfium.PdfDocument) -> pdfium.PdfImage:
    (obj,) = list(pdf[0].get_objects(filter=(c.FPDF_PAGEOBJ_IMAGE,)))
    return obj


def _rgb(image: Image.Image) -> Image.Image:
    return image.convert("RGB")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_figure_file_shows_what_pdfium_shows(case: str) -> None:
    make, image_dict = CASES[case]
    stream = make()
    pdf = pdfium.PdfDocument(_pdf_with_image(stream, image_dict))
    try:
        obj = _image_object(pdf)
        data, mime = figure_image(obj, c)
        expected = _rgb(obj.get_bitmap(render=False).to_pil())
    finally:
        pdf.close()
    want_mime, how = EXPECTED[case]
    assert mime == want_mime
    got = Image.open(io.BytesIO(data))
    assert got.format == ("JPEG" if mime == "image/jpeg" else "PNG") and got.size == (W, H)
    if how == "stored":
        assert data == stream
    elif how == "idat":
        assert stream in data  # the stored zlib stream is the PNG's image data, unchanged
    else:
        assert stream not in data
    diff = ImageChops.difference(_rgb(got), expected).getextrema()
    tolerance = 2 if mime == "image/jpeg" else 0  # two JPEG decoders may round a sample differently
    assert max(high for _low, high in diff) <= tolerance, diff


def test_the_reader_keeps_a_stored_jpeg_figure_as_a_jpg(reader) -> None:
    stream = _jpeg(_picture("RGB"))
    data = _pdf_with_image(stream, CASES["jpeg-rgb"][1])
    result = reader.read(ReadRequest(data=data, file_name="figure.pdf", file_type="pdf"))
    (figure,) = result.images
    assert (figure.ref, figure.mime_type, figure.page) == ("pdf-image-p1-1.jpg", "image/jpeg", 1)
    assert figure.data == stream
    assert "A figure follows." in result.markdown and "![](pdf-image-p1-1.jpg)" in result.markdown
