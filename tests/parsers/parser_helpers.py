"""Corpus access for the parser tests (read-only files; a missing file skips the test)."""

import ctypes
import io
import wave
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
