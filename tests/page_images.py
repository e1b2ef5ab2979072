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


def photographed(page_png: bytes, *, seed: int = 3) -> bytes:
    """The page laid on an A4 sheet at 150 dpi (1241×1754) and photographed as the corpus's page photo
    is: turned 0.8°, 2% of the pixels speckled, slightly blurred, JPEG."""
    import numpy as np
    from PIL import Image, ImageFilter

    with Image.open(io.BytesIO(page_png)) as page:
        sheet = Image.new("L", (1241, 1754), 250)
        sheet.paste(page.convert("L"), (60, 120))
    sheet = sheet.rotate(0.8, resample=Image.Resampling.BICUBIC, fillcolor=250)
    pixels = np.asarray(sheet).astype(np.float32)
    rng = np.random.default_rng(seed)
    dots = rng.random(pixels.shape) < 0.02
    pixels[dots] = rng.uniform(60, 220, int(dots.sum()))
    photo = Image.fromarray(pixels.astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.6)).convert("RGB")
    out = io.BytesIO()
    photo.save(out, "JPEG", quality=85)
    return out.getvalue()


def scanned_pdf(pages: int) -> bytes:
    """A PDF of small pages that are one image each: every page is OCR'd, and renders are cheap."""
    import pypdfium2 as pdfium
    from PIL import Image

    pdf = pdfium.PdfDocument.new()
    picture = io.BytesIO()
    Image.new("RGB", (120, 160), (230, 230, 230)).save(picture, format="JPEG")
    for _ in range(pages):
        page = pdf.new_page(144, 192)
        image = pdfium.PdfImage.new(pdf)
        image.load_jpeg(io.BytesIO(picture.getvalue()), inline=True)
        image.set_matrix(pdfium.PdfMatrix().scale(144, 192))
        page.insert_obj(image)
        page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    return out.getvalue()
