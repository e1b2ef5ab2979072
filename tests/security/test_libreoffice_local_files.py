"""A legacy document converted by LibreOffice (libreoffice.convert_with_libreoffice) gets nothing of the worker's
disk into the converted file, the Markdown or the extracted images.

Regression (found by an audit): an RTF named .doc (which the reader converts with LibreOffice) holding an
INCLUDEPICTURE field naming a local file had LibreOffice 7.4 read that file as it opened the document and
embed it in the converted docx, whose pictures the reader then extracted: any picture the worker can read (a
PNG, a JPEG, an SVG rendered with its text) came back to the tenant. No LibreOffice setting stops it (the
link-update modes, BlockUntrustedRefererLinks: tried); an RTF's field instructions are now taken out before
LibreOffice sees it (each field keeps the result Word saved for it). And a flat OpenDocument presentation
named .ppt, which LibreOffice opens by its content, had its linked local pictures embedded the same way:
LibreOffice is now given only OLE (97-2003) files and, for .doc, RTF.

Tried and not leaking (kept as regression tests where they are cheap): a Word 97 .doc's linked picture
(file://) and linked sections (a local text file, /etc/passwd) stay links, never read; an RTF's INCLUDETEXT,
DDEAUTO and LINK fields and a shape's pibName read nothing; http:// links reach no server (the dead proxy)."""

from __future__ import annotations

import io
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader, libreoffice
from chalicelib.parsers.libreoffice import convert_with_libreoffice, rtf_without_field_instructions
from chalicelib.parsers.magic import OLE_MAGIC
from chalicelib.ports import ReadRequest

#: the local picture's colour: found in no picture LibreOffice makes by itself
SECRET_COLOUR = (13, 211, 37)
SECRET_TEXT = "LOCAL-FILE-SECRET-7Q"


@pytest.fixture
def local_files(tmp_path: Path) -> dict[str, Path]:
    """Files on the worker's disk a hostile document names: a picture, an SVG with text, a text file."""
    from PIL import Image

    root = tmp_path / "worker-disk"
    root.mkdir()
    png = root / "secret.png"
    Image.new("RGB", (48, 48), SECRET_COLOUR).save(png)
    svg = root / "secret.svg"
    svg.write_text(
        '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40">'
        f'<rect width="200" height="40" fill="rgb{SECRET_COLOUR}"/><text x="4" y="30">{SECRET_TEXT}</text></svg>'
    )
    text = root / "secret.txt"
    text.write_text(f"{SECRET_TEXT}\n")
    return {"png": png, "svg": svg, "txt": text}


def _has_secret_picture(blob: bytes) -> bool:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(blob)) as picture:
            colours = picture.convert("RGB").getcolors(1 << 16) or []
    except (UnidentifiedImageError, OSError, ValueError):  # a WMF/EMF or other vector picture
        return False
    return any(colour == SECRET_COLOUR for _, colour in colours)


def _leaks(package: bytes) -> list[str]:
    """The parts of a converted OOXML package that hold the local files' content."""
    found = []
    with zipfile.ZipFile(io.BytesIO(package)) as zf:
        for name in zf.namelist():
            blob = zf.read(name)
            if SECRET_TEXT.encode() in blob or _has_secret_picture(blob):
                found.append(name)
    return found


def _read(data: bytes, file_name: str, file_type: str) -> tuple[str, list[bytes]]:
    try:
        result = build_docreader().read(
            ReadRequest(data=data, file_name=file_name, file_type=file_type, options={})
        )
    except PermanentStageError:  # refused, or nothing left to read: nothing of the disk either
        return "", []
    return result.markdown, [image.data for image in result.images]


def _rtf_including(files: dict[str, Path]) -> bytes:
    """An RTF (the reader's .doc that LibreOffice always converts) whose fields name local files, plain and
    hidden: the field name split across groups and written with hex escapes, and uppercase control words."""
    png, svg, txt = (files[k].as_posix() for k in ("png", "svg", "txt"))
    return (
        "{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Arial;}}\n"
        "\\pard Quarterly figures follow.\\par\n"
        f'\\pard {{\\field{{\\*\\fldinst {{ INCLUDEPICTURE "file://{png}" \\\\d }}}}{{\\fldrslt {{one}}}}}}\\par\n'
        f'\\pard {{\\field{{\\*\\fldinst {{ INCLUDE}}{{PICTURE "{svg}" }}}}{{\\fldrslt {{two}}}}}}\\par\n'
        f'\\pard {{\\field{{\\*\\fldinst {{ \\\'49NCLUDEPICTURE "{png}" }}}}{{\\fldrslt {{three}}}}}}\\par\n'
        f'\\pard {{\\field{{\\*\\fldinst {{ INCLUDETEXT "{txt}" }}}}{{\\fldrslt {{four}}}}}}\\par\n'
        "\\pard End of the report.\\par\n}\n"
    ).encode()


@pytest.mark.requires_libreoffice
def test_an_rtf_field_does_not_bring_a_local_picture_into_the_document(local_files: dict[str, Path]) -> None:
    data = _rtf_including(local_files)

    assert _leaks(convert_with_libreoffice(data, "doc", 120)) == []
    markdown, images = _read(data, "report.doc", "doc")
    assert "Quarterly figures follow." in markdown and SECRET_TEXT not in markdown
    assert not [blob for blob in images if _has_secret_picture(blob)]


@pytest.mark.requires_libreoffice
def test_a_picture_pasted_from_the_web_keeps_the_picture_word_saved() -> None:
    """Word saves a picture pasted from a web page as an INCLUDEPICTURE field with the picture as its result:
    the result stays (only the instruction goes)."""
    from PIL import Image

    saved = io.BytesIO()
    Image.new("RGB", (20, 20), (250, 0, 250)).save(saved, "PNG")
    picture = b"{\\pict\\pngblip\\picw20\\pich20 " + saved.getvalue().hex().encode() + b"}"
    data = (
        b"{\\rtf1\\ansi Pasted from the web:\\par {\\field\\flddirty{\\*\\fldinst { INCLUDEPICTURE "
        b'"http://example.com/chart.png" \\\\* MERGEFORMATINET }}{\\fldrslt {'
        + picture
        + b"}}}\\par The end.\\par}"
    )
    markdown, images = _read(data, "pasted.doc", "doc")
    assert "Pasted from the web:" in markdown and "The end." in markdown
    assert len(images) == 1


def _flat_presentation(files: dict[str, Path]) -> bytes:
    """A flat OpenDocument presentation (XML) whose pictures are links to local files."""
    frames = "".join(
        f'<draw:frame svg:x="{2 + 5 * n}cm" svg:y="5cm" svg:width="4cm" svg:height="4cm">'
        f'<draw:image xlink:href="{files[kind].as_uri()}" xlink:type="simple" xlink:show="embed"/></draw:frame>'
        for n, kind in enumerate(("png", "svg"))
    )
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" office:version="1.2" '
        'office:mimetype="application/vnd.oasis.opendocument.presentation">'
        '<office:master-styles><style:master-page style:name="Default"/></office:master-styles>'
        '<office:body><office:presentation><draw:page draw:name="p1" draw:master-page-name="Default">'
        '<draw:frame svg:x="1cm" svg:y="1cm" svg:width="8cm" svg:height="2cm"><draw:text-box>'
        f"<text:p>Slide text</text:p></draw:text-box></draw:frame>{frames}"
        "</draw:page></office:presentation></office:body></office:document>"
    ).encode()


@pytest.mark.requires_libreoffice
def test_a_flat_opendocument_named_ppt_is_not_opened_by_libreoffice(local_files: dict[str, Path]) -> None:
    data = _flat_presentation(local_files)
    try:
        converted = convert_with_libreoffice(data, "ppt", 120)
    except PermanentStageError as refused:
        assert "not a Word, PowerPoint or Excel 97-2003 file" in str(refused)
    else:
        assert _leaks(converted) == []
    _, images = _read(data, "deck.ppt", "ppt")
    assert not [blob for blob in images if _has_secret_picture(blob)]


def word97_from(source: Path, work: Path) -> bytes:
    """A Word 97 file made by LibreOffice (its own profile) from `source`, its links kept as links."""
    subprocess.run(
        [
            libreoffice.soffice_path() or "soffice",
            f"-env:UserInstallation={(work / 'maker').as_uri()}",
            "--headless",
            "--convert-to",
            "doc:MS Word 97",
            "--outdir",
            str(work),
            str(source),
        ],
        capture_output=True,
        timeout=180,
        env={**os.environ, "HOME": str(work)},
        check=True,
    )
    return (work / f"{source.stem}.doc").read_bytes()


@pytest.mark.requires_libreoffice
def test_a_word97_files_linked_sections_and_pictures_stay_links(
    local_files: dict[str, Path], tmp_path: Path
) -> None:
    """Passes before the fix too: a Word 97 file's links are not followed (Writer's link update "never")."""
    source = tmp_path / "linked.fodt"
    source.write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" office:version="1.2" '
        'office:mimetype="application/vnd.oasis.opendocument.text"><office:body><office:text>'
        "<text:p>Linked content follows.</text:p>"
        '<text:section text:name="S1"><text:section-source xlink:href="'
        f'{local_files["txt"].as_uri()}" text:filter-name="Text"/><text:p>placeholder</text:p></text:section>'
        '<text:section text:name="S2"><text:section-source xlink:href="file:///etc/passwd" '
        'text:filter-name="Text"/><text:p>placeholder two</text:p></text:section>'
        '<text:p><draw:frame svg:width="2cm" svg:height="2cm" text:anchor-type="as-char"><draw:image xlink:href="'
        f'{local_files["png"].as_uri()}" xlink:type="simple" xlink:show="embed"/></draw:frame></text:p>'
        "</office:text></office:body></office:document>"
    )
    data = word97_from(source, tmp_path)
    local_files["txt"].write_text(f"{SECRET_TEXT} written after the file was made\n")  # only a read now shows

    converted = convert_with_libreoffice(data, "doc", 120)
    assert _leaks(converted) == []
    with zipfile.ZipFile(io.BytesIO(converted)) as zf:
        assert not [name for name in zf.namelist() if b"root:x:0:" in zf.read(name)]


# ---------------------------------------------------------------- the RTF scan (no LibreOffice)


def test_every_field_instruction_goes_and_the_results_stay() -> None:
    data = (
        b"{\\rtf1{\\field{\\*\\fldinst {INCLUDE}{PICTURE x}}{\\fldrslt kept one}}"
        b"{\\field\\FLDINST INCLUDETEXT y{\\fldrslt in the instruction's group}}"
        b"{\\field{\\*\\fldinst HYPERLINK \\{x\\} z}{\\fldrslt kept three}}}"
    )
    assert rtf_without_field_instructions(data) == (
        b"{\\rtf1{\\field{\\fldrslt kept one}}{\\field{\\fldrslt kept three}}}"
    )


def test_an_rtf_without_fields_is_given_unchanged() -> None:
    data = b"{\\rtf1\\ansi A plain letter.\\par {\\b bold}\\par}"
    assert rtf_without_field_instructions(data) is data


def test_binary_data_is_skipped_and_a_field_hidden_in_it_refuses_the_file() -> None:
    # \bin's bytes are data: a brace there closes nothing
    data = b"{\\rtf1{\\pict\\bin3 }{}}{\\field{\\*\\fldinst INCLUDEPICTURE a}{\\fldrslt r}}}"
    assert rtf_without_field_instructions(data) == b"{\\rtf1{\\pict\\bin3 }{}}{\\field{\\fldrslt r}}}"
    # a \fldinst this scan reads as \bin data (LibreOffice may read it as markup) is not given to LibreOffice
    hidden = b"{\\rtf1{\\field{\\*\\fldinst x}}{\\pict\\bin20 {\\*\\fldinst INCLUDEPI}}}"
    with pytest.raises(PermanentStageError):
        rtf_without_field_instructions(hidden)


def test_an_unclosed_field_instruction_goes_to_the_end() -> None:
    data = b'{\\rtf1 text {\\field{\\*\\fldinst INCLUDEPICTURE "/etc/x.png"'
    assert rtf_without_field_instructions(data) == b"{\\rtf1 text {\\field"


def test_only_ole_files_and_rtf_reach_libreoffice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(libreoffice, "soffice_path", lambda: "/nonexistent/soffice")
    for data, kind in (
        (b"<html><body><img src='file:///etc/x.png'></body></html>", "doc"),
        (b'<?xml version="1.0"?><office:document/>', "ppt"),
        (b"{\\rtf1 an RTF named .ppt}", "ppt"),
        (b"PK\x03\x04 an OpenDocument package", "xls"),
    ):
        with pytest.raises(PermanentStageError, match="not a Word, PowerPoint or Excel 97-2003 file"):
            convert_with_libreoffice(data, kind, 5)
    assert libreoffice.office_input(OLE_MAGIC + b"rest", "ppt") == OLE_MAGIC + b"rest"


def test_text_about_fldinst_is_refused_as_the_scan_cannot_tell_it_from_markup() -> None:
    """An escaped backslash (\\\\) then "fldinst" is text to the scan, but LibreOffice can read markup the
    scan takes for data there (`\\bin0 \\\\fldinst` is a field instruction to it: a review's bypass), so the
    word anywhere after the fields are removed refuses the file; a document whose text names RTF's field
    instruction is rare, one that hides it is hostile."""
    field_only = rb"{\rtf1 {\field{\*\fldinst PAGE}{\fldrslt 1}} Page.\par}"
    assert rtf_without_field_instructions(field_only) == rb"{\rtf1 {\field{\fldrslt 1}} Page.\par}"
    for text in (
        rb"{\rtf1 About RTF: write \\fldinst in a field.\par}",
        rb"{\rtf1 {\field{\*\fldinst PAGE}{\fldrslt 1}} Write \\fldinst.\par}",
    ):
        with pytest.raises(PermanentStageError):
            rtf_without_field_instructions(text)
