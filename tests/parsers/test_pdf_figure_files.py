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


def _deck(pages: int) -> bytes:
    """Pages of text, each with the same logo (a repeated figure, dropped) and a figure of its own."""
    pdf = pdfium.PdfDocument.new()
    logo = _jpeg(_picture("RGB"))
    for n in range(pages):
        page = pdf.new_page(612, 792)
        obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", 12.0)
        text = f"Slide {n} is about topic {'abcdefgh'[n]} and its figure.\0".encode("utf-16-le")
        buf = (c.FPDF_WCHAR * (len(text) // 2)).from_buffer_copy(text)
        c.FPDFText_SetText(obj, buf)
        c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 72, 720)
        c.FPDFPage_InsertObject(page.raw, obj)
        for jpeg, (x, y) in ((logo, (500, 700)), (_jpeg(_picture("RGB").rotate(30 * (n + 1))), (150, 300))):
            image = pdfium.PdfImage.new(pdf)
            image.load_jpeg(io.BytesIO(jpeg), inline=True)
            image.set_matrix(pdfium.PdfMatrix().scale(100, 90).translate(x, y))
            page.insert_obj(image)
        page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()


def test_figures_left_for_the_second_pass_come_out_as_those_made_early(reader, monkeypatch) -> None:
    """The first pass makes image files while each page is loaded, up to the most a parse keeps plus a few
    (repeated logos take room too); the figures past that budget are made on the second pass, the same."""
    from chalicelib.parsers import pdf as pdf_parser
    from chalicelib.parsers import pdf_pdfium

    data = _deck(5)
    request = ReadRequest(
        data=data, file_name="deck.pdf", file_type="pdf", options={"limits": {"max_images": 3}}
    )
    early = reader.read(request)
    calls: list[int] = []
    load = pdf_pdfium.walk_objects

    def counted(page, pdfium_c):
        calls.append(1)
        return load(page, pdfium_c)

    monkeypatch.setattr(pdf_parser, "FIGURE_EARLY_EXTRA", -1)  # budget 2: the logo and page 1's figure
    monkeypatch.setattr(pdf_parser, "walk_objects", counted)  # the first pass
    monkeypatch.setattr(pdf_pdfium, "walk_objects", counted)  # the second, through image_handles
    late = reader.read(request)
    assert len(calls) == 5 + 2  # every page once, then pages 2 and 3 again for their figures
    assert [(i.ref, i.page) for i in early.images] == [
        ("pdf-image-p1-1.jpg", 1),
        ("pdf-image-p2-2.jpg", 2),
        ("pdf-image-p3-3.jpg", 3),
    ]
    assert late.markdown == early.markdown
    assert [(i.ref, i.mime_type, i.data) for i in late.images] == [
        (i.ref, i.mime_type, i.data) for i in early.images
    ]
    assert len({i.data for i in early.images}) == 3  # the pages' own figures, not the logo


def _jpeg_file(mode: str, **options: object) -> bytes:
    buf = io.BytesIO()
    _picture("RGB").convert(mode).save(buf, format="JPEG", **options)
    return buf.getvalue()


def _pillow_frame(data: bytes) -> tuple[int, int, int, int] | None:
    """What Pillow reads from the headers (bits, width, height, components); None where it refuses."""
    try:
        with Image.open(io.BytesIO(data), formats=("JPEG",)) as image:
            return image.bits, *image.size, len(image.getbands())  # type: ignore[attr-defined]
    except (OSError, SyntaxError):
        return None


JPEGS = {
    "grey": _jpeg_file("L"),
    "rgb": _jpeg_file("RGB"),
    "cmyk": _jpeg_file("CMYK"),
    "progressive": _jpeg_file("RGB", progressive=True),
    "exif-and-icc-before-the-frame": _jpeg_file(
        "RGB", exif=b"Exif\x00\x00" + bytes(300), icc_profile=bytes(2000)
    ),
    "fill-bytes-before-the-frame": _jpeg_file("L").replace(b"\xff\xc0", b"\xff\xff\xff\xc0", 1),
    "truncated-in-the-tables": _jpeg_file("RGB")[:40],
    "not-a-jpeg": b"\x89PNG\r\n\x1a\n" + bytes(64),
    "empty": b"",
}


@pytest.mark.parametrize("name", list(JPEGS))
def test_the_jpeg_frame_header_reads_as_pillow_reads_it(name: str) -> None:
    """Issue 27: a figure's JPEG is checked from its frame header (~35 us a figure less than Pillow's
    open, which parses every table first); size, components and sample bits read as Pillow reads them,
    and where Pillow refuses the data, so does the header scan."""
    from chalicelib.parsers.pdf_figures import jpeg_frame

    data = JPEGS[name]
    expected = _pillow_frame(data)
    assert jpeg_frame(data) == expected
    if name in ("grey", "rgb", "cmyk", "progressive"):
        assert expected is not None and expected[1:3] == (W, H)
