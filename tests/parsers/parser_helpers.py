"""Corpus access for the parser tests (read-only files; a missing file skips the test)."""

import ctypes
import io
import wave
from collections.abc import Mapping
from pathlib import Path

import pypdfium2 as pdfium
import pypdfium2.raw as c
from project_paths import corpus_bytes

__all__ = ["DATA", "corpus_bytes", "pdf_text"]

DATA = Path(__file__).parent / "data"


def with_silence(wav: bytes, seconds: float) -> bytes:
    """The clip with `seconds` of silence before it, in its middle and after it."""
    with wave.open(io.BytesIO(wav)) as src:
        params = src.getparams()
        frames = src.readframes(src.getnframes())
    frame = params.sampwidth * params.nchannels
    half = (len(frames) // frame // 2) * frame
    gap = b"\x00" * (int(params.framerate * seconds) * frame)
    out = io.BytesIO()
    with wave.open(out, "wb") as dst:
        dst.setparams(params)
        dst.writeframes(gap + frames[:half] + gap + frames[half:] + gap)
    return out.getvalue()


def pdf_text(
    pdf: pdfium.PdfDocument,
    page: pdfium.PdfPage,
    text: str,
    x: float,
    y: float,
    size: float,
    invisible: bool = False,
) -> None:
    """Writes one Helvetica text object on a built page (invisible: render mode 3, e.g. keyword stuffing)."""
    obj = c.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", ctypes.c_float(size))
    encoded = ctypes.create_string_buffer((text + "\0").encode("utf-16-le"))
    c.FPDFText_SetText(obj, ctypes.cast(encoded, ctypes.POINTER(c.FPDF_WCHAR)))
    if invisible:
        c.FPDFTextObj_SetTextRenderMode(obj, c.FPDF_TEXTRENDERMODE_INVISIBLE)
    c.FPDFPageObj_Transform(obj, 1, 0, 0, 1, x, y)
    c.FPDFPage_InsertObject(page.raw, obj)


def helvetica_pdf(
    pages: list[list[tuple[str, float, float, float]]], width: float = 612, height: float = 792
) -> bytes:
    """A PDF of `width` x `height` pages, each item (text, x, y, size) one Helvetica text object, drawn in list
    order (the text Latin-1, its parentheses balanced or escaped by the caller)."""
    objects: list[bytes] = [b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>", b""]
    kids = []
    for items in pages:
        ops = "".join(f"BT /F1 {size} Tf {x} {y} Td ({text}) Tj ET\n" for text, x, y, size in items)
        data = ops.encode("latin-1")
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(data), data))
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] "
            f"/Resources << /Font << /F1 1 0 R >> >> /Contents {len(objects)} 0 R >>".encode()
        )
        kids.append(len(objects))
    objects[1] = (
        f"<< /Type /Pages /Kids [{' '.join(f'{k} 0 R' for k in kids)}] /Count {len(kids)} >>".encode()
    )
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        len(objects),
        xref,
    )
    return bytes(out)


def xlsx_workbook(
    cells: Mapping[str, object], more: Mapping[str, Mapping[str, object]] | None = None
) -> bytes:
    """An xlsx whose sheet "Data" holds `cells` (A1-style references), and `more` sheets by title."""
    import openpyxl

    workbook = openpyxl.Workbook()
    sheet = workbook.active
    sheet.title = "Data"
    for ref, value in cells.items():
        sheet[ref] = value
    for title, its_cells in (more or {}).items():
        other = workbook.create_sheet(title)
        for ref, value in its_cells.items():
            other[ref] = value
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()
