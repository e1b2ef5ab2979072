"""A PDF's compressed streams are measured before pdfium opens the file (guards.check_pdf_streams).

Regression (found by an audit): a 2 MB PDF whose one page's content stream is Flate-compressed whitespace
inflating to 2 GB passed the page count; pdfium inflated it whole while the reader took the page's text,
the worker's memory went to ~1.8x that, and pdfium aborted the process (SIGABRT) when the allocation
failed: no `failed` status, the Lambda died. The only guard measured image XObjects' streams."""

from __future__ import annotations

import base64
import binascii
import zlib

import pytest
from project_paths import CORPUS

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader
from chalicelib.parsers.base import Limits
from chalicelib.parsers.guards import preflight
from chalicelib.ports import ReadRequest

from . import hostile_files as H

MB = 1024 * 1024
SMALL = {"pdf_max_stream_inflated": MB, "pdf_max_total_inflated": 4 * MB}
BOMB = "it looks like a decompression bomb"


def flate_of_spaces(megabytes: int, inside: bytes = b"") -> bytes:
    """A zlib stream of `megabytes` MB of spaces (each MB `inside` first), made in no time: one MB deflated
    with a full flush (no reference crosses it) is repeated, then an empty final block and the checksum."""
    block = inside + b" " * (MB - len(inside))
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    one = deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(megabytes):
        checksum = zlib.adler32(block, checksum)
    return b"\x78\x9c" + one * megabytes + b"\x03\x00" + checksum.to_bytes(4, "big")


def pdf(
    content: bytes, dictionary: bytes = b"/Filter /FlateDecode", extra_streams: tuple[bytes, ...] = ()
) -> bytes:
    """A one-page PDF whose page content is `content` (stored as given, with `dictionary`), with more
    Flate streams beside it (unreferenced objects: their size still counts)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d %s >>\nstream\n" % (len(content), dictionary) + content + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *(
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(s) + s + b"\nendstream"
            for s in extra_streams
        ),
    ]
    out, offsets = bytearray(b"%PDF-1.7\n"), []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


TEXT = zlib.compress(b"BT /F1 12 Tf 72 720 Td (hello) Tj ET\n")


def _preflight(data: bytes, **limits: int) -> dict[str, object]:
    return preflight(data, "pdf", Limits(**{**SMALL, **limits}))


def test_the_audits_pdf_fails_the_document_instead_of_aborting_the_worker() -> None:
    """In a child process limited to 2 GB (the Lambda has 3): a 1 GB content stream aborted it before."""
    data = pdf(flate_of_spaces(1024, b"BT /F1 12 Tf 72 720 Td (hello bomb) Tj ET\n"))
    assert len(data) < 2 * MB
    answer = H.read_in_a_two_gb_child(data, "b.pdf")
    assert "docreader_parse_failed The PDF has a compressed stream that expands to more than 256 MB" in answer


def test_the_page_count_measures_the_streams_before_pdfium_opens_the_file() -> None:
    """The docreader stage asks for the page count (pdfium opens the file) before it reads."""
    request = ReadRequest(
        data=pdf(flate_of_spaces(2)), file_name="b.pdf", file_type="pdf", options={"limits": SMALL}
    )
    with pytest.raises(PermanentStageError, match=BOMB) as refused:
        build_docreader().page_count(request)
    assert refused.value.code == "docreader_parse_failed"


@pytest.mark.parametrize(
    ("content", "dictionary"),
    [
        # a page's content labelled as an image: pdfium inflates /Contents whatever it says
        (flate_of_spaces(2), b"/Subtype /Image /Width 1 /Height 1 /Filter /FlateDecode"),
        # an `endstream` in the data (a stored block): the stream is measured to where its zlib data ends
        (flate_of_spaces(2, b"\nendstream\nendobj\n"), b"/Filter /FlateDecode"),
        # Flate inside ASCII85 or hex text, the filter's name written with #xx escapes
        (base64.a85encode(flate_of_spaces(2)) + b"~>", b"/Filter [/ASCII85Decode /Fl#61teDecode]"),
        (binascii.hexlify(flate_of_spaces(2)) + b">", b"/Filter [/AHx /FlateDecode]"),
    ],
    ids=["labelled-image", "fake-endstream", "ascii85", "hex"],
)
def test_a_stream_past_the_limit_is_refused_however_it_is_written(content: bytes, dictionary: bytes) -> None:
    with pytest.raises(
        PermanentStageError, match=f"compressed stream that expands to more than 1 MB; {BOMB}"
    ):
        _preflight(pdf(content, dictionary))


def test_streams_under_the_limit_each_are_refused_past_it_together() -> None:
    streams = tuple(zlib.compress(b" " * 900_000) for _ in range(5))
    with pytest.raises(PermanentStageError, match=f"compressed streams expand to more than 4 MB; {BOMB}"):
        _preflight(pdf(TEXT, extra_streams=streams))
    from chalicelib.parsers.guards import check_pdf_streams

    measured = check_pdf_streams(pdf(TEXT, extra_streams=streams[:3]), Limits(**SMALL))
    assert measured == 2_700_000 + len(zlib.decompress(TEXT))


@pytest.mark.skipif(not CORPUS.is_dir(), reason="the shared corpus is not beside the project")
def test_the_corpus_pdfs_are_measured_and_read() -> None:
    from chalicelib.parsers.guards import check_pdf_streams

    for path in sorted(CORPUS.glob("*.pdf")):
        data = path.read_bytes()
        assert 0 <= check_pdf_streams(data, Limits()) < 64 * MB, path.name
        assert preflight(data, "pdf", Limits())["pages"] or path.name.endswith(".truncated.pdf"), path.name
