"""A photo of a printed page (issue 27: a held-out JPEG photo of a Japanese page, 1241×1754, lost its
queries): sensor speckles are removed before binarisation, which CJK glyphs at 150 dpi do not survive."""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pytest
from page_images import photographed
from PIL import Image

from chalicelib.parsers import ocr as ocr_module
from chalicelib.parsers.ocr import TesseractOcr, _normalise_image, speckled

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ocr"
CORPUS_PHOTO = "latex-usrguide-p5.photo.jpg"


def _grey(data: bytes) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as img:
        return np.asarray(img.convert("L"), dtype=np.uint8)


def test_speckles_are_told_from_text(corpus: Path) -> None:
    clean = (FIXTURES / "udhr-art1-4.ja.png").read_bytes()
    assert not speckled(_grey(clean))
    for name in ("kotex-utf-doc-p14.ko.png", "polyglossia-zh-hans.png"):
        assert not speckled(_grey((FIXTURES / name).read_bytes())), name
    assert speckled(_grey(photographed(clean)))
    assert speckled(_grey((corpus / CORPUS_PHOTO).read_bytes()))
    assert not speckled(np.full((50, 50), 255, dtype=np.uint8))  # a blank page has no ink at all


def test_a_speckled_page_is_cleared_before_it_is_enlarged() -> None:
    photo = photographed((FIXTURES / "udhr-art1-4.ja.png").read_bytes())
    assert not speckled(_grey(_normalise_image(photo, greyscale=True)))  # what OSD sees
    enlarged = _grey(_normalise_image(photo, upscale=True, greyscale=True))
    assert enlarged.shape == (1754 * 2, 1241 * 2)  # a page at 150 dpi, taken to 300 for recognition
    # cleared first (an enlarged dot is a blot no later step tells from ink): a third of the ink was dots
    assert (enlarged < 200).mean() < 0.75 * (_grey(photo) < 200).mean()


def _cer(hypothesis: str, truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    h, t = re.sub(r"\s+", "", hypothesis), re.sub(r"\s+", "", truth)
    return Levenshtein.distance(h, t) / max(len(t), 1)


@pytest.mark.requires_tesseract
def test_a_photographed_japanese_page_is_read_as_japanese() -> None:
    name = "udhr-art1-4.ja.png"
    reading = TesseractOcr().read(photographed((FIXTURES / name).read_bytes()))
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    assert (reading.script, reading.languages) == ("Japanese", ("jpn",))
    assert _cer(reading.text, truth) <= 0.10, reading.text


@pytest.mark.requires_tesseract
@pytest.mark.parametrize("factor", [2.04, 2.08])  # the photo's 2× and 2% / 4% more
def test_a_photographed_japanese_heading_is_not_read_as_latin(
    factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With jpn+eng the eng model read the heading 世界人権宣言 as "tH RA HERE" at these enlargements."""
    monkeypatch.setattr(ocr_module, "_upscale_factor", lambda width, height, dpi: factor)
    reading = TesseractOcr().read(photographed((FIXTURES / "udhr-art1-4.ja.png").read_bytes()))
    assert "世界人権宣" in reading.text.splitlines()[0], reading.text
