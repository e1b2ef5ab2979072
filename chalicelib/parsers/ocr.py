"""OCR engines behind `OcrEngine`: Debian tesseract (CLI), rapidocr-onnxruntime (pip-only fallback) and
Amazon Textract (client injected, so this module never imports boto3)."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from ..domain.errors import PermanentStageError, SpanErrorCode, TransientStageError
from ..settings import subprocess_env
from .base import image_kind

MAX_OCR_PIXELS = 40_000_000


TARGET_DPI = 300  # tesseract's accuracy peaks at about 300 dpi (x-height of 20-30 px on body text)
#: an image without a resolution tag is taken as a page at this resolution when it is page-sized…
ASSUMED_PAGE_DPI = 150
#: …up to this long side; larger untagged images (photos of pages, 200 dpi renders) are read as they are:
#: enlarging a 2,400 px photo of a page made tesseract's CER 4× worse on the corpus
PAGE_AT_150_DPI_PX = 1800
#: …and as a screen-sized image (a screenshot, a slide) when its longer side is below this: doubled
UPSCALE_BELOW_PX = 1400
MAX_UPSCALE = 3.0
#: script reported by tesseract's OSD (`--psm 0`) → the language data that read it
SCRIPT_LANGUAGES: dict[str, tuple[str, ...]] = {
    "Latin": ("eng",),
    "Korean": ("kor", "eng"),
    "Hangul": ("kor", "eng"),
    "Japanese": ("jpn", "eng"),
    "Hiragana": ("jpn", "eng"),
    "Katakana": ("jpn", "eng"),
    "Han": ("chi_sim", "eng"),
}
#: a script whose pages may need other language data: both are read, the reading tesseract is more
#: confident of is kept (OSD says "Han" for simplified and traditional Chinese alike, and one run with
#: chi_sim+chi_tra mixes the two character sets in one line)
SCRIPT_ALTERNATIVES: dict[str, tuple[str, ...]] = {"Han": ("chi_tra", "eng")}
DEFAULT_LANGUAGES = ("eng", "kor")
#: below this OSD script confidence the page is read with the default languages (too little text to tell)
MIN_SCRIPT_CONFIDENCE = 0.0
_CJK = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
)
_CJK_SPACE = re.compile(f"(?<=[{_CJK}]) +(?=[{_CJK}])")
#: one Hangul syllable three or more times in a row (spaces between allowed): what the Korean model makes
#: of dot leaders and rules ("이이 이이이이"), never a Korean word
_HANGUL_RUN = re.compile(r" ?([\uac00-\ud7a3])(?: ?\1){2,}")


def _upscale_factor(width: int, height: int, dpi: float | None) -> float:
    """How much to enlarge an image so its text sits at about TARGET_DPI: from its resolution tag when
    it has a plausible one, else from its size (page renders at ASSUMED_PAGE_DPI, small images doubled)."""
    longest = max(width, height)
    if dpi and 50 <= dpi < TARGET_DPI * 0.9:
        factor = TARGET_DPI / dpi
    elif dpi and dpi >= 50:
        factor = 1.0
    elif longest < UPSCALE_BELOW_PX:
        factor = 2.0
    elif longest <= PAGE_AT_150_DPI_PX:  # a letter/A4 page at 150 dpi is 1650-1754 px long
        factor = TARGET_DPI / ASSUMED_PAGE_DPI
    else:
        factor = 1.0
    factor = min(factor, MAX_UPSCALE, (MAX_OCR_PIXELS / max(width * height, 1)) ** 0.5)
    return factor if factor > 1.05 else 1.0


def _image_dpi(img: Any) -> float | None:
    dpi = img.info.get("dpi")
    if isinstance(dpi, tuple) and dpi and isinstance(dpi[0], (int, float)):
        value = float(dpi[0])
        # JFIF "aspect ratio only" (1x1) and the 72/96 dpi screen defaults say nothing about scanning
        return value if value >= 100 else None
    return None


def _normalise_image(image: bytes, *, upscale: bool = False, greyscale: bool = False) -> bytes:
    """PNG/JPEG pass through; GIF, BMP, WEBP and TIFF become PNG. Oversized images are refused.
    `upscale`: enlarged (Lanczos) towards TARGET_DPI; `greyscale`: one 8-bit channel, which tesseract
    binarises (Otsu) without being led by colour."""
    kind = image_kind(image)
    if kind is None:
        raise PermanentStageError(
            "The image could not be decoded for OCR.", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        )
    fmt = kind[0]
    from PIL import Image, ImageOps, UnidentifiedImageError

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
                factor = _upscale_factor(img.width, img.height, _image_dpi(img)) if upscale else 1.0
                if fmt in ("png", "jpg") and factor == 1.0 and not greyscale:
                    return image
                out = ImageOps.exif_transpose(img)
                if out.mode in ("RGBA", "LA", "PA") or (out.mode == "P" and "transparency" in out.info):
                    # transparent text on a transparent background: flatten on white, not on black
                    background = Image.new("RGBA", out.size, (255, 255, 255, 255))
                    out = Image.alpha_composite(background, out.convert("RGBA"))
                out = out.convert("L" if greyscale else "RGB")
                if factor != 1.0:
                    size = (round(out.width * factor), round(out.height * factor))
                    out = out.resize(size, Image.Resampling.LANCZOS)
                buf = io.BytesIO()
                out.save(buf, format="PNG", dpi=(TARGET_DPI, TARGET_DPI) if factor != 1.0 else None)
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
    """Form feeds and trailing spaces out, runs of blank lines to one; the spaces tesseract puts between
    Chinese/Japanese characters removed (those scripts do not separate words; Hangul does, so it keeps them);
    runs of one repeated Hangul syllable (leader dots read as Korean) dropped."""
    lines = [
        _CJK_SPACE.sub("", _HANGUL_RUN.sub("", line)).rstrip()
        for line in text.replace("\x0c", "\n").splitlines()
    ]
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


@dataclass(frozen=True)
class OcrReading:
    text: str
    #: the tesseract languages the page was read with
    languages: tuple[str, ...]
    #: OSD's script ("Latin", "Japanese", …) when the languages were detected; "" when they were set
    script: str = ""


def parse_osd(output: str) -> tuple[str, float]:
    """(script, confidence) from `tesseract --psm 0` output; ("", 0.0) when it has none."""
    script, confidence = "", 0.0
    for line in output.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Script":
            script = value.strip()
        elif key.strip() == "Script confidence":
            try:
                confidence = float(value.strip())
            except ValueError:
                confidence = 0.0
    return script, confidence


def tsv_text(tsv: str) -> tuple[str, float]:
    """(text, mean word confidence) from tesseract's TSV output: words joined by spaces into lines, a
    blank line between paragraphs."""
    paragraphs: dict[tuple[str, ...], dict[str, list[str]]] = {}
    confidences: list[float] = []
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5" or not cols[11].strip():
            continue
        try:
            confidences.append(float(cols[10]))
        except ValueError:
            continue
        paragraphs.setdefault((cols[1], cols[2], cols[3]), {}).setdefault(cols[4], []).append(cols[11])
    text = "\n\n".join(
        "\n".join(" ".join(words) for words in lines.values()) for lines in paragraphs.values()
    )
    return text, (sum(confidences) / len(confidences) if confidences else 0.0)


class TesseractOcr:
    """One tesseract process per image (0.5–2 s each on this box). `languages` fixes the languages;
    without it each page's script is detected first (OSD, `--psm 0`, one more short process) and read
    with that script's languages (SCRIPT_LANGUAGES), the defaults (eng+kor) when OSD cannot tell."""

    name = "tesseract"

    def __init__(
        self,
        languages: Sequence[str] | None = None,
        *,
        psm: int = 3,
        timeout: float = 120.0,
        binary: str | None = None,
        default_languages: Sequence[str] = DEFAULT_LANGUAGES,
        upscale: bool = True,
        greyscale: bool = True,
    ) -> None:
        self.binary = binary or shutil.which("tesseract")
        self.fixed = tuple(languages) if languages else ()
        self.default_languages = tuple(default_languages)
        self.psm = psm
        self.timeout = timeout
        self.upscale = upscale
        self.greyscale = greyscale

    @property
    def wanted(self) -> tuple[str, ...]:
        return self.fixed or self.default_languages

    @property
    def detects(self) -> bool:
        return not self.fixed

    def with_languages(self, languages: Sequence[str]) -> TesseractOcr:
        """The same engine reading every page with `languages` (a KB or upload `ocr_languages` setting);
        no languages: this engine, detecting per page."""
        if not languages:
            return self
        return TesseractOcr(
            languages,
            psm=self.psm,
            timeout=self.timeout,
            binary=self.binary,
            default_languages=self.default_languages,
            upscale=self.upscale,
            greyscale=self.greyscale,
        )

    def available(self) -> bool:
        return bool(self.binary) and bool(self.languages())

    def installed(self) -> tuple[str, ...]:
        return tesseract_languages(self.binary) if self.binary else ()

    def languages(self) -> tuple[str, ...]:
        have = self.installed()
        return tuple(lang for lang in self.wanted if lang in have)

    def _run(self, data: bytes, args: Sequence[str]) -> subprocess.CompletedProcess[bytes]:
        cmd = [str(self.binary), "stdin", "stdout", *args]
        env = subprocess_env(OMP_THREAD_LIMIT="1")
        try:
            return subprocess.run(
                cmd, input=data, capture_output=True, timeout=self.timeout, check=False, env=env
            )
        except subprocess.TimeoutExpired as exc:
            raise TransientStageError("OCR timed out", code=SpanErrorCode.DOCREADER_TIMEOUT) from exc

    def detect_script(self, data: bytes) -> tuple[str, float]:
        """OSD's script for a prepared image; ("", 0.0) when OSD is not installed or finds too little text."""
        if "osd" not in self.installed():
            return "", 0.0
        proc = self._run(data, ["--psm", "0", "-l", "osd"])
        if proc.returncode != 0:
            return "", 0.0  # "Too few characters": not an error of the page, just nothing to detect on
        return parse_osd(proc.stdout.decode("utf-8", "replace"))

    def choose_languages(self, data: bytes) -> tuple[tuple[str, ...], str]:
        """(languages, script): the fixed ones, else those of the detected script that are installed."""
        if self.fixed:
            return self.languages(), ""
        script, confidence = self.detect_script(data)
        have = self.installed()
        chosen = tuple(lang for lang in SCRIPT_LANGUAGES.get(script, ()) if lang in have)
        if not chosen or confidence < MIN_SCRIPT_CONFIDENCE:
            return self.languages(), script
        return chosen, script

    def _recognize(self, data: bytes, languages: Sequence[str], *, tsv: bool = False) -> str:
        args = ["-l", "+".join(languages), "--psm", str(self.psm), *(["tsv"] if tsv else [])]
        proc = self._run(data, args)
        if proc.returncode != 0:
            message = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["unknown error"]
            raise PermanentStageError(
                f"OCR failed: {message[0][:200]}", code=SpanErrorCode.DOCREADER_PARSE_FAILED
            )
        return proc.stdout.decode("utf-8", "replace")

    def read(self, image: bytes) -> OcrReading:
        if not self.available():
            raise TransientStageError("tesseract is not installed", code=SpanErrorCode.DOCREADER_UNAVAILABLE)
        data = _normalise_image(image, upscale=self.upscale, greyscale=self.greyscale)
        # OSD reads the image as it came (greyscale): enlarging it makes OSD slower, not surer
        languages, script = self.choose_languages(
            _normalise_image(image, greyscale=self.greyscale) if self.detects and self.upscale else data
        )
        have = self.installed()
        alternative = tuple(lang for lang in SCRIPT_ALTERNATIVES.get(script, ()) if lang in have)
        if self.fixed or not alternative or alternative == languages:
            return OcrReading(clean_ocr_text(self._recognize(data, languages)), languages, script)
        readings = []
        for candidate in (languages, alternative):
            text, confidence = tsv_text(self._recognize(data, candidate, tsv=True))
            readings.append((confidence, candidate, text))
        confidence, chosen, text = max(readings, key=lambda r: r[0])  # ties: the first (simplified)
        return OcrReading(clean_ocr_text(text), chosen, script)

    def recognize(self, image: bytes) -> str:
        return self.read(image).text


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
    """tesseract (languages detected per page) when installed, else rapidocr when its wheel is, else None."""
    tesseract = TesseractOcr()
    if tesseract.available():
        return tesseract
    rapid = RapidOcr()
    return rapid if rapid.available() else None
