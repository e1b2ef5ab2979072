"""Textract's synchronous DetectDocumentText takes images of at most 10 MB and 10,000 px a side: a bigger
one is scaled down and re-encoded before the call (a refusal would fail the upload for good), a small one
goes as it came. A tesseract child killed by a signal (the OOM killer's SIGKILL) is a transient failure."""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from chalicelib.domain.errors import StageError
from chalicelib.parsers.ocr import TesseractOcr, TextractOcr

#: AWS's set quotas for synchronous DetectDocumentText (limits-document.html)
TEXTRACT_MAX_BYTES = 10_000_000
TEXTRACT_MAX_SIDE_PX = 10_000


class RecordingTextract:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def detect_document_text(self, *, Document: dict[str, Any]) -> dict[str, Any]:
        self.sent.append(Document["Bytes"])
        return {"Blocks": [{"BlockType": "LINE", "Text": "words"}]}


def png(width: int, height: int, *, noise: bool = False) -> bytes:
    out = io.BytesIO()
    if noise:
        pixels = np.random.default_rng(1).integers(0, 255, (height, width, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    else:
        Image.new("RGB", (width, height), (250, 250, 250)).save(out, format="PNG")
    return out.getvalue()


def sent_to_textract(image: bytes) -> bytes:
    client = RecordingTextract()
    assert TextractOcr(client).recognize(image) == "words"
    [sent] = client.sent
    return sent


def test_a_wide_image_is_scaled_to_textracts_side_limit() -> None:
    sent = sent_to_textract(png(12_000, 800))
    with Image.open(io.BytesIO(sent)) as img:
        assert max(img.size) == TEXTRACT_MAX_SIDE_PX
        assert img.height == 666  # the aspect ratio is kept
    assert len(sent) <= TEXTRACT_MAX_BYTES


def test_a_large_photo_is_re_encoded_under_textracts_size_limit() -> None:
    image = png(2_200, 2_000, noise=True)
    assert len(image) > TEXTRACT_MAX_BYTES
    sent = sent_to_textract(image)
    assert len(sent) <= TEXTRACT_MAX_BYTES
    with Image.open(io.BytesIO(sent)) as img:
        assert img.format == "JPEG" and img.size == (2_200, 2_000)


def test_an_image_within_the_limits_is_sent_as_it_came() -> None:
    image = png(1_200, 1_600)
    assert sent_to_textract(image) == image


def test_a_tesseract_killed_by_a_signal_is_transient(tmp_path: Path) -> None:
    binary = tmp_path / "tesseract"
    binary.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "--list-langs" ]; then printf \'List of available languages (1):\\neng\\n\'; exit 0; fi\n'
        "cat >/dev/null\n"
        "echo 'secret stderr text' >&2\n"
        "kill -9 $$\n"
    )
    binary.chmod(binary.stat().st_mode | stat.S_IEXEC)
    with pytest.raises(StageError) as caught:
        TesseractOcr(binary=str(binary)).recognize(png(400, 200))
    assert not caught.value.permanent
    assert "signal 9" in caught.value.message and "secret" not in caught.value.message
