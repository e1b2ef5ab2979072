"""OCR engines behind `OcrEngine`: Debian tesseract (CLI), rapidocr-onnxruntime (pip-only fallback) and
Amazon Textract (client injected, so this module never imports boto3)."""

from __future__ import annotations

import io
import shutil
import subprocess
import threading
import warnings
from collections.abc import Sequence
from functools import cache
from typing import Any

from ..domain.errors import PermanentStageError, SpanErrorCode, TransientStageError
from ..settings import subprocess_env
from .base import image_kind

MAX_OCR_PIXELS = 40_000_000


UPSCALE_BELOW_PX = 1400  # tesseract misses small glyphs: screen-sized images are doubled first


def _normalise_image(image: bytes, *, upscale: bool = False) -> bytes:
    """PNG/JPEG pass through; GIF, BMP, WEBP and TIFF become PNG. Oversized images are refused."""
    kind = image_kind(image)
    if kind is None:
        raise PermanentStageError(
            "The image could not be decoded for OCR.", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        )
    from PIL import Image, UnidentifiedImageError

    # Everything Pillow raises on these bytes is a property of the bytes: a retry reads them the same way.
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(image)) as img:
                if img.width * img.height > MAX_OCR_PIXELS:
                    raise PermanentStageError(
                        f"The image is too large to OCR ({img.width:,} × {img.height:,} pixels; the limit is "
                        f"{MAX_OCR_PIXELS:,}).",
                        code=SpanErrorCode.DOCREADER_PARSE_FAILED,
                    )
                small = upscale and max(img.width, img.height) < UPSCALE_BELOW_PX
                if kind[0] in ("png", "jpg") and not small:
                    return image
                out = img.convert("RGB")
                if small:
                    out = out.resize((img.width * 2, img.height * 2), Image.Resampling.LANCZOS)
                buf = io.BytesIO()
                out.save(buf, format="PNG")
                return buf.getvalue()
    except Image.DecompressionBombError as exc:
        raise PermanentStageError(
            "The image is too large to OCR (it looks like a decompression bomb).",
            code=SpanErrorCode.DOCREADER_PARSE_FAILED,
        ) from exc
    except (UnidentifiedImageError, SyntaxError, ValueError, OSError) as exc:
        raise PermanentStageError(
            f"The image is damaged and could not be decoded for OCR ({type(exc).__name__}).",
            code=SpanErrorCode.DOCREADER_PARSE_FAILED,
        ) from exc


def clean_ocr_text(text: str) -> str:
    lines = [line.rstrip() for line in text.replace("\x0c", "\n").splitlines()]
    out: list[str] = []
    for line in lines:
        if line.strip() or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


@cache
def tesseract_languages(binary: str) -> tuple[str, ...]:
    try:
        proc = subprocess.run(
            [binary, "--list-langs"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ()
    return tuple(line.strip() for line in proc.stdout.splitlines()[1:] if line.strip() and " " not in line)


class TesseractOcr:
    """One tesseract process per image (0.5–0.7 s each on this box); languages default to eng+kor."""

    name = "tesseract"

    def __init__(
        self,
        languages: Sequence[str] = ("eng", "kor"),
        *,
        psm: int = 3,
        timeout: float = 120.0,
        binary: str | None = None,
    ) -> None:
        self.binary = binary or shutil.which("tesseract")
        self.wanted = tuple(languages)
        self.psm = psm
        self.timeout = timeout

    def available(self) -> bool:
        return bool(self.binary) and bool(self.languages())

    def languages(self) -> tuple[str, ...]:
        if not self.binary:
            return ()
        have = tesseract_languages(self.binary)
        return tuple(lang for lang in self.wanted if lang in have)

    def recognize(self, image: bytes) -> str:
        if not self.available():
            raise TransientStageError("tesseract is not installed", code=SpanErrorCode.DOCREADER_UNAVAILABLE)
        data = _normalise_image(image, upscale=True)
        cmd = [str(self.binary), "stdin", "stdout", "-l", "+".join(self.languages()), "--psm", str(self.psm)]
        env = subprocess_env(OMP_THREAD_LIMIT="1")
        try:
            proc = subprocess.run(
                cmd, input=data, capture_output=True, timeout=self.timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired as exc:
            raise TransientStageError("OCR timed out", code=SpanErrorCode.DOCREADER_TIMEOUT) from exc
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["unknown error"]
            raise PermanentStageError(
                f"OCR failed: {message[0][:200]}", code=SpanErrorCode.DOCREADER_PARSE_FAILED
            )
        return clean_ocr_text(proc.stdout.decode("utf-8", "replace"))


class RapidOcr:
    """PP-OCRv4 ONNX models bundled in the rapidocr-onnxruntime wheel; single-threaded ONNX Runtime."""

    name = "rapidocr"

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._engine: Any = None
        self._lock = threading.Lock()

    def available(self) -> bool:
        import importlib.util

        return importlib.util.find_spec("rapidocr_onnxruntime") is not None

    def _load(self) -> Any:
        with self._lock:
            if self._engine is None:
                from rapidocr_onnxruntime import RapidOCR

                n = self.threads
                self._engine = RapidOCR(
                    det_intra_op_num_threads=n,
                    det_inter_op_num_threads=1,
                    cls_intra_op_num_threads=n,
                    cls_inter_op_num_threads=1,
                    rec_intra_op_num_threads=n,
                    rec_inter_op_num_threads=1,
                )
            return self._engine

    def recognize(self, image: bytes) -> str:
        engine = self._load()
        result, _elapsed = engine(_normalise_image(image))
        if not result:
            return ""
        # Rows: (box, text, score); group boxes into lines by their vertical centre.
        items = sorted(
            (
                (
                    float(sum(p[1] for p in box) / 4),
                    float(box[0][0]),
                    float(abs(box[2][1] - box[0][1])),
                    str(text),
                )
                for box, text, _score in result
            ),
            key=lambda t: (t[0], t[1]),
        )
        lines: list[list[tuple[float, str]]] = []
        last_y = None
        for y, x, h, text in items:
            if last_y is None or abs(y - last_y) > max(h * 0.5, 5):
                lines.append([])
                last_y = y
            lines[-1].append((x, text))
        return "\n".join(" ".join(t for _x, t in sorted(line)) for line in lines)


class TextractOcr:
    """Amazon Textract DetectDocumentText; `client` is a boto3 textract client made by the adapter layer."""

    name = "textract"

    def __init__(self, client: Any) -> None:
        self.client = client

    def available(self) -> bool:
        return self.client is not None

    def recognize(self, image: bytes) -> str:
        data = _normalise_image(image)
        try:
            response = self.client.detect_document_text(Document={"Bytes": data})
        except Exception as exc:  # botocore ClientError / EndpointConnectionError without importing botocore
            code = (
                getattr(exc, "response", {}).get("Error", {}).get("Code", "")
                if hasattr(exc, "response")
                else ""
            )
            if code in (
                "InvalidParameterException",
                "UnsupportedDocumentException",
                "BadDocumentException",
                "DocumentTooLargeException",
            ):
                raise PermanentStageError(
                    f"Textract rejected the image: {code}", code=SpanErrorCode.DOCREADER_PARSE_FAILED
                ) from exc
            raise TransientStageError(
                f"Textract failed: {exc}", code=SpanErrorCode.DOCREADER_UNAVAILABLE
            ) from exc
        lines = [b.get("Text", "") for b in response.get("Blocks", []) if b.get("BlockType") == "LINE"]
        return "\n".join(line for line in lines if line)


def default_ocr() -> TesseractOcr | RapidOcr | None:
    """tesseract when installed, else rapidocr when its wheel is, else None."""
    tesseract = TesseractOcr()
    if tesseract.available():
        return tesseract
    rapid = RapidOcr()
    return rapid if rapid.available() else None
