#!/usr/bin/env python3
"""OCR character error rate per language on every scan and image with a ground truth.

    .venv/bin/python bench/bench_ocr.py [--corpus DIR] [--modes detect,setting,legacy] [--turn DEGREES]
                                        [--json OUT.json]

Documents: the dev corpus's images and image-only PDFs with a `<file>.truth.txt` (English and Korean),
plus the pages in tests/fixtures/ocr (the corpus has no Japanese or Chinese scan, and its Korean one is a
table of contents; see make_fixtures.py there: a Japanese text rendered at 150 dpi, the two paragraphs of
the corpus's polyglossia-example-chinese.pdf and page 14 of its kotex-utf-doc.ko.pdf, both rendered at
150 dpi; three more Chinese texts drawn in each character set by make_zh_pages.py there; three more Japanese pages and two Chinese texts with English words in each set by make_mixed_pages.py there), plus that Japanese page photographed (`udhr-art1-4.ja.photo.jpg`, made at run time by
tests/page_images.photographed: speckles, a slight turn, blur, JPEG, as the corpus's page photo). Image-only PDFs go through the docreader, as in
production; images through the engine.

CER = Levenshtein distance / truth length, after whitespace is collapsed (Latin and Hangul) or removed
(Chinese and Japanese, which do not separate words, so a space tesseract adds or drops is no error).
Two more views of the same reading, to tell recognition from layout (the standard CER stays the goal):
  no-leaders  the CER after dot leaders (". . . ." of a table of contents) are taken out of both texts: a
              truth from a PDF's text layer has every dot, which OCR cannot count (on the corpus's Korean
              table of contents 1,262 of the 1,641 characters are leader dots and spaces)
  order-free  the no-leaders text compared without reading order: the longest common pieces of the lines
              are matched wherever they are (so a page number the truth puts on its own line, or a column
              read after another, costs nothing), then what is left is compared in order. Always <= the
              no-leaders CER plus the unmatched remainder; a floor for what recognition alone costs.

Modes (each reads every document):
  detect   the default engine: script detected per page (tesseract OSD), 300 dpi upscaling, greyscale
  setting  the same with `ocr_languages` set to the document's language (what a KB setting gives)
  legacy   eng+kor on every page (the languages before issue 13), colour, no upscaling
  norules  detect without painting ruling lines and frames white (the default before issue 13's Korean work)

`--jitter 0.96,0.98,1,1.02,1.04` reads every document once per multiplier of its enlargement factor (an image
not enlarged stays so) and reports the CER per language as the mean over them, with each document's range: a
factor moved by 2% moves single pages by 5-17 CER points (bench/README, 2026-12-04 21:50), so a change that
moves the factor is judged on the mean, not on one reading.

`--turn 90|180|270` reads every image turned that far counter-clockwise (a page scanned sideways or
upside down): the engine finds the orientation by OSD and turns it back; PDFs are read as they are.

"Clean scans" are the 150 dpi page renders: the goal is CER <= 5% on those in every language.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

DEFAULT_CORPUS = default_corpus(ROOT)

from page_images import photographed, turned_png  # noqa: E402
from rapidfuzz.distance import Levenshtein  # noqa: E402

from chalicelib.parsers import build_docreader  # noqa: E402
from chalicelib.parsers import ocr as ocr_module  # noqa: E402
from chalicelib.parsers.ocr import TesseractOcr  # noqa: E402
from chalicelib.ports import ReadRequest  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "ocr"
IMAGE_TYPES = ("png", "jpg", "jpeg", "gif", "pdf")
CLEAN = {
    "debian-reference-p24-31.scan.pdf",
    "debian-reference-p40.png",
    "debian-reference-p40.gif",
    "kotex-utf-doc-p3.ko.png",
    "kotex-utf-doc-p14.ko.png",
    "udhr-art1-4.ja.png",
    "polyglossia-zh-hans.png",
    "polyglossia-zh-hant.png",
    *(
        f"{text}.zh-{script}.png"
        for text in ("udhr-art2-5", "taohuayuan", "manual", "manual-en", "python-en")
        for script in ("hans", "hant")
    ),
    "manual-en.ja.png",
    "python-en.ja.png",
    "wagahai.ja.png",
}
NO_SPACES = ("jpn", "chi_sim", "chi_tra")


def language_of(name: str) -> str:
    if ".ko." in name:
        return "kor"
    if ".ja." in name:
        return "jpn"
    if "zh-hans" in name:
        return "chi_sim"
    if "zh-hant" in name:
        return "chi_tra"
    return "eng"


def cer(hypothesis: str, truth: str, language: str) -> float:
    sep = "" if language in NO_SPACES else " "
    h = re.sub(r"\s+", sep, hypothesis).strip()
    t = re.sub(r"\s+", sep, truth).strip()
    return Levenshtein.distance(h, t) / max(len(t), 1)


SCRIPT_CHARS = {
    "kor": re.compile(r"[\uac00-\ud7a3]"),
    "jpn": re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]"),
    "chi_sim": re.compile(r"[\u4e00-\u9fff]"),
    "chi_tra": re.compile(r"[\u4e00-\u9fff]"),
}


def script_cer(hypothesis: str, truth: str, language: str) -> float | None:
    """CER over the characters of the language's own script only (Hangul, kana + Han, Han): how well the
    script itself is read, apart from Latin words, punctuation, layout and reading order."""
    chars = SCRIPT_CHARS.get(language)
    if chars is None:
        return None
    h, t = "".join(chars.findall(hypothesis)), "".join(chars.findall(truth))
    return Levenshtein.distance(h, t) / max(len(t), 1)


#: a dot leader: three or more dots (or middle dots, ellipses), spaces between allowed
LEADER = re.compile(r"(?:[.·…] ?){3,}")


def without_leaders(text: str) -> str:
    return LEADER.sub(" ", text)


def order_free_cer(hypothesis: str, truth: str, language: str, min_piece: int = 3) -> float:
    """CER apart from reading order: the longest piece common to the remaining truth and hypothesis (never
    across a line end) is matched and taken out of both, again until no common piece of `min_piece`
    characters is left; then each shorter truth line ("3", "개관") found whole among the hypothesis's words
    is matched; what remains of each, in order, is compared by Levenshtein distance. Never more than the
    in-order CER (the reading order is one of the orders)."""
    sep = "" if language in NO_SPACES else " "

    def lines(text: str) -> list[str]:
        return [re.sub(r"\s+", sep, line).strip() for line in text.splitlines() if line.strip()]

    truth_left = list("\x00".join(lines(truth)))  # distinct line separators: a match never spans one
    hyp_left = list("\x01".join(lines(hypothesis)))
    length = sum(1 for c in truth_left if c != "\x00")
    while True:
        match = SequenceMatcher(
            None, "".join(truth_left), "".join(hyp_left), autojunk=False
        ).find_longest_match()
        if match.size < min_piece:
            break
        truth_left[match.a : match.a + match.size] = "\x00" * match.size
        hyp_left[match.b : match.b + match.size] = "\x01" * match.size
    for line in re.findall("[^\x00]+", "".join(truth_left)):
        if line not in lines(truth):
            continue  # the rest of a line whose other part matched: left to the comparison below
        hyp = "".join(hyp_left)
        found = re.search(f"(?:^|[\x01 ]){re.escape(line)}(?=$|[\x01 ])", hyp)
        if found:
            start = found.end() - len(line)
            hyp_left[start : found.end()] = "\x01" * len(line)
            t = "".join(truth_left).index(line)
            truth_left[t : t + len(line)] = "\x00" * len(line)
    rest_t = "".join(c for c in truth_left if c != "\x00")
    rest_h = "".join(c for c in hyp_left if c != "\x01")
    return min(Levenshtein.distance(rest_h, rest_t) / max(length, 1), cer(hypothesis, truth, language))


def documents(corpus: Path, generated: Path) -> list[Path]:
    found = []
    for folder in (corpus, FIXTURES):
        for truth in sorted(folder.glob("*.truth.txt")):
            doc = truth.with_name(truth.name[: -len(".truth.txt")])
            if doc.suffix.lstrip(".").lower() in IMAGE_TYPES and doc.exists():
                found.append(doc)
    return found + photographed_pages(generated)


def photographed_pages(folder: Path) -> list[Path]:
    """The Japanese fixture page photographed as the corpus's page photo is (tests/page_images.py: an A4
    sheet at 150 dpi, 1241×1754, turned 0.8°, speckled, JPEG), written to `folder` with its truth."""
    name = "udhr-art1-4.ja.png"
    photo = folder / "udhr-art1-4.ja.photo.jpg"
    photo.write_bytes(photographed((FIXTURES / name).read_bytes()))
    photo.with_name(photo.name + ".truth.txt").write_text((FIXTURES / f"{name}.truth.txt").read_text("utf-8"))
    return [photo]


def engine_for(mode: str, language: str) -> TesseractOcr:
    if mode == "setting":
        return TesseractOcr((language, "eng") if language != "eng" else ("eng",))
    if mode == "legacy":
        return TesseractOcr(("eng", "kor"), upscale=False, greyscale=False, rules=False)
    if mode == "norules":
        return TesseractOcr(rules=False)
    return TesseractOcr()


@contextlib.contextmanager
def factor_scaled(scale: float) -> Iterator[None]:
    """Every enlargement the engine chooses meanwhile multiplied by `scale` (1: as chosen; an image not
    enlarged stays so)."""
    if scale == 1.0:
        yield
        return
    chosen = ocr_module._upscale_factor

    def scaled(width: int, height: int, dpi: float | None) -> float:
        factor = chosen(width, height, dpi)
        return factor * scale if factor > 1.0 else factor

    with mock.patch.object(ocr_module, "_upscale_factor", scaled):
        yield


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--modes", default="detect,setting,legacy")
    ap.add_argument("--only", default="", help="substring of the file names to read")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--turn",
        type=int,
        default=0,
        choices=(0, 90, 180, 270),
        help="turn every image this many degrees counter-clockwise before it is read (PDFs stay as they are)",
    )
    ap.add_argument(
        "--jitter",
        default="1",
        help="comma-separated multipliers of each enlargement factor; each document is read once per multiplier",
    )
    a = ap.parse_args()
    scales = [float(x) for x in a.jitter.split(",")]
    if not TesseractOcr().available():
        sys.exit("tesseract is not installed (make system-deps)")
    print(f"tesseract languages installed: {', '.join(TesseractOcr().installed())}")
    rows: list[dict[str, Any]] = []
    generated = Path(tempfile.mkdtemp(prefix="bench-ocr-"))
    docs = [d for d in documents(a.corpus, generated) if a.only in d.name]
    for mode in a.modes.split(","):
        print(f"\n== {mode}")
        for doc, scale in itertools.product(docs, scales):
            language = language_of(doc.name)
            engine = engine_for(mode, language)
            data = doc.read_bytes()
            if a.turn and doc.suffix != ".pdf":
                data = turned_png(data, a.turn)
            t0 = time.perf_counter()
            script, langs = "", ""
            with factor_scaled(scale):
                if doc.suffix == ".pdf":
                    text = (
                        build_docreader(ocr=engine)
                        .read(ReadRequest(data=data, file_name=doc.name, file_type="pdf"))
                        .markdown
                    )
                else:
                    reading = engine.read(data)
                    text, script, langs = reading.text, reading.script, "+".join(reading.languages)
                    if reading.turned:
                        langs += f" (turned {reading.turned})"
            dt = time.perf_counter() - t0
            truth = doc.with_name(doc.name + ".truth.txt").read_text(encoding="utf-8")
            value = cer(text, truth, language)
            no_leaders = cer(without_leaders(text), without_leaders(truth), language)
            order_free = order_free_cer(without_leaders(text), without_leaders(truth), language)
            own = script_cer(text, truth, language)
            is_clean = doc.name in CLEAN
            rows.append(
                {
                    "mode": mode,
                    "jitter": scale,
                    "file": doc.name,
                    "language": language,
                    "cer": value,
                    "cer_no_leaders": no_leaders,
                    "cer_order_free": order_free,
                    "s": dt,
                    "clean": is_clean,
                    "script_cer": own,
                    "script": script,
                    "read_with": langs,
                }
            )
            print(
                f"  {language:8} {doc.name:36}{f' x{scale:<5g}' if len(scales) > 1 else ''} CER {value * 100:5.1f}%  no-leaders {no_leaders * 100:5.1f}%  "
                f"order-free {order_free * 100:5.1f}%  {dt:5.1f}s  "
                f"{(script + ' -> ' + langs) if script or langs else '(docreader)':26}{'  clean' if is_clean else '':7}"
                + (f"  script-only CER {own * 100:5.1f}%" if own is not None else "")
            )
        print(f"  -- {mode}: mean CER on clean scans per language (goal <= 5%)")
        for language in ("eng", "kor", "jpn", "chi_sim", "chi_tra"):
            mine = [r for r in rows if r["mode"] == mode and r["language"] == language]
            clean = [r for r in mine if r["clean"]]
            other = [r["cer"] for r in mine if not r["clean"]]
            if clean or other:
                means = "  ".join(
                    f"{label} {statistics.mean(r[key] for r in clean) * 100 if clean else float('nan'):5.1f}%"
                    for label, key in (
                        ("CER", "cer"),
                        ("no-leaders", "cer_no_leaders"),
                        ("order-free", "cer_order_free"),
                    )
                )
                print(
                    f"     {language:8} clean ({len(clean)}) {means}   "
                    f"other images CER {statistics.mean(other) * 100 if other else float('nan'):5.1f}% ({len(other)})"
                )
        if len(scales) > 1:
            print(f"  -- {mode}: CER per document over the factors x{','.join(f'{x:g}' for x in scales)}")
            for doc in docs:
                values = [r["cer"] * 100 for r in rows if r["mode"] == mode and r["file"] == doc.name]
                print(
                    f"     {doc.name:36} mean {statistics.mean(values):5.1f}%  "
                    f"range {min(values):5.1f}-{max(values):5.1f}%"
                )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
