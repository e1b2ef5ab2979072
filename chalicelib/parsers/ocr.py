"""OCR engines behind `OcrEngine`: Debian tesseract (CLI), rapidocr-onnxruntime (pip-only fallback) and
Amazon Textract (client injected, so this module never imports boto3).

Over 600 lines: three engines behind one port share the image preparation (greyscale, upscaling, page
orientation) and the language choice; each engine alone is small.
"""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import cache
from pathlib import Path
from statistics import fmean
from typing import TYPE_CHECKING, Any

from chalicelib.domain import metering
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode, TransientStageError, provider_code
from chalicelib.domain.image_limits import MAX_IMAGE_PIXELS
from chalicelib.parsers.base import image_kind
from chalicelib.settings import subprocess_env

if TYPE_CHECKING:  # numpy is imported where it is used: Textract-only functions import this module
    import numpy as np
    import numpy.typing as npt


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
    # Japanese data alone, as for Chinese: with eng a heading or a line end was read as Latin ("世界人権宣言"
    # → "tH RA HERE", "します。" → "LES."), and jpn reads the English words of a Japanese page itself
    # (bench/README.md, 2026-12-05 03:25)
    "Japanese": ("jpn",),
    "Hiragana": ("jpn",),
    "Katakana": ("jpn",),
    # Chinese data alone: with eng, tesseract read whole lines of some Chinese pages as Latin noise (CER
    # 40% → 6% on the taohuayuan.zh-hans fixture, 10% → 4% on udhr-art2-5.zh-hant, means over 23
    # enlargements); the Chinese data reads the English words of a Chinese page itself
    "Han": ("chi_sim",),
}
#: a script whose pages may need other language data: both are read and the reading surer of the
#: characters where the two differ is kept (`prefers_alternative`). OSD says "Han" for simplified and
#: traditional Chinese alike, and one run with chi_sim+chi_tra mixes the two character sets in one line.
SCRIPT_ALTERNATIVES: dict[str, tuple[str, ...]] = {"Han": ("chi_tra",)}
#: the characters of a script whose readings are compared where they differ (SCRIPT_ALTERNATIVES)
SCRIPT_CHARACTERS: dict[str, str] = {"Han": "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"}
#: language data whose words a mixed reading (with eng) gives to the other data: tesseract's eng model reads
#: whole Korean words as Latin ("양식을" → "SAS"). A page read with such data first and others after is
#: read a second time with that data alone, and each Latin word of the mixed reading that the second
#: reading has as Hangul only, with a confidence of at least OWN_SCRIPT_MIN_CONFIDENCE and more than the
#: Latin word's, takes the Hangul (real Latin words come out of the Korean model as low-confidence
#: digits and symbols, so they stay)
OWN_SCRIPT_ALONE: dict[str, str] = {"kor": "\uac00-\ud7a3"}
OWN_SCRIPT_MIN_CONFIDENCE = 60.0
DEFAULT_LANGUAGES = ("eng", "kor")
#: OSD calls a Chinese page with some English words in it "Latin" (confidence 0.1–3.2; English pages
#: 0.97–10), so its confidence cannot tell them apart. What does: the eng reading of such a page leaves
#: 32–55% of its characters in words under LATIN_DOUBT_CONFIDENCE, an English page 0–24% (bench/README.md,
#: 2026-12-05 03:25 note). A Latin page over LATIN_DOUBT_SHARE (a gate on cost: an English page over it pays one
#: more run and stays English) is read again with the data of DOUBTED_LATIN_SCRIPT…
LATIN_DOUBT_CONFIDENCE = 50.0
LATIN_DOUBT_SHARE = 0.25
DOUBTED_LATIN_SCRIPT = "Han"
#: …and read as a Han page when at least this share of that reading's characters are Han (the Chinese pages
#: with English words 43–46%, English pages 0–5.5%, the math of amsldoc read as Han the 5.5%)
HAN_PAGE_SHARE = 0.2
#: below this OSD script confidence the page is read with the default languages (too little text to tell)
MIN_SCRIPT_CONFIDENCE = 0.0
#: characters tesseract may not output. The dotted zero of monospace fonts (DejaVu Sans Mono: a dot inside
#: the 0) sits on the eng model's boundary between "0" and "©": on debian-reference-p40 the reading flips
#: between them with a 2% change of the enlargement (any factor 1–3×), and "0" is always the runner-up
#: (72 readings of the page's three zeros: 71 "0" without © and ®, one "@"). A real © or ® read as
#: something else costs no search term (the index's tokenizer drops symbols); a zero read as © does.
EXCLUDED_CHARACTERS = "©®"
_CJK = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
)
_CJK_SPACE = re.compile(f"(?<=[{_CJK}]) +(?=[{_CJK}])")
#: one Hangul syllable three or more times in a row (spaces between allowed): what the Korean model makes
#: of dot leaders and rules ("이이 이이이이"), never a Korean word
_HANGUL_RUN = re.compile(r" ?([\uac00-\ud7a3])(?: ?\1){2,}")


#: Ruling lines and frames (hyperlink boxes, underlines, table rules): a horizontal dark run at least this
#: long (px at TARGET_DPI, 0.5 in: longer than any stroke of a glyph of body or heading text)…
RULE_MIN_PX = 150
#: …and at most this thick where it runs (a filled area or inverse text on a dark band is kept)…
RULE_MAX_THICK_PX = 8
#: …with paper just above and below it along at least this share of its length (glyphs touching it
#: take the rest)…
RULE_CLEAR_SHARE = 0.6
#: …plus the vertical sides of frames: a thin vertical run at least this long whose both ends meet a rule
FRAME_SIDE_MIN_PX = 12
#: darker than this counts as ink when finding rules (a red frame is ~76 in greyscale, its antialiased
#: edge lighter: the rule is found on ink, then erased with a one-pixel margin)
RULE_INK = 200


def _runs(mask: npt.NDArray[np.bool_]) -> tuple[npt.NDArray[np.intp], ...]:
    """(row, start, end) of every horizontal run of True in `mask`."""
    import numpy as np

    padded = np.zeros((mask.shape[0], mask.shape[1] + 2), dtype=np.int8)
    padded[:, 1:-1] = mask
    step = np.diff(padded, axis=1)
    rows, starts = np.nonzero(step == 1)
    _, ends = np.nonzero(step == -1)
    return rows, starts, ends


def _run_length(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int32]:
    """For every pixel, the length of the horizontal run of True it belongs to (0 outside)."""
    import numpy as np

    rows, starts, ends = _runs(mask)
    lengths = ends - starts
    offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    out = np.zeros(mask.shape, dtype=np.int32)
    out[np.repeat(rows, lengths), np.repeat(starts, lengths) + offsets] = np.repeat(lengths, lengths)
    return out


def _grow(mask: npt.NDArray[np.bool_], px: int = 1) -> npt.NDArray[np.bool_]:
    out = mask.copy()
    for _ in range(px):
        grown = out.copy()
        grown[1:] |= out[:-1]
        grown[:-1] |= out[1:]
        grown[:, 1:] |= out[:, :-1]
        grown[:, :-1] |= out[:, 1:]
        out = grown
    return out


def rule_mask(grey: npt.NDArray[np.uint8]) -> npt.NDArray[np.bool_]:
    """Pixels of thin ruling lines and of the frames they close, in a greyscale page at about TARGET_DPI.
    A rule: rows of ink at least RULE_MIN_PX long, at most RULE_MAX_THICK_PX thick with paper above and
    below along most of their length (a filled area, a dark band with light text in it, is kept whole). A frame side: a vertical run of ink at least
    FRAME_SIDE_MIN_PX long and at most RULE_MAX_THICK_PX wide, both ends at an end of a rule (a glyph's
    stroke inside a frame, or a table's inner rule, meets the rules away from their ends and is kept).
    Glyphs lose only the pixels where they touch a rule."""
    import numpy as np

    ink = grey < RULE_INK
    rows, starts, ends = _runs(ink)
    long = ends - starts >= RULE_MIN_PX
    rows, starts, ends = rows[long], starts[long], ends[long]
    candidates = np.zeros(ink.shape, dtype=bool)
    for row, start, end in zip(rows, starts, ends, strict=True):
        candidates[row, start:end] = True
    # a rule is thin and has paper just above and below it (in a dark band the long rows have band above
    # or below them, or are too thick); where a glyph touches the rule the glyph's column is not rule
    cols, tops, bottoms = _runs(candidates.T)
    height = ink.shape[0]
    clear = (
        (bottoms - tops <= RULE_MAX_THICK_PX)
        & ~ink[np.maximum(tops - 1, 0), cols]
        & ~ink[np.minimum(bottoms, height - 1), cols]
    )
    thin = np.zeros(ink.shape, dtype=bool)
    for col, top, bottom in zip(cols[clear], tops[clear], bottoms[clear], strict=True):
        thin[top:bottom, col] = True
    rules = np.zeros(ink.shape, dtype=bool)
    corners = np.zeros(ink.shape, dtype=bool)  # where a frame's sides may meet its rules: their two ends
    reach = RULE_MAX_THICK_PX + 2
    for row, start, end in zip(rows, starts, ends, strict=True):
        if thin[row, start:end].mean() >= RULE_CLEAR_SHARE:  # most of its length: a rule
            rules[row, start:end] = thin[row, start:end]
            top, bottom = max(row - 2, 0), row + 3
            corners[top:bottom, max(start - 2, 0) : start + reach] = True
            corners[top:bottom, max(end - reach, 0) : end + 2] = True
    if not rules.any():
        return rules
    rest = ink & ~rules
    narrow = rest & (_run_length(rest) <= RULE_MAX_THICK_PX)
    cols, tops, bottoms = _runs(narrow.T)
    side = (bottoms - tops >= FRAME_SIDE_MIN_PX) & corners[tops, cols] & corners[bottoms - 1, cols]
    for col, top, bottom in zip(cols[side], tops[side], bottoms[side], strict=True):
        rules[top:bottom, col] = True
    return rules


def remove_rules(grey: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """The page with its ruling lines and frames painted white (one pixel of margin for their antialiased
    edges): tesseract reads a framed word's frame as "|", "[" or Hangul syllables, and a frame touching
    the text merges both into one blob it cannot read."""
    mask = rule_mask(grey)
    if not mask.any():
        return grey
    out = grey.copy()
    out[_grow(mask, 1)] = 255
    return out


#: A page photo's sensor noise or a dirty scan: dark dots of one pixel scattered over the paper. When at
#: least this share of the page's ink pixels (darker than SPECKLE_INK) have no ink neighbour at all, a 3×3
#: median removes them before binarisation (clean renders and scans: under 0.1%; the corpus's page photo:
#: 20%). Speckles break CJK glyphs most: a 150-dpi photo of a Japanese page went from 49% to 2% CER.
SPECKLE_SHARE = 0.05
SPECKLE_INK = 200


def speckled(grey: npt.NDArray[np.uint8]) -> bool:
    """Whether a greyscale page is strewn with isolated dark dots (see SPECKLE_SHARE)."""
    import numpy as np

    ink = grey < SPECKLE_INK
    total = int(ink.sum())
    if not total:
        return False
    padded = np.pad(ink, 1)
    height, width = ink.shape
    neighbours = np.zeros(ink.shape, dtype=np.uint8)
    for dy in (0, 1, 2):
        for dx in (0, 1, 2):
            if dy != 1 or dx != 1:
                neighbours += padded[dy : dy + height, dx : dx + width]
    return int((ink & (neighbours == 0)).sum()) >= SPECKLE_SHARE * total


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
    factor = min(factor, MAX_UPSCALE, (MAX_IMAGE_PIXELS / max(width * height, 1)) ** 0.5)
    return factor if factor > 1.05 else 1.0


def _image_dpi(img: Any) -> float | None:
    dpi = img.info.get("dpi")
    if isinstance(dpi, tuple) and dpi and isinstance(dpi[0], (int, float)):
        value = float(dpi[0])
        # JFIF "aspect ratio only" (1x1) and the 72/96 dpi screen defaults say nothing about scanning
        return value if value >= 100 else None
    return None


@contextmanager
def _decoded_or_permanent() -> Iterator[None]:
    """Everything Pillow raises on an image's bytes is theirs (a retry reads them the same way): permanent."""
    from PIL import Image, UnidentifiedImageError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            yield
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


def _on_white(img: Any) -> Any:
    """Transparent text on a transparent background is flattened on white, not on black."""
    from PIL import Image

    if img.mode in ("RGBA", "LA", "PA") or (img.mode == "P" and "transparency" in img.info):
        background = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, img.convert("RGBA"))
    return img


def _normalise_image(
    image: bytes, *, upscale: bool = False, greyscale: bool = False, rules: bool = False, turn: int = 0
) -> bytes:
    """PNG/JPEG pass through; GIF, BMP, WEBP and TIFF become PNG. Oversized images are refused.
    `turn`: degrees (0, 90, 180, 270) the page is turned clockwise, after its EXIF orientation;
    `upscale`: enlarged (Lanczos) towards TARGET_DPI; `greyscale`: one 8-bit channel, which tesseract
    binarises (Otsu) without being led by colour, cleared of speckles when it has them (`speckled`); `rules` (with `greyscale`): ruling lines and frames
    painted white (remove_rules)."""
    kind = image_kind(image)
    if kind is None:
        raise PermanentStageError(
            "The image could not be decoded for OCR.", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        )
    fmt = kind[0]
    from PIL import Image, ImageFilter, ImageOps

    with _decoded_or_permanent(), Image.open(io.BytesIO(image)) as img:
        if img.width * img.height > MAX_IMAGE_PIXELS:
            raise PermanentStageError(
                f"The image is too large to OCR ({img.width:,} × {img.height:,} pixels; the limit is "
                f"{MAX_IMAGE_PIXELS:,}).",
                code=SpanErrorCode.DOCREADER_PARSE_FAILED,
            )
        factor = _upscale_factor(img.width, img.height, _image_dpi(img)) if upscale else 1.0
        if fmt in ("png", "jpg") and factor == 1.0 and not greyscale and not turn:
            return image
        out = ImageOps.exif_transpose(img)
        if turn:
            # Pillow turns counter-clockwise; a right angle is a lossless transpose
            out = out.rotate(-turn, expand=True)
        out = _on_white(out).convert("L" if greyscale else "RGB")
        if greyscale:
            import numpy as np

            if speckled(np.asarray(out, dtype=np.uint8)):  # before enlarging, which grows the dots
                out = out.filter(ImageFilter.MedianFilter(3))
        if factor != 1.0:
            size = (round(out.width * factor), round(out.height * factor))
            out = out.resize(size, Image.Resampling.LANCZOS)
        if rules and greyscale:
            import numpy as np

            out = Image.fromarray(remove_rules(np.asarray(out, dtype=np.uint8)))
        buf = io.BytesIO()
        out.save(buf, format="PNG", dpi=(TARGET_DPI, TARGET_DPI) if factor != 1.0 else None)
        return buf.getvalue()


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
    #: OSD's script ("Latin", "Japanese", …) when the languages were detected, "Han" for a page OSD called
    #: Latin that read as Chinese (DOUBTED_LATIN_SCRIPT); "" when they were set
    script: str = ""
    #: degrees the page was turned clockwise to read it upright (0, 90, 180, 270)
    turned: int = 0


@dataclass(frozen=True)
class PageOsd:
    """What tesseract's orientation and script detection (`--psm 0`) says of a page."""

    script: str = ""
    script_confidence: float = 0.0
    #: degrees to turn the page clockwise to make it upright (0, 90, 180, 270)
    rotate: int = 0


def parse_osd(output: str) -> PageOsd:
    """The fields of `tesseract --psm 0` output; an empty PageOsd when it has none."""
    fields = {
        key.strip(): value.strip() for key, _, value in (line.partition(":") for line in output.splitlines())
    }
    try:
        confidence = float(fields.get("Script confidence", "0"))
    except ValueError:
        confidence = 0.0
    rotate = fields.get("Rotate", "0")
    return PageOsd(
        script=fields.get("Script", ""),
        script_confidence=confidence,
        rotate=int(rotate) if rotate in ("90", "180", "270") else 0,
    )


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


@dataclass(frozen=True)
class OcrWord:
    """One word of tesseract's TSV output: its text, box (pixels) and confidence (0-100)."""

    text: str
    left: int
    top: int
    width: int
    height: int
    confidence: float

    def covers(self, other: OcrWord) -> bool:
        """`other`'s horizontal centre is inside this word and the two overlap by half the lower's height."""
        centre = other.left + other.width / 2
        overlap = min(self.top + self.height, other.top + other.height) - max(self.top, other.top)
        return self.left <= centre <= self.left + self.width and overlap > 0.5 * min(
            self.height, other.height
        )


def tsv_words(tsv: str) -> list[OcrWord]:
    words = []
    for row in tsv.splitlines()[1:]:
        cols = row.split("\t")
        if len(cols) < 12 or cols[0] != "5" or not cols[11].strip():
            continue
        try:
            box = [int(c) for c in cols[6:10]]
            confidence = float(cols[10])
        except ValueError:
            continue
        words.append(OcrWord(cols[11], box[0], box[1], box[2], box[3], confidence))
    return words


def word_separators(words: Sequence[OcrWord], text: str) -> list[str] | None:
    """What tesseract's text output puts before each of the TSV `words` of the same run ("", " ", "\n",
    "\n\n": a Korean word is often several TSV words with no space between them); None when the two do
    not line up."""
    separators, i = [], 0
    for word in words:
        start = i
        while i < len(text) and text[i].isspace():
            i += 1
        gap = text[start:i].replace("\x0c", "\n")
        newlines = gap.count("\n")
        separators.append("\n\n" if newlines > 1 else "\n" if newlines else " " if gap else "")
        if text[i : i + len(word.text)] != word.text:
            return None
        i += len(word.text)
    return separators


def prefer_own_script(
    mixed: Sequence[OcrWord], separators: Sequence[str], alone: Sequence[OcrWord], script: str
) -> str:
    """The mixed reading's text, each Latin word replaced by what the reading with the script's data alone
    has in its place when that is the script only, surer than OWN_SCRIPT_MIN_CONFIDENCE and than the
    Latin word (see OWN_SCRIPT_ALONE)."""
    own = re.compile(f"[{script}]")
    latin = re.compile(r"[A-Za-z0-9]")
    out = []
    for word, separator in zip(mixed, separators, strict=True):
        text = word.text
        if latin.search(text) and not own.search(text):
            inside = [other for other in alone if word.covers(other)]
            if inside and all(own.search(o.text) and not latin.search(o.text) for o in inside):
                confidence = sum(o.confidence for o in inside) / len(inside)
                if confidence >= OWN_SCRIPT_MIN_CONFIDENCE and confidence > word.confidence:
                    text = "".join(o.text for o in inside)
        out.append(separator + text)
    return "".join(out)


def doubtful_latin(words: Sequence[OcrWord]) -> bool:
    """Whether an eng reading leaves at least LATIN_DOUBT_SHARE of its characters in words under
    LATIN_DOUBT_CONFIDENCE (what eng makes of CJK lines)."""
    total = sum(len(word.text) for word in words)
    unsure = sum(len(word.text) for word in words if word.confidence < LATIN_DOUBT_CONFIDENCE)
    return total > 0 and unsure >= LATIN_DOUBT_SHARE * total


def script_share(words: Sequence[OcrWord], script: str) -> float:
    """The share of the words' characters in `script` (a character class)."""
    pattern = re.compile(f"[{script}]")
    total = sum(len(word.text) for word in words)
    return sum(len(pattern.findall(word.text)) for word in words) / total if total else 0.0


def prefers_alternative(usual: Sequence[OcrWord], alternative: Sequence[OcrWord], script: str) -> bool:
    """Whether the reading with a script's alternative data (SCRIPT_ALTERNATIVES) is surer than the usual
    reading of the characters of `script` (a character class) where the two differ, each character at its
    word's confidence; a tie or no difference: the usual. Only where they differ, because each Chinese model
    writes its own character set whatever the page's (chi_tra reads a simplified 严 as 嚴, chi_sim a
    traditional 們 as 们): the mean confidence of all words, shared ones included, was a coin toss that a
    2% change of the enlargement flipped, while on the differing characters the page's own data was the
    surer at every factor tried (bench/README.md, 2026-12-04 22:10)."""
    pattern = re.compile(f"[{script}]")

    def characters(words: Sequence[OcrWord]) -> list[tuple[str, float]]:
        return [(c, word.confidence) for word in words for c in word.text if pattern.match(c)]

    first, second = characters(usual), characters(alternative)
    matcher = SequenceMatcher(
        None, "".join(c for c, _ in first), "".join(c for c, _ in second), autojunk=False
    )
    usual_sure: list[float] = []
    other_sure: list[float] = []
    for operation, i1, i2, j1, j2 in matcher.get_opcodes():
        if operation != "equal":
            usual_sure += [confidence for _, confidence in first[i1:i2]]
            other_sure += [confidence for _, confidence in second[j1:j2]]
    return fmean(other_sure or [0.0]) > fmean(usual_sure or [0.0])


def _failed_run(proc: subprocess.CompletedProcess[bytes]) -> TransientStageError | PermanentStageError:
    """A run killed by a signal (the OOM killer's SIGKILL) says nothing about the page: transient, naming
    the signal only. Any other failure is tesseract's verdict: permanent, with its stderr's last line."""
    if proc.returncode < 0:
        return TransientStageError(
            f"OCR was stopped by signal {-proc.returncode}", code=SpanErrorCode.DOCREADER_UNAVAILABLE
        )
    message = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["unknown error"]
    return PermanentStageError(f"OCR failed: {message[0][:200]}", code=SpanErrorCode.DOCREADER_PARSE_FAILED)


class TesseractOcr:
    """One tesseract process per image (0.5–2 s each on this box), after OSD (`--psm 0`, one more short
    process) has found the page's orientation and script: a turned page is read upright, and with the
    script's languages (SCRIPT_LANGUAGES), the defaults (eng+kor) when OSD cannot tell, unless
    `languages` fixes them."""

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
        rules: bool = True,
    ) -> None:
        self.binary = binary or shutil.which("tesseract")
        self.fixed = tuple(languages) if languages else ()
        self.default_languages = tuple(default_languages)
        self.psm = psm
        self.timeout = timeout
        self.upscale = upscale
        self.greyscale = greyscale
        self.rules = rules

    @property
    def wanted(self) -> tuple[str, ...]:
        return self.fixed or self.default_languages

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
            rules=self.rules,
        )

    def available(self) -> bool:
        return bool(self.binary) and bool(self.languages())

    def installed(self) -> tuple[str, ...]:
        return tesseract_languages(self.binary) if self.binary else ()

    def languages(self) -> tuple[str, ...]:
        have = self.installed()
        return tuple(lang for lang in self.wanted if lang in have)

    def _run(
        self, data: bytes, args: Sequence[str], output: str = "stdout"
    ) -> subprocess.CompletedProcess[bytes]:
        cmd = [str(self.binary), "stdin", output, *args]
        env = subprocess_env(OMP_THREAD_LIMIT="1")
        try:
            with metering.child_process():
                return subprocess.run(
                    cmd, input=data, capture_output=True, timeout=self.timeout, check=False, env=env
                )
        except subprocess.TimeoutExpired as exc:
            raise TransientStageError("OCR timed out", code=SpanErrorCode.DOCREADER_TIMEOUT) from exc

    def detect(self, data: bytes) -> PageOsd:
        """OSD of a prepared image; an empty PageOsd when it finds too little text."""
        proc = self._run(data, ["--psm", "0", "-l", "osd"])
        if proc.returncode < 0:  # killed: not the page's answer
            raise _failed_run(proc)
        if proc.returncode != 0:
            return PageOsd()  # "Too few characters": not an error of the page, just nothing to detect on
        return parse_osd(proc.stdout.decode("utf-8", "replace"))

    def upright(self, image: bytes) -> tuple[int, PageOsd]:
        """(clockwise turn that makes the page upright, OSD of the page so turned). tesseract's layout
        analysis reads a page turned 90° or 180° as noise (CER 86-94% on the corpus scans). A turn is
        taken only when OSD, asked again on the turned page, finds it upright: a page whose text is too
        sparse to tell is read as it came. OSD reads the image as it came (greyscale, not enlarged):
        enlarging it makes OSD slower, not surer."""
        if "osd" not in self.installed():
            return 0, PageOsd()
        osd = self.detect(_normalise_image(image, greyscale=self.greyscale))
        if not osd.rotate:
            return 0, osd
        turned = self.detect(_normalise_image(image, greyscale=self.greyscale, turn=osd.rotate))
        return (osd.rotate, turned) if not turned.rotate else (0, osd)

    def choose_languages(self, osd: PageOsd) -> tuple[tuple[str, ...], str]:
        """(languages, script): the fixed ones, else those of the page's detected script that are
        installed."""
        if self.fixed:
            return self.languages(), ""
        have = self.installed()
        chosen = tuple(lang for lang in SCRIPT_LANGUAGES.get(osd.script, ()) if lang in have)
        if not chosen or osd.script_confidence < MIN_SCRIPT_CONFIDENCE:
            return self.languages(), osd.script
        return chosen, osd.script

    def _read_args(self, languages: Sequence[str]) -> list[str]:
        """tesseract's arguments for reading a page with `languages` (EXCLUDED_CHARACTERS left out)."""
        return [
            "-l",
            "+".join(languages),
            "--psm",
            str(self.psm),
            "-c",
            f"tessedit_char_blacklist={EXCLUDED_CHARACTERS}",
        ]

    def _recognize(self, data: bytes, languages: Sequence[str], *, tsv: bool = False) -> str:
        proc = self._run(data, [*self._read_args(languages), *(["tsv"] if tsv else [])])
        if proc.returncode != 0:
            raise _failed_run(proc)
        return proc.stdout.decode("utf-8", "replace")

    def _recognize_with_words(self, data: bytes, languages: Sequence[str]) -> tuple[str, list[OcrWord]]:
        """Text and TSV words of one run (tesseract writes both only to files)."""
        with tempfile.TemporaryDirectory(prefix="ocr-") as tmp:
            base = Path(tmp) / "page"
            proc = self._run(data, [*self._read_args(languages), "txt", "tsv"], output=str(base))
            if proc.returncode != 0:
                raise _failed_run(proc)
            text = base.with_suffix(".txt").read_text(encoding="utf-8", errors="replace")
            words = tsv_words(base.with_suffix(".tsv").read_text(encoding="utf-8", errors="replace"))
        return text, words

    def _read_own_script_twice(self, data: bytes, languages: tuple[str, ...]) -> str | None:
        """The mixed reading corrected by a reading with the first language's data alone
        (OWN_SCRIPT_ALONE); None when the page is not read with such data and others."""
        script = OWN_SCRIPT_ALONE.get(languages[0]) if len(languages) > 1 else None
        if script is None:
            return None
        text, mixed = self._recognize_with_words(data, languages)
        separators = word_separators(mixed, text)
        if separators is None:
            return text  # the two outputs did not line up: the mixed reading as it is
        alone = tsv_words(self._recognize(data, languages[:1], tsv=True))
        return prefer_own_script(mixed, separators, alone, script)

    def read(self, image: bytes) -> OcrReading:
        if not self.available():
            raise TransientStageError("tesseract is not installed", code=SpanErrorCode.DOCREADER_UNAVAILABLE)
        turn, osd = self.upright(image)
        data = _normalise_image(
            image, upscale=self.upscale, greyscale=self.greyscale, rules=self.rules, turn=turn
        )
        languages, script = self.choose_languages(osd)
        have = self.installed()
        usual: str | None = None  # the TSV of the page read with `languages`, when it already was
        if not self.fixed and script == "Latin":
            text, words = self._recognize_with_words(data, languages)
            usual = self._han_reading_of_doubted_latin(data, words)
            if usual is None:
                return OcrReading(clean_ocr_text(text), languages, script, turn)
            script = DOUBTED_LATIN_SCRIPT
            languages = tuple(lang for lang in SCRIPT_LANGUAGES[script] if lang in have)
        alternative = tuple(lang for lang in SCRIPT_ALTERNATIVES.get(script, ()) if lang in have)
        if self.fixed or not alternative or alternative == languages:
            mixed = self._read_own_script_twice(data, languages)
            if mixed is not None:
                return OcrReading(clean_ocr_text(mixed), languages, script, turn)
            alone = tsv_text(usual)[0] if usual is not None else self._recognize(data, languages)
            return OcrReading(clean_ocr_text(alone), languages, script, turn)
        if usual is None:
            usual = self._recognize(data, languages, tsv=True)
        other = self._recognize(data, alternative, tsv=True)
        if prefers_alternative(tsv_words(usual), tsv_words(other), SCRIPT_CHARACTERS[script]):
            return OcrReading(clean_ocr_text(tsv_text(other)[0]), alternative, script, turn)
        return OcrReading(clean_ocr_text(tsv_text(usual)[0]), languages, script, turn)

    def _han_reading_of_doubted_latin(self, data: bytes, words: Sequence[OcrWord]) -> str | None:
        """The TSV of a page OSD called Latin read with the data of DOUBTED_LATIN_SCRIPT, when its eng
        reading (`words`) is doubtful and that reading holds at least HAN_PAGE_SHARE of the script's
        characters; else None (one more run only for a doubtful page)."""
        languages = tuple(lang for lang in SCRIPT_LANGUAGES[DOUBTED_LATIN_SCRIPT] if lang in self.installed())
        if not languages or not doubtful_latin(words):
            return None
        tsv = self._recognize(data, languages, tsv=True)
        share = script_share(tsv_words(tsv), SCRIPT_CHARACTERS[DOUBTED_LATIN_SCRIPT])
        return tsv if share >= HAN_PAGE_SHARE else None

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


#: Textract's answers about the image itself: the same image is refused again, so no retry
TEXTRACT_REFUSALS = frozenset(
    {
        "InvalidParameterException",
        "UnsupportedDocumentException",
        "BadDocumentException",
        "DocumentTooLargeException",
    }
)


#: Textract's set quotas (docs.aws.amazon.com/textract/latest/dg/limits-document.html): "For synchronous
#: operations, JPEG, PNG, PDF, and TIFF files have a limit of 10 MB in memory"; "Amazon Textract supports
#: images with a resolution less than or equal to 10000 pixels on all sides". Over either: refused for good.
TEXTRACT_MAX_BYTES = 10_000_000  # "10 MB" read in decimal: the stricter reading
TEXTRACT_MAX_SIDE_PX = 10_000
TEXTRACT_JPEG_QUALITIES = (90, 80, 70, 60, 50)  # tried best first when an image is re-encoded to fit


def fit_for_textract(image: bytes) -> bytes:
    """The same PNG/JPEG bytes when within Textract's limits; else scaled to TEXTRACT_MAX_SIDE_PX a side
    and re-encoded as JPEG at the best quality that fits (halved again while even the lowest does not)."""
    from PIL import Image, ImageOps

    with _decoded_or_permanent(), Image.open(io.BytesIO(image)) as img:
        if len(image) <= TEXTRACT_MAX_BYTES and max(img.size) <= TEXTRACT_MAX_SIDE_PX:
            return image
        # re-encoding drops EXIF, so its orientation is applied first
        page = _on_white(ImageOps.exif_transpose(img)).convert("L" if img.mode in ("1", "L") else "RGB")
        scale = min(1.0, TEXTRACT_MAX_SIDE_PX / max(page.size))
        while True:
            size = (max(1, int(page.width * scale)), max(1, int(page.height * scale)))
            scaled = page if size == page.size else page.resize(size, Image.Resampling.LANCZOS)
            for quality in TEXTRACT_JPEG_QUALITIES:
                buf = io.BytesIO()
                scaled.save(buf, format="JPEG", quality=quality)
                if buf.tell() <= TEXTRACT_MAX_BYTES:
                    return buf.getvalue()
            scale /= 2


class TextractOcr:
    """Amazon Textract DetectDocumentText; `client` is a boto3 textract client made by the adapter layer."""

    name = "textract"

    def __init__(self, client: Any) -> None:
        self.client = client

    def available(self) -> bool:
        return self.client is not None

    def recognize(self, image: bytes) -> str:
        from botocore.exceptions import BotoCoreError, ClientError  # on AWS only: off the local path

        data = fit_for_textract(_normalise_image(image))
        try:
            response = self.client.detect_document_text(Document={"Bytes": data})
        except ClientError as exc:
            # Only the error code is kept, if it looks like one, and nothing is chained: what the service
            # says about it (the ClientError's text) goes to no span or log
            code = str(exc.response.get("Error", {}).get("Code", ""))
            code = provider_code(code) or "unknown"  # botocore takes the Code from whatever the endpoint sent
            if code in TEXTRACT_REFUSALS:
                raise PermanentStageError(
                    f"Textract rejected the image ({code}).", code=SpanErrorCode.DOCREADER_PARSE_FAILED
                ) from None
            raise TransientStageError(
                f"Textract failed ({code}).", code=SpanErrorCode.DOCREADER_UNAVAILABLE
            ) from None
        except BotoCoreError as exc:  # no answer: endpoint, connection, timeout
            raise TransientStageError(
                f"Textract could not be reached ({type(exc).__name__}).",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            ) from None
        lines = [b.get("Text", "") for b in response.get("Blocks", []) if b.get("BlockType") == "LINE"]
        return "\n".join(line for line in lines if line)


def default_ocr() -> TesseractOcr | RapidOcr | None:
    """tesseract (languages detected per page) when installed, else rapidocr when its wheel is, else None."""
    tesseract = TesseractOcr()
    if tesseract.available():
        return tesseract
    rapid = RapidOcr()
    return rapid if rapid.available() else None
