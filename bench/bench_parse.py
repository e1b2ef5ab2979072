#!/usr/bin/env python3
"""Parse benchmark: our docreader vs Microsoft MarkItDown on the dev corpus, in the same process and loop.

    .venv/bin/python bench/bench_parse.py [--corpus DIR] [--rounds 3] [--types pdf,docx] [--no-ocr] [--asr]
                                          [--json OUT.json] [--pdf-pages-only] [--files PATH ...]
                                          [--pdf-baseline GIT_REF] [--no-markitdown]
                                          [--kreuzberg | --kreuzberg-only] [--kreuzberg-venv DIR]
                                          [--kreuzberg-like-ours]

Per type: files/s of each tool (sum of per-file median wall times) and a fidelity figure, the word-level
F1 of the tool's output against a reference text:
  * the corpus's `<file>.truth.txt` where it exists;
  * otherwise an independent extractor: pdf → poppler `pdftotext`; docx → python-docx paragraphs and
    table cells; pptx → python-pptx shape text and notes; xlsx → openpyxl values; xls → xlrd values;
    html/htm → lxml text of <body>; mhtml → email + lxml; epub → lxml text of every XHTML file;
    csv/txt/md → the file itself; json → every key and scalar value. doc/ppt have no reference.
PDF pages/s: on the text PDFs, ours against pypdfium2's raw text extraction (the floor: open, load each
page and its text page, get_text_range) and MarkItDown, interleaved rounds in the same run
(`--pdf-pages-only` runs just that section), with the ratio to the floor of every PDF (the goal, >= 0.7,
holds per text-layer PDF, not only for the total). `--files A.pdf DIR ...` adds PDFs beside the corpus's
(`make_pdf_samples.py` generates slides with figures and long CJK/English manuals); `--pdf-baseline REF`
also times `chalicelib/parsers/pdf.py` as of git REF through the same reader, interleaved, for a
before/after on the same machine load; `--no-markitdown` leaves MarkItDown out of that section.
Kreuzberg (`--kreuzberg`, or `--kreuzberg-only` for just that section): ours against kreuzberg 4.10 (Rust
core, run in its own venv by bench/peer_kreuzberg_parse.py) per document type, interleaved rounds, per-type
time ratios and word F1 (see kreuzberg_side). `--kreuzberg-like-ours` asks kreuzberg for what our reader
gives, Markdown with the documents' images (its defaults are plain text and, but for docx, no images).
Overall throughput ratio = markitdown time / our time, over the files both parse to non-empty text
(images and audio excluded: those are OCR/ASR work, measured separately).
OCR: character error rate of tesseract (through the docreader for the scanned PDFs) on every image/scan
with a truth file; "clean scans" are the 150 dpi renders (debian-reference-p24-31.scan.pdf,
debian-reference-p40.png/.gif).
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import types
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_THREAD_LIMIT"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
warnings.filterwarnings("ignore")
import logging  # noqa: E402

logging.disable(logging.CRITICAL)

from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

DEFAULT_CORPUS = default_corpus(Path(__file__).resolve().parents[1])
MEDIA_TYPES = {"png", "jpg", "jpeg", "gif", "mp3", "wav", "m4a", "flac", "ogg"}
CLEAN_SCANS = {"debian-reference-p24-31.scan.pdf", "debian-reference-p40.png", "debian-reference-p40.gif"}
_WORD = re.compile(r"\w+", re.UNICODE)


class Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def guarded(fn: Callable[[], str], timeout: int) -> tuple[str, str]:
    """(status, text or error)."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        return "ok", fn()
    except Timeout:
        return "timeout", ""
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {str(exc)[:160]}"
    finally:
        signal.alarm(0)


def measure(fn: Callable[[], str], rounds: int, timeout: int) -> tuple[float, str, str]:
    """Median wall time over up to `rounds` runs (one run when it takes >= 5 s)."""
    walls: list[float] = []
    status, out = "ok", ""
    for _ in range(rounds):
        t0 = time.perf_counter()
        status, out = guarded(fn, timeout)
        walls.append(time.perf_counter() - t0)
        if status != "ok" or walls[-1] >= 5.0:
            break
    return statistics.median(walls), status, out


# ---------------------------------------------------------------- fidelity


def tokens(text: str) -> Counter[str]:
    return Counter(w.lower() for w in _WORD.findall(text))


_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")


def strip_markup(markdown: str) -> str:
    """Drops what is markup, not content: HTML comments (slide markers) and image targets."""
    return _IMAGE.sub(r"\1", _COMMENT.sub(" ", markdown))


def f1_recall(output: str, reference: str) -> tuple[float, float] | None:
    """Word-multiset F1 and recall of the output against the reference."""
    out, ref = tokens(strip_markup(output)), tokens(reference)
    if not ref:
        return None
    overlap = sum((out & ref).values())
    if not overlap:
        return 0.0, 0.0
    precision = overlap / max(sum(out.values()), 1)
    recall = overlap / sum(ref.values())
    return 2 * precision * recall / (precision + recall), recall


def _lxml_text(html: bytes) -> str:
    from lxml import html as lhtml

    doc = lhtml.fromstring(html)
    for bad in doc.xpath("//script|//style|//head"):
        bad.getparent().remove(bad)
    return doc.text_content()


def _json_text(value: Any, out: list[str], keys: set[str]) -> None:
    """Every scalar value, and each distinct key once (repeating a key per record is not content)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in keys:
                keys.add(k)
                out.append(str(k))
            _json_text(v, out, keys)
    elif isinstance(value, list):
        for v in value:
            _json_text(v, out, keys)
    elif value is not None:
        out.append(str(value))


def _chart_words(chart: Any) -> list[str]:
    """A chart's title, categories, series names and values, as python-pptx reads them."""
    words = [chart.chart_title.text_frame.text] if chart.has_title else []
    for plot in chart.plots:
        words.extend(str(c) for c in plot.categories)
        for series in plot.series:
            words.append(series.name)
            words.extend(f"{v:g}" for v in series.values if v is not None)
    return words


def reference_text(path: Path, file_type: str) -> tuple[str, str] | None:
    """(reference text, source name) or None."""
    truth = path.with_name(path.name + ".truth.txt")
    if truth.exists():
        return truth.read_text(encoding="utf-8"), "truth.txt"
    data = path.read_bytes()
    if file_type == "pdf":
        if not shutil.which("pdftotext"):
            return None
        proc = subprocess.run(
            ["pdftotext", "-enc", "UTF-8", str(path), "-"], capture_output=True, timeout=120
        )
        return (proc.stdout.decode("utf-8", "replace"), "pdftotext") if proc.returncode == 0 else None
    if file_type == "docx":
        import docx

        d = docx.Document(io.BytesIO(data))
        parts = [p.text for p in d.paragraphs] + [c.text for t in d.tables for r in t.rows for c in r.cells]
        return "\n".join(parts), "python-docx"
    if file_type == "pptx":
        from pptx import Presentation

        prs = Presentation(io.BytesIO(data))
        parts = []
        for slide in prs.slides:
            for shape in slide.shapes:
                if shape.has_text_frame:
                    parts.append(shape.text_frame.text)
                if getattr(shape, "has_table", False) and shape.has_table:
                    parts.extend(c.text for r in shape.table.rows for c in r.cells)
                if getattr(shape, "has_chart", False) and shape.has_chart:  # ours reads charts as tables
                    parts.extend(_chart_words(shape.chart))
            if slide.has_notes_slide:
                parts.append(slide.notes_slide.notes_text_frame.text)
        return "\n".join(parts), "python-pptx"
    if file_type == "xlsx":
        import openpyxl

        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
        parts = [
            str(v)
            for ws in wb.worksheets
            for row in ws.iter_rows(values_only=True)
            for v in row
            if v is not None
        ]
        return "\n".join(parts), "openpyxl"
    if file_type == "xls":
        import xlrd

        book = xlrd.open_workbook(file_contents=data)
        parts = [
            str(c.value) for s in book.sheets() for r in range(s.nrows) for c in s.row(r) if c.value != ""
        ]
        return "\n".join(p[:-2] if p.endswith(".0") else p for p in parts), "xlrd"
    if file_type in ("html", "htm"):
        return _lxml_text(data), "lxml"
    if file_type == "mhtml":
        import email
        import email.policy

        msg = email.message_from_bytes(data, policy=email.policy.default)
        for part in msg.walk():
            payload = part.get_payload(decode=True)
            if part.get_content_type() == "text/html" and isinstance(payload, bytes):
                return _lxml_text(payload), "email+lxml"
        return None
    if file_type == "epub":
        zf = zipfile.ZipFile(io.BytesIO(data))
        parts = [_lxml_text(zf.read(n)) for n in zf.namelist() if n.endswith((".xhtml", ".html", ".htm"))]
        return "\n".join(parts), "lxml(zip)"
    if file_type in ("csv", "txt", "md", "markdown"):
        return data.decode("utf-8", "replace"), "file"
    if file_type == "json":
        out: list[str] = []
        _json_text(json.loads(data), out, set())
        return "\n".join(out), "json walk"
    return None


# ---------------------------------------------------------------- main


def cer(hypothesis: str, truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    h = re.sub(r"\s+", " ", hypothesis).strip()
    t = re.sub(r"\s+", " ", truth).strip()
    return Levenshtein.distance(h, t) / max(len(t), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--types", default="")
    ap.add_argument("--no-ocr", action="store_true")
    ap.add_argument("--asr", action="store_true", help="also transcribe the audio files with faster-whisper")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--pdf-pages-only",
        action="store_true",
        help="only the PDF pages/s section (vs pypdfium2 and MarkItDown)",
    )
    ap.add_argument(
        "--files",
        type=Path,
        nargs="*",
        default=[],
        help="extra PDFs or folders of PDFs for the PDF pages/s section (beside the corpus's)",
    )
    ap.add_argument(
        "--pdf-baseline",
        default="",
        metavar="GIT_REF",
        help="also time chalicelib/parsers/pdf.py as of this git ref, interleaved (before/after)",
    )
    ap.add_argument("--no-markitdown", action="store_true", help="leave MarkItDown out of the PDF section")
    ap.add_argument(
        "--kreuzberg",
        action="store_true",
        help="also the per-type section against kreuzberg (peer venv: --kreuzberg-venv)",
    )
    ap.add_argument("--kreuzberg-only", action="store_true", help="only the kreuzberg section")
    ap.add_argument(
        "--kreuzberg-like-ours",
        action="store_true",
        help="kreuzberg gives Markdown and extracts images, as ours does (default: its defaults)",
    )
    ap.add_argument(
        "--kreuzberg-venv",
        type=Path,
        default=Path(os.environ.get("WEKNORA_KREUZBERG_VENV") or "/tmp/kreuzberg-venv"),
        help="a venv with kreuzberg 4.10 (default $WEKNORA_KREUZBERG_VENV, else /tmp/kreuzberg-venv)",
    )
    a = ap.parse_args()
    if a.pdf_pages_only:
        result = pdf_pages(
            a.corpus, a.rounds, a.files, baseline=a.pdf_baseline, markitdown=not a.no_markitdown
        )
        if a.json:
            a.json.parent.mkdir(parents=True, exist_ok=True)
            a.json.write_text(json.dumps({"pdf_pages": result}, indent=1, default=str))
        return
    if a.kreuzberg_only:
        kreuzberg_side(
            a.corpus, a.rounds, a.types, a.kreuzberg_venv, a.timeout, a.json, a.kreuzberg_like_ours
        )
        return

    from markitdown import MarkItDown

    from chalicelib.parsers import build_docreader
    from chalicelib.parsers.ocr import TesseractOcr
    from chalicelib.ports import ReadRequest

    with open(a.corpus / "MANIFEST.tsv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if a.types:
        rows = [r for r in rows if r["type"] in a.types.split(",")]
    reader = build_docreader()
    md = MarkItDown()

    def ours(path: Path, file_type: str) -> str:
        result = reader.read(ReadRequest(data=path.read_bytes(), file_name=path.name, file_type=file_type))
        return result.markdown

    # Warm-up (imports, model loads) for both tools, not counted.
    for r in rows:
        p = a.corpus / r["file"]
        if (
            r["type"] in ("txt", "html", "docx", "pdf", "xlsx", "pptx", "csv", "json", "epub")
            and p.stat().st_size < 200_000
        ):
            guarded(functools.partial(ours, p, r["type"]), a.timeout)
            guarded(functools.partial(lambda path: md.convert(str(path)).markdown, p), a.timeout)

    records: list[dict[str, Any]] = []
    for r in sorted(rows, key=lambda r: (r["type"], r["file"])):
        path, ft = a.corpus / r["file"], r["type"]
        rec: dict[str, Any] = {"file": r["file"], "type": ft, "bytes": int(r["bytes"])}
        # Image-only PDFs are OCR work: their fidelity is the OCR section's CER, not this table.
        ref = reference_text(path, ft) if ft not in MEDIA_TYPES and ".scan." not in r["file"] else None
        for tool, fn in (
            ("ours", lambda p=path, t=ft: ours(p, t)),
            ("markitdown", lambda p=path: md.convert(str(p)).markdown),
        ):
            wall, status, out = measure(fn, a.rounds, a.timeout)
            ok = status == "ok" and bool(out.strip())
            fr = f1_recall(out, ref[0]) if ok and ref else None
            rec[tool] = {
                "wall_s": wall,
                "status": status if ok or status != "ok" else "empty",
                "chars": len(out) if status == "ok" else 0,
                "f1": fr[0] if fr else None,
                "recall": fr[1] if fr else None,
                "error": out if status != "ok" else None,
            }
        rec["reference"] = ref[1] if ref else None
        records.append(rec)
        o, m = rec["ours"], rec["markitdown"]
        print(
            f"{ft:8} {r['file'][:42]:42} ours {o['status']:6} {o['wall_s']:7.3f}s F1={_fmt(o['f1'])} "
            f"R={_fmt(o['recall'])}  markitdown {m['status']:7} {m['wall_s']:7.3f}s F1={_fmt(m['f1'])} "
            f"R={_fmt(m['recall'])}",
            flush=True,
        )

    print("\n== per type (files/s = files / sum of per-file median wall s; F1 vs reference)")
    print(
        f"{'type':8} {'files':>5} {'ours f/s':>9} {'mkd f/s':>9} {'speedup':>8} {'ours F1':>8} {'mkd F1':>8} "
        f"{'ours R':>7} {'mkd R':>7} {'ok o/m':>7}  reference"
    )
    by_type: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_type.setdefault(rec["type"], []).append(rec)
    summary: dict[str, Any] = {}
    for ft, recs in sorted(by_type.items()):
        to = sum(x["ours"]["wall_s"] for x in recs)
        tm = sum(x["markitdown"]["wall_s"] for x in recs)
        fo = [x["ours"]["f1"] for x in recs if x["ours"]["f1"] is not None]
        fm = [x["markitdown"]["f1"] for x in recs if x["markitdown"]["f1"] is not None]
        ro = [x["ours"]["recall"] for x in recs if x["ours"]["recall"] is not None]
        rm = [x["markitdown"]["recall"] for x in recs if x["markitdown"]["recall"] is not None]
        ok_o = sum(x["ours"]["status"] == "ok" for x in recs)
        ok_m = sum(x["markitdown"]["status"] == "ok" for x in recs)
        refs = sorted({x["reference"] for x in recs if x["reference"]})
        summary[ft] = {
            "files": len(recs),
            "ours_files_per_s": len(recs) / to if to else None,
            "markitdown_files_per_s": len(recs) / tm if tm else None,
            "ours_f1": statistics.mean(fo) if fo else None,
            "markitdown_f1": statistics.mean(fm) if fm else None,
            "ours_recall": statistics.mean(ro) if ro else None,
            "markitdown_recall": statistics.mean(rm) if rm else None,
            "ok_ours": ok_o,
            "ok_markitdown": ok_m,
        }
        print(
            f"{ft:8} {len(recs):5d} {len(recs) / to:9.1f} {len(recs) / tm:9.1f} {tm / to:7.1f}x "
            f"{_fmt(summary[ft]['ours_f1']):>8} {_fmt(summary[ft]['markitdown_f1']):>8} "
            f"{_fmt(summary[ft]['ours_recall']):>7} {_fmt(summary[ft]['markitdown_recall']):>7} "
            f"{ok_o:3d}/{ok_m:<3d}  "
            f"{', '.join(refs) or '-'}"
        )
    both = [
        x
        for x in records
        if x["type"] not in MEDIA_TYPES and x["ours"]["status"] == "ok" and x["markitdown"]["status"] == "ok"
    ]
    t_o = sum(x["ours"]["wall_s"] for x in both)
    t_m = sum(x["markitdown"]["wall_s"] for x in both)
    f_o = [x["ours"]["f1"] for x in both if x["ours"]["f1"] is not None]
    f_m = [x["markitdown"]["f1"] for x in both if x["markitdown"]["f1"] is not None]
    docs = [x for x in records if x["type"] not in MEDIA_TYPES]
    overall = {
        "files_both_ok": len(both),
        "ours_s": t_o,
        "markitdown_s": t_m,
        "throughput_ratio": t_m / t_o,
        "ours_mean_f1": statistics.mean(f_o),
        "markitdown_mean_f1": statistics.mean(f_m),
        "ours_ok": sum(x["ours"]["status"] == "ok" for x in docs),
        "markitdown_ok": sum(x["markitdown"]["status"] == "ok" for x in docs),
        "documents": len(docs),
    }
    print(
        f"\n== overall on {len(both)} documents both parse: ours {t_o:.2f} s, markitdown {t_m:.2f} s -> "
        f"throughput ratio {t_m / t_o:.1f}x (goal >= 5x); mean F1 ours {overall['ours_mean_f1']:.3f}, "
        f"markitdown {overall['markitdown_mean_f1']:.3f}"
    )
    print(
        f"   documents parsed to non-empty text: ours {overall['ours_ok']}/{len(docs)}, "
        f"markitdown {overall['markitdown_ok']}/{len(docs)}"
    )

    pdf_summary = pdf_pages(
        a.corpus, a.rounds, a.files, baseline=a.pdf_baseline, markitdown=not a.no_markitdown
    )
    if a.kreuzberg:
        kreuzberg_side(a.corpus, a.rounds, a.types, a.kreuzberg_venv, a.timeout, None, a.kreuzberg_like_ours)

    ocr_rows: list[dict[str, Any]] = []
    if not a.no_ocr:
        print("\n== OCR character error rate (tesseract; whitespace-normalised Levenshtein / truth length)")
        for langs in (("eng",), ("eng", "kor")):
            engine = TesseractOcr(langs)
            if not engine.available():
                print("tesseract not installed")
                break
            ocr_reader = build_docreader(ocr=engine)
            for truth in sorted(a.corpus.glob("*.truth.txt")):
                name = truth.name[: -len(".truth.txt")]
                ft = name.rsplit(".", 1)[-1]
                if ft not in ("png", "jpg", "jpeg", "gif", "pdf"):
                    continue
                data = (a.corpus / name).read_bytes()
                t0 = time.perf_counter()
                if ft == "pdf":
                    text = ocr_reader.read(ReadRequest(data=data, file_name=name, file_type="pdf")).markdown
                else:
                    text = engine.recognize(data)
                dt = time.perf_counter() - t0
                value = cer(text, truth.read_text(encoding="utf-8"))
                ocr_rows.append(
                    {
                        "langs": "+".join(langs),
                        "file": name,
                        "cer": value,
                        "s": dt,
                        "clean": name in CLEAN_SCANS,
                    }
                )
                print(
                    f"  {'+'.join(langs):8} {name:40} CER {value * 100:5.1f}%  {dt:5.1f}s{'  (clean)' if name in CLEAN_SCANS else ''}"
                )
            clean = [x["cer"] for x in ocr_rows if x["clean"] and x["langs"] == "+".join(langs)]
            allc = [x["cer"] for x in ocr_rows if x["langs"] == "+".join(langs)]
            print(
                f"  {'+'.join(langs)}: clean scans mean CER {statistics.mean(clean) * 100:.1f}% (goal <= 5%), "
                f"all images mean {statistics.mean(allc) * 100:.1f}%"
            )

    asr_rows: list[dict[str, Any]] = []
    if a.asr:
        from rapidfuzz.distance import Levenshtein

        from chalicelib.parsers.asr import WhisperAsr

        asr = WhisperAsr()
        print("\n== ASR word error rate (faster-whisper base, int8, 1 thread)")
        for truth in sorted(a.corpus.glob("speech-*.truth.txt")):
            name = truth.name[: -len(".truth.txt")]
            t0 = time.perf_counter()
            text = asr.transcribe((a.corpus / name).read_bytes(), name)
            dt = time.perf_counter() - t0
            h = re.findall(r"[a-z0-9']+", text.lower())
            t = re.findall(r"[a-z0-9']+", truth.read_text().lower())
            w = Levenshtein.distance(h, t) / max(len(t), 1)
            asr_rows.append({"file": name, "wer": w, "s": dt})
            print(f"  {name:36} WER {w * 100:5.1f}%  {dt:5.1f}s")

    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps(
                {
                    "by_type": summary,
                    "overall": overall,
                    "pdf_pages": pdf_summary,
                    "ocr": ocr_rows,
                    "asr": asr_rows,
                    "files": records,
                },
                indent=1,
                default=str,
            )
        )


PDF_FLOOR_GOAL = 0.7
PDF_MIN_SAMPLE_S = 0.02  # a call shorter than this is repeated within a round (a few-ms file is all noise)


def pdf_inputs(corpus: Path, files: list[Path]) -> list[Path]:
    """The corpus's PDFs (image-only `.scan.` ones left out: OCR work) and every PDF under `files`."""
    paths = [p for p in sorted(corpus.glob("*.pdf")) if ".scan." not in p.name]
    for item in files:
        paths.extend(sorted(item.rglob("*.pdf")) if item.is_dir() else [item])
    return paths


def baseline_pdf_parser(ref: str) -> Callable[..., Any]:
    """`parse_pdf` of `chalicelib/parsers/pdf.py` as of git `ref`, loaded as a module of its own, with the
    ref's own `pdf_pdfium.py` and `pdf_figures.py` where it has them (the parser's calls into pdfium must
    match the ref's bindings: today's unchecked calls given the ref's int addresses would crash)."""
    root = Path(__file__).resolve().parents[1]

    def source_of(path: str) -> str | None:
        shown = subprocess.run(
            ["git", "-C", str(root), "show", f"{ref}:{path}"], capture_output=True, text=True, check=False
        )
        return shown.stdout if shown.returncode == 0 else None

    def load(name: str, path: str, source: str) -> types.ModuleType:
        module = types.ModuleType(name)
        module.__file__ = f"{ref}:{path}"
        sys.modules[name] = module  # dataclasses look their module up
        exec(compile(source, module.__file__, "exec"), module.__dict__)
        return module

    parser_source = source_of("chalicelib/parsers/pdf.py")
    if parser_source is None:
        raise SystemExit(f"{ref} has no chalicelib/parsers/pdf.py")
    for sibling in ("pdf_pdfium", "pdf_figures"):
        path = f"chalicelib/parsers/{sibling}.py"
        sibling_source = source_of(path)
        if sibling_source is not None:
            load(f"pdf_baseline_{sibling}", path, sibling_source)
            parser_source = parser_source.replace(f"chalicelib.parsers.{sibling}", f"pdf_baseline_{sibling}")
    return load("pdf_baseline", "chalicelib/parsers/pdf.py", parser_source).parse_pdf


def pdf_pages(
    corpus: Path, rounds: int, files: list[Path] | None = None, baseline: str = "", markitdown: bool = True
) -> dict[str, Any]:
    """PDF pages/s on the text PDFs (scans are OCR work): our docreader (structure: headings,
    paragraphs, running headers removed, figures) against the floor, pypdfium2's raw text extraction
    (open, per page load + text page + get_text_range, close), and MarkItDown, in interleaved rounds of the
    same run. Per file the median over rounds (a file whose floor takes under 20 ms is run several times a
    round); pages/s = pages / sum of medians; the ratio to the floor per file, since the goal holds for
    every text-layer PDF. Beside wall time, each call's CPU time (`time.process_time`): on a shared,
    loaded machine the wall ratio moves with what the other processes do between two calls, the CPU ratio
    much less. With `baseline`, the parser file of that git ref runs through the same reader, in the same
    rounds."""
    import pypdfium2 as pdfium

    from chalicelib.parsers import build_docreader
    from chalicelib.ports import ReadRequest

    reader = build_docreader()

    def floor(data: bytes) -> int:
        pdf = pdfium.PdfDocument(data)
        try:
            n = len(pdf)
            for i in range(n):
                page = pdf[i]
                textpage = page.get_textpage()
                textpage.get_text_range()
                textpage.close()
                page.close()
            return n
        finally:
            pdf.close()

    def text_chars(data: bytes) -> int:
        pdf = pdfium.PdfDocument(data)
        try:
            total = 0
            for i in range(len(pdf)):
                page = pdf[i]
                textpage = page.get_textpage()
                total += len(textpage.get_text_range().strip())
                textpage.close()
                page.close()
            return total
        finally:
            pdf.close()

    tools: dict[str, Callable[[Path, bytes], object]] = {
        "pypdfium2": lambda p, d: floor(d),
        "ours": lambda p, d: reader.read(ReadRequest(data=d, file_name=p.name, file_type="pdf")),
    }
    if baseline:
        before = build_docreader()
        builtin = before.catalog["builtin"]
        builtin.handlers["pdf"] = baseline_pdf_parser(baseline)  # type: ignore[attr-defined]
        tools["baseline"] = lambda p, d: before.read(ReadRequest(data=d, file_name=p.name, file_type="pdf"))
    if markitdown:
        from markitdown import MarkItDown

        md = MarkItDown()
        tools["markitdown"] = lambda p, d: md.convert(str(p)).markdown
    print(
        f"\n== PDF pages/s (text PDFs; median of {rounds} interleaved rounds per file; ratio = floor time / "
        f"ours, goal >= {PDF_FLOOR_GOAL} per file{'; baseline = ' + baseline if baseline else ''})"
    )
    totals = dict.fromkeys(tools, 0.0)
    cpu_totals = dict.fromkeys(tools, 0.0)
    pages = 0
    per_file: list[dict[str, Any]] = []
    for path in pdf_inputs(corpus, files or []):
        data = path.read_bytes()
        try:
            t0 = time.perf_counter()
            n = floor(data)
            once = time.perf_counter() - t0
        except pdfium.PdfiumError:
            print(f"  {path.name:40} skipped (pypdfium2 cannot open it)")
            continue
        if text_chars(data) < 10 * n:
            print(f"  {path.name:40} skipped (no text layer to speak of: OCR work)")
            continue
        for fn in tools.values():  # warm-up
            fn(path, data)
        reps = max(1, min(50, int(PDF_MIN_SAMPLE_S / max(once, 1e-4)) + 1))
        walls: dict[str, list[float]] = {t: [] for t in tools}
        cpus: dict[str, list[float]] = {t: [] for t in tools}
        for _ in range(rounds):
            for tool, fn in tools.items():
                k = 1 if tool == "markitdown" else reps
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(k):
                    fn(path, data)
                walls[tool].append((time.perf_counter() - t0) / k)
                cpus[tool].append((time.process_time() - c0) / k)
        med = {t: statistics.median(w) for t, w in walls.items()}
        cpu = {t: statistics.median(w) for t, w in cpus.items()}
        for t in tools:
            totals[t] += med[t]
            cpu_totals[t] += cpu[t]
        pages += n
        rec: dict[str, Any] = {
            "file": path.name,
            "pages": n,
            **{f"{t}_s": med[t] for t in tools},
            "ours_vs_floor": med["pypdfium2"] / med["ours"],
            "ours_vs_floor_cpu": cpu["pypdfium2"] / cpu["ours"],
        }
        line = (
            f"  {path.name[:40]:40} {n:4} p  pypdfium2 {n / med['pypdfium2']:6.0f} p/s  ours "
            f"{n / med['ours']:6.0f} p/s = {rec['ours_vs_floor']:.2f} of the floor (CPU {rec['ours_vs_floor_cpu']:.2f})"
        )
        if baseline:
            rec["baseline_vs_floor"] = med["pypdfium2"] / med["baseline"]
            rec["baseline_vs_floor_cpu"] = cpu["pypdfium2"] / cpu["baseline"]
            line += f"  baseline {rec['baseline_vs_floor']:.2f} (CPU {rec['baseline_vs_floor_cpu']:.2f})"
        if markitdown:
            line += f"  markitdown {n / med['markitdown']:5.0f} p/s"
        if min(rec["ours_vs_floor"], rec["ours_vs_floor_cpu"]) < PDF_FLOOR_GOAL:
            line += "  < goal"
        print(line + (f"  [x{reps}]" if reps > 1 else ""), flush=True)
        per_file.append(rec)
    if not pages:
        print("  no text PDFs")
        return {"pages": 0, "files": per_file}
    out: dict[str, Any] = {
        "pages": pages,
        **{f"{t}_pages_per_s": pages / totals[t] for t in tools},
        "ours_vs_floor": totals["pypdfium2"] / totals["ours"],
        "ours_vs_floor_cpu": cpu_totals["pypdfium2"] / cpu_totals["ours"],
        "worst_file": min(per_file, key=lambda r: r["ours_vs_floor"])["file"],
        "worst_vs_floor": min(r["ours_vs_floor"] for r in per_file),
        "worst_vs_floor_cpu": min(r["ours_vs_floor_cpu"] for r in per_file),
        "files_below_goal": [r["file"] for r in per_file if r["ours_vs_floor"] < PDF_FLOOR_GOAL],
        "files": per_file,
    }
    summary = (
        f"  total {len(per_file)} PDFs, {pages} pages: pypdfium2 {out['pypdfium2_pages_per_s']:.0f} p/s, ours "
        f"{out['ours_pages_per_s']:.0f} p/s = {out['ours_vs_floor']:.2f} of the floor (CPU time "
        f"{out['ours_vs_floor_cpu']:.2f})"
    )
    if baseline:
        out["baseline_vs_floor"] = totals["pypdfium2"] / totals["baseline"]
        out["baseline_vs_floor_cpu"] = cpu_totals["pypdfium2"] / cpu_totals["baseline"]
        summary += f"; baseline {out['baseline_vs_floor']:.2f} (CPU {out['baseline_vs_floor_cpu']:.2f})"
    if markitdown:
        out["ours_vs_markitdown"] = totals["markitdown"] / totals["ours"]
        summary += (
            f"; markitdown {out['markitdown_pages_per_s']:.0f} p/s (ours {out['ours_vs_markitdown']:.1f}x)"
        )
    print(summary)
    print(
        f"  per file: worst {out['worst_vs_floor']:.2f} ({out['worst_file']}; worst CPU "
        f"{out['worst_vs_floor_cpu']:.2f}); below {PDF_FLOOR_GOAL} (wall): "
        f"{', '.join(out['files_below_goal']) or 'none'}"
    )
    return out


class KreuzbergPeer:
    """bench/peer_kreuzberg_parse.py in the kreuzberg venv, one long-lived process, one file per call."""

    def __init__(self, venv: Path, like_ours: bool = False) -> None:
        python = venv / "bin" / "python"
        if not python.exists():
            raise SystemExit(
                f"no kreuzberg venv at {venv}: python3 -m venv {venv} && {venv}/bin/pip install "
                "'kreuzberg>=4.10,<4.11' (or pass --kreuzberg-venv)"
            )
        env = {**os.environ, "RAYON_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
        script = Path(__file__).resolve().with_name("peer_kreuzberg_parse.py")
        self.proc = subprocess.Popen(
            [str(python), str(script), *(["--like-ours"] if like_ours else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.version = str(self._reply().get("version"))

    def _reply(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the kreuzberg peer exited")
        return dict(json.loads(line))

    def extract(self, path: Path, file_type: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"path": str(path), "type": file_type}) + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


LIBREOFFICE_TWIN = {"doc": "docx", "ppt": "pptx"}


def libreoffice_reference(path: Path, file_type: str) -> tuple[str, str] | None:
    """doc/ppt: what LibreOffice gives, the converted OOXML twin read by that twin's independent extractor
    (the reference the legacy readers are held to)."""
    import tempfile

    from chalicelib.parsers.libreoffice import convert_with_libreoffice, soffice_path

    twin = LIBREOFFICE_TWIN[file_type]
    if soffice_path() is None:
        return None
    converted = convert_with_libreoffice(path.read_bytes(), file_type, 180)
    with tempfile.TemporaryDirectory() as tmp:
        twin_path = Path(tmp) / f"{path.stem}.{twin}"
        twin_path.write_bytes(converted)
        ref = reference_text(twin_path, twin)
    return (ref[0], f"LibreOffice→{twin}→{ref[1]}") if ref else None


def kreuzberg_side(
    corpus: Path,
    rounds: int,
    types: str,
    venv: Path,
    timeout: int,
    json_out: Path | None,
    like_ours: bool = False,
) -> dict[str, Any]:
    """Ours against kreuzberg (Rust core, in its own venv through bench/peer_kreuzberg_parse.py) on every
    document type both read (images and audio are OCR/ASR work: kreuzberg reads none of them). Per file:
    one warm-up each, then `rounds` interleaved rounds (ours, kreuzberg), the median wall time of each; the
    file is read before the clock on both sides. Per type: the sum of per-file medians and the ratio
    kreuzberg time / our time (≥ 1: we are at least as fast), the median of the per-file ratios, and word
    F1 against the same reference as the main table (doc/ppt: LibreOffice's conversion read by the twin's
    extractor). CPU time beside wall: ours counts this process only (a LibreOffice child's is not in it),
    kreuzberg's runs with RAYON_NUM_THREADS=1. like_ours: kreuzberg gives Markdown and extracts images."""
    from chalicelib.parsers import build_docreader
    from chalicelib.ports import ReadRequest

    with open(corpus / "MANIFEST.tsv", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh, delimiter="\t") if r["type"] not in MEDIA_TYPES]
    rows = [r for r in rows if ".scan." not in r["file"]]
    if types:
        rows = [r for r in rows if r["type"] in types.split(",")]
    reader = build_docreader()
    peer = KreuzbergPeer(venv, like_ours)
    setting = "Markdown + images, like ours" if like_ours else "its defaults"
    print(
        f"\n== ours vs kreuzberg {peer.version}, {setting} (interleaved rounds, per-file median wall; "
        f"load: {_load()})"
    )
    records: list[dict[str, Any]] = []
    try:
        for r in sorted(rows, key=lambda r: (r["type"], r["file"])):
            path, ft = corpus / r["file"], r["type"]
            data = path.read_bytes()

            def ours(data: bytes = data, path: Path = path, ft: str = ft) -> str:
                return reader.read(ReadRequest(data=data, file_name=path.name, file_type=ft)).markdown

            guarded(ours, timeout)
            peer.extract(path, ft)
            walls: dict[str, list[float]] = {"ours": [], "kreuzberg": []}
            cpus: dict[str, list[float]] = {"ours": [], "kreuzberg": []}
            out: dict[str, tuple[str, str]] = {}
            for _ in range(rounds):
                t0, c0 = time.perf_counter(), time.process_time()
                out["ours"] = guarded(ours, timeout)
                walls["ours"].append(time.perf_counter() - t0)
                cpus["ours"].append(time.process_time() - c0)
                reply = peer.extract(path, ft)
                out["kreuzberg"] = (reply["status"], reply["text"])
                walls["kreuzberg"].append(reply["wall_s"])
                cpus["kreuzberg"].append(reply["cpu_s"])
            ref = libreoffice_reference(path, ft) if ft in LIBREOFFICE_TWIN else reference_text(path, ft)
            rec: dict[str, Any] = {"file": r["file"], "type": ft, "reference": ref[1] if ref else None}
            for tool in walls:
                status, text = out[tool]
                ok = status == "ok" and bool(text.strip())
                fr = f1_recall(text, ref[0]) if ok and ref else None
                rec[tool] = {
                    "wall_s": statistics.median(walls[tool]),
                    "cpu_s": statistics.median(cpus[tool]),
                    "status": status if ok or status != "ok" else "empty",
                    "f1": fr[0] if fr else None,
                }
            records.append(rec)
            o, k = rec["ours"], rec["kreuzberg"]
            print(
                f"  {ft:6} {r['file'][:42]:42} ours {o['status']:6} {o['wall_s']:7.3f}s F1={_fmt(o['f1'])}  "
                f"kreuzberg {k['status']:6} {k['wall_s']:7.3f}s F1={_fmt(k['f1'])}  "
                f"ratio {k['wall_s'] / max(o['wall_s'], 1e-6):6.2f}",
                flush=True,
            )
    finally:
        peer.close()
    print(
        f"\n  {'type':6} {'files':>5} {'ours s':>8} {'kz s':>8} {'kz/ours':>8} {'med ratio':>9} {'CPU kz/o':>8} "
        f"{'ours F1':>8} {'kz F1':>8}  (kz/ours ≥ 1: we are at least as fast; goal on every type)"
    )
    summary: dict[str, Any] = {}
    by_type: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        by_type.setdefault(rec["type"], []).append(rec)
    for ft, recs in sorted(by_type.items()):
        both = [x for x in recs if x["ours"]["status"] == "ok" and x["kreuzberg"]["status"] == "ok"]
        if not both:
            print(f"  {ft:6} {len(recs):5d}  (no file both read)")
            continue
        to = sum(x["ours"]["wall_s"] for x in both)
        tk = sum(x["kreuzberg"]["wall_s"] for x in both)
        co = sum(x["ours"]["cpu_s"] for x in both)
        ck = sum(x["kreuzberg"]["cpu_s"] for x in both)
        per_file = [x["kreuzberg"]["wall_s"] / max(x["ours"]["wall_s"], 1e-6) for x in both]
        fo = [x["ours"]["f1"] for x in both if x["ours"]["f1"] is not None]
        fk = [x["kreuzberg"]["f1"] for x in both if x["kreuzberg"]["f1"] is not None]
        summary[ft] = {
            "files": len(recs),
            "files_both_ok": len(both),
            "ours_s": to,
            "kreuzberg_s": tk,
            "ratio": tk / to,
            "median_file_ratio": statistics.median(per_file),
            "cpu_ratio": ck / co if co else None,
            "ours_f1": statistics.mean(fo) if fo else None,
            "kreuzberg_f1": statistics.mean(fk) if fk else None,
        }
        s = summary[ft]
        print(
            f"  {ft:6} {len(both):5d} {to:8.3f} {tk:8.3f} {s['ratio']:7.2f}x {s['median_file_ratio']:8.2f}x "
            f"{_fmt(s['cpu_ratio']):>8} {_fmt(s['ours_f1']):>8} {_fmt(s['kreuzberg_f1']):>8}"
        )
    every = [x for x in records if x["ours"]["status"] == "ok" and x["kreuzberg"]["status"] == "ok"]
    to = sum(x["ours"]["wall_s"] for x in every)
    tk = sum(x["kreuzberg"]["wall_s"] for x in every)
    slowest = min(summary.values(), key=lambda s: s["ratio"]) if summary else None
    print(
        f"  all    {len(every):5d} {to:8.3f} {tk:8.3f} {tk / max(to, 1e-9):7.2f}x"
        + (f"   lowest type ratio {slowest['ratio']:.2f}x" if slowest else "")
    )
    result = {
        "kreuzberg_version": peer.version,
        "kreuzberg_setting": setting,
        "load": _load(),
        "by_type": summary,
        "files": records,
    }
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1, default=str))
    return result


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


if __name__ == "__main__":
    main()
