"""Mutation fuzzing of what reads uploaded files: the docreader, the FAQ import's row reader and OCR.

Corpus files are damaged the way real files get damaged and hostile files are built: XML parts of
docx/pptx/xlsx/epub packages with elements dropped, duplicated or reordered, attributes set to values the
schema does not allow, parts truncated or missing; other files with bytes flipped, inserted, cut and
truncated. Every read must end in a result or in the reader's own error (a `StageError` with a reason, a
`SourceError`): anything else escapes as a crash, and a stage retries it to its dead-letter queue.

Bounded by time, not count: `WEKNORA_FUZZ_SECONDS` per test (default 45); `WEKNORA_FUZZ_SEED` draws other
mutations (default 0, the same on every run). Run with `make test-fuzz`. This suite found the 7 GB docx
table span, the PDF page that failed its file, the zip names zipfile cannot decode and the FAQ rows that
escaped (2026-12-05)."""

from __future__ import annotations

import copy
import io
import os
import random
import tempfile
import time
import traceback
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from lxml import etree
from project_paths import CORPUS

from chalicelib.domain.errors import StageError

SECONDS = float(os.environ.get("WEKNORA_FUZZ_SECONDS", "45"))
pytestmark = [
    pytest.mark.fuzz,
    pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not beside the project"),
    # the suite's 300 s would stop a longer campaign as a failure: the budget, one slow read and the setup
    pytest.mark.timeout(max(300, SECONDS + 180)),
]
SEED = int(os.environ.get("WEKNORA_FUZZ_SEED", "0"))
ODD_VALUES = ("", "-1", "0", "x", "NaN", "1e309", "999999999999", "30000000", "rId999", "../../x", "\u202e")
ODD_BYTES = (b"\x00", b"\xff\xfe", b"<", b"|", b'"', b"\r", b"{", b"[", b"```", b"<table>", b"obj", b"endobj")


def _mutate_xml(data: bytes, rng: random.Random) -> bytes:
    try:
        root = etree.fromstring(data)
    except etree.XMLSyntaxError:
        return data
    for _ in range(rng.randint(1, 4)):
        elements = list(root.iter())[1:]
        if not elements:
            break
        element = rng.choice(elements)
        parent = element.getparent()
        operation = rng.randrange(5)
        if operation == 0 and parent is not None:
            parent.remove(element)
        elif operation == 1 and element.attrib:
            element.attrib[rng.choice(list(element.attrib))] = rng.choice(ODD_VALUES)
        elif operation == 2 and parent is not None:
            parent.append(copy.deepcopy(element))
        elif operation == 3 and parent is not None:
            parent.insert(0, element)
        else:
            element.text = rng.choice(("", "a" * 10_000, "&lt;x&gt;", "\U0001d518" * 50))
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)


def _mutate_package(data: bytes, rng: random.Random) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    names = source.namelist()
    xml_parts = [n for n in names if n.endswith((".xml", ".rels", ".opf", ".ncx", ".xhtml", ".html"))]
    chosen = set(rng.sample(xml_parts, min(len(xml_parts), rng.randint(1, 3))))
    dropped = rng.choice(names) if rng.random() < 0.15 else None
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for name in names:
            if name == dropped:
                continue
            part = source.read(name)
            if name in chosen:
                part = part[: rng.randrange(len(part) + 1)] if rng.random() < 0.15 else _mutate_xml(part, rng)
            target.writestr(name, part)
    return out.getvalue()


def _mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        if not out:
            break
        at = rng.randrange(len(out))
        operation = rng.randrange(4)
        if operation == 0:
            out[at] = rng.randrange(256)
        elif operation == 1:
            out[at:at] = rng.randbytes(rng.randint(1, 8))
        elif operation == 2:
            del out[at : at + rng.randint(1, 64)]
        else:
            out[at:at] = rng.choice(ODD_BYTES)
    return bytes(out[: rng.randrange(len(out) + 1)] if rng.random() < 0.1 else out)


def _mutate(data: bytes, rng: random.Random) -> bytes:
    if data[:2] == b"PK" and rng.random() < 0.9:
        return _mutate_package(data, rng)
    return _mutate_bytes(data, rng)


#: what a bug in our own code raises; a parser library's own errors have their own classes
BUG_CLASSES = (
    AttributeError,
    IndexError,
    KeyError,
    TypeError,
    UnboundLocalError,
    ValueError,
    ZeroDivisionError,
)
CHALICELIB = str(Path(__file__).resolve().parents[2] / "chalicelib")


def _our_bug(cause: BaseException | None) -> bool:
    """A refusal the reader's catch-all made of an error raised in chalicelib itself: the reason the user
    reads is a bug's message (`int()` of an attribute, a missing key), and the file may well be readable."""
    if not isinstance(cause, BUG_CLASSES):
        return False
    frames = traceback.extract_tb(cause.__traceback__)
    return bool(frames) and frames[-1].filename.startswith(CHALICELIB)


def _finding(
    read: Callable[[bytes, str], object], data: bytes, name: str, expected: tuple[type[BaseException], ...]
) -> BaseException | None:
    """None when the read gave a result or refused the file for a reason of its own; else the error: one
    that escaped, or a bug of ours that the reader's catch-all turned into a refusal."""
    try:
        read(data, name)
    except expected as refused:
        return refused if _our_bug(refused.__cause__) else None
    except Exception as escaped:
        return escaped
    return None


def _fuzz(
    extensions: set[str],
    read: Callable[[bytes, str], object],
    expected: tuple[type[BaseException], ...],
    mutate: Callable[[bytes, random.Random], bytes] = _mutate,
) -> int:
    """Reads mutated corpus files for SECONDS; fails on the first finding."""
    seeds = [
        p
        for p in sorted(CORPUS.iterdir())
        if p.suffix.lstrip(".").lower() in extensions and p.stat().st_size < 2**21
    ]
    assert seeds, extensions
    rng = random.Random(SEED)
    deadline, reads = time.monotonic() + SECONDS, 0
    while time.monotonic() < deadline:
        path = rng.choice(seeds)
        damaged = mutate(path.read_bytes(), rng)
        reads += 1
        finding = _finding(read, damaged, path.name, expected)
        if finding is not None:  # reported with the file that reproduces it
            kept = Path(tempfile.gettempdir()) / f"weknora-fuzz-{SEED}-{reads}-{path.name}"
            kept.write_bytes(damaged)
            pytest.fail(
                f"{type(finding).__name__} reading a damaged {path.name} (read {reads}, "
                f"WEKNORA_FUZZ_SEED={SEED}; the file: {kept}):\n{''.join(traceback.format_exception(finding))}"
            )
    return reads


def test_damaged_documents_end_in_a_result_or_a_reason() -> None:
    from chalicelib.parsers import build_docreader
    from chalicelib.ports import ReadRequest

    reader = build_docreader()  # no OCR or speech: images and audio are not among the seeds

    def read(data: bytes, name: str) -> object:
        kind = name.rsplit(".", 1)[-1].lower()
        return reader.read(ReadRequest(data=data, file_name=name, file_type=kind))

    types = {
        "docx",
        "pptx",
        "xlsx",
        "xls",
        "epub",
        "pdf",
        "html",
        "htm",
        "md",
        "csv",
        "tsv",
        "json",
        "txt",
        "mhtml",
    }
    reads = _fuzz(types, read, (StageError,))
    print(f"{reads} damaged documents read")


def test_damaged_faq_imports_end_in_rows_or_a_reason() -> None:
    from chalicelib.faq.rows import SourceError, read_rows

    reads = _fuzz({"csv", "json", "xlsx"}, lambda data, name: read_rows(data, name), (SourceError,))
    print(f"{reads} damaged FAQ files read")


def _shrink(data: bytes, rng: random.Random) -> bytes:
    """A corpus image made small (a tenth to a third of its side) before it is damaged: tesseract's time
    grows with the pixels, and what is fuzzed is the decoding and preparing, not the reading of a page."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        scale = rng.uniform(0.1, 0.33)
        small = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))))
        buf = io.BytesIO()
        small.save(buf, format=img.format)
    return _mutate_bytes(buf.getvalue(), rng)


@pytest.mark.requires_tesseract
def test_damaged_images_the_docreader_accepts_end_in_text_or_a_reason() -> None:
    """What the multimodal stage does with an image: OCR (orientation, languages, the readings) of the
    bytes the docreader accepted. A damaged image must be text or a refusal, never an escape."""
    from chalicelib.parsers import build_docreader
    from chalicelib.parsers.ocr import TesseractOcr
    from chalicelib.ports import ReadRequest

    reader, ocr = build_docreader(), TesseractOcr()

    def read(data: bytes, name: str) -> object:
        kind = name.rsplit(".", 1)[-1].lower()
        reader.read(ReadRequest(data=data, file_name=name, file_type=kind))  # refused here: not OCR'd
        return ocr.read(data)

    reads = _fuzz({"png", "jpg", "jpeg", "gif"}, read, (StageError,), _shrink)
    print(f"{reads} damaged images read")
