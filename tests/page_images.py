"""Page images as a scanner gets them wrong, for the OCR tests and bench/bench_ocr.py."""

from __future__ import annotations

import io


def turned_png(data: bytes, degrees: int) -> bytes:
    """The image turned `degrees` counter-clockwise (a page scanned sideways or upside down), as PNG."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        buf = io.BytesIO()
        img.rotate(degrees, expand=True).save(buf, format="PNG")
        return buf.getvalue()
