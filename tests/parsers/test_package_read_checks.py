"""A docx/pptx's members are checked where the builtin reader reads them (guards.PackageParts): the central
directory's claims before any engine runs, each member read inflated at most one byte past its declared size,
members nothing reads never inflated, and every member checked before another engine reads the zip."""

from __future__ import annotations

import sys
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from project_paths import corpus_bytes

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader
from chalicelib.parsers.base import Limits, ParseContext
from chalicelib.parsers.guards import open_package
from chalicelib.parsers.slides import parse_pptx
from chalicelib.ports import ReadRequest

sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
import hostile_files as H

GIB = 1 << 30


def read(data: bytes, file_type: str, engine: str = "") -> str:
    request = ReadRequest(data=data, file_name=f"f.{file_type}", file_type=file_type, engine=engine)
    return build_docreader().read(request).markdown


@pytest.mark.parametrize(("kind", "part"), [("docx", "word/document.xml"), ("pptx", "ppt/presentation.xml")])
def test_a_read_member_whose_central_directory_lies_is_refused_without_inflating_it(
    kind: str, part: str
) -> None:
    data = H.lying(kind)  # the part claims 1,000 bytes and inflates to 1 GiB
    tracemalloc.start()
    try:
        with pytest.raises(PermanentStageError, match="expands beyond the size its header declares"):
            read(data, kind)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024  # the inflate stopped one byte past the claim, not at 1 GiB


def test_a_stored_member_that_lies_is_refused() -> None:
    document = H.docx_document("stored text " * 100)
    lying = H.Member("word/document.xml", document, method=zipfile.ZIP_STORED, declared_size=50)
    with pytest.raises(PermanentStageError, match="expands beyond the size its header declares"):
        read(H.build_zip(H.docx_members(lying)), "docx")


def test_a_read_member_with_a_wrong_crc_or_entities_is_refused() -> None:
    with pytest.raises(PermanentStageError, match="damaged"):
        read(H.bad_crc_docx(), "docx")
    with pytest.raises(PermanentStageError, match="entity"):
        read(H.laughs_docx(padding=100_000), "docx")


def test_the_central_directory_is_checked_before_any_member_is_read() -> None:
    for data, words in [
        (H.honest_bomb("docx"), "zip bomb"),  # an unread media member at an implausible declared ratio
        (H.wide_bomb(), "zip bomb"),  # unread members, declared together over the total
        (H.many_members(), "too many parts"),
        (H.encrypted_docx(), "encrypted"),
    ]:
        with pytest.raises(PermanentStageError, match=words):
            open_package(data, "docx", Limits())


def test_members_the_reader_does_not_read_are_not_inflated() -> None:
    data = corpus_bytes("commander-readme.pptx")
    package = open_package(data, "pptx", Limits())
    assert package is not None
    request = ReadRequest(data=data, file_name="c.pptx", file_type="pptx")
    from_package = parse_pptx(request, ParseContext(package_parts=package))
    assert from_package.markdown == parse_pptx(request, ParseContext()).markdown
    unread = set(package) - set(package.read)
    assert any("slideLayouts/" in n for n in unread) and any("theme/" in n for n in unread)
    assert not any("slideLayouts/" in n or "theme/" in n for n in package.read)


def test_an_unread_member_that_lies_is_refused_before_another_engine_reads_the_zip() -> None:
    theme = H.forged("word/theme/theme1.xml", GIB)  # nothing in the builtin reader reads a theme
    data = H.build_zip(H.docx_members(extra=[theme]))
    assert read(data, "docx", engine="builtin").strip() == "hello"  # never inflated: it cannot cost anything
    package = open_package(data, "docx", Limits())
    assert package is not None
    with pytest.raises(PermanentStageError, match="expands beyond the size its header declares"):
        package.check_rest()
    pytest.importorskip("markitdown")
    with pytest.raises(PermanentStageError, match="expands beyond the size its header declares"):
        read(data, "docx", engine="markitdown")


@pytest.mark.parametrize(
    ("pieces", "declares"),
    [
        ([b"<a><!-- x --><!ENT", b"ITY lol 'x'>"], True),  # split across pieces
        ([b"<", b"!eNtItY"], True),  # any case, "<" in the piece before
        ([b"<a>Hello!entity</a>", b"!"], False),  # "!entity" in text, no "<" before it
        ([b"<a>!!!</a><![CDATA[x]]>"], False),
    ],
)
def test_the_entity_scan_finds_a_declaration_in_any_case_across_pieces(
    pieces: list[bytes], declares: bool
) -> None:
    from chalicelib.parsers.guards import EntityScan

    scan = EntityScan()
    if declares:
        with pytest.raises(PermanentStageError, match="entity"):
            for piece in pieces:
                scan.feed(piece, "Word")
    else:
        for piece in pieces:
            scan.feed(piece, "Word")
