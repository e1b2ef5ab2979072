"""Two ways round the guard of LibreOffice's conversion, found by a review (tests/security/
test_libreoffice_local_files.py holds the first ones): a PowerPoint 97 picture that is a link to a path
(escher `pibName`), which LibreOffice loads from the worker's disk as it opens the deck, and an RTF field
instruction hidden from the scan behind `\\bin0` / `\\bin-1` (LibreOffice swallows a byte there, the scan
none). Each builds its hostile file at test time."""

from __future__ import annotations

import io
import os
import subprocess
import tempfile
from pathlib import Path

import pytest
from PIL import Image, UnidentifiedImageError

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader, libreoffice
from chalicelib.parsers.libreoffice import convert_with_libreoffice, office_input
from chalicelib.ports import ReadRequest

SECRET = (13, 211, 37)


def _secret(blob: bytes) -> bool:
    try:
        with Image.open(io.BytesIO(blob)) as im:
            return any(c == SECRET for _, c in (im.convert("RGB").getcolors(1 << 16) or []))
    except (UnidentifiedImageError, OSError):
        return False


@pytest.mark.requires_libreoffice
def test_a_ppt_linked_picture_is_not_read_from_the_workers_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pic = tmp_path / "pic" / "linked.png"
    pic.parent.mkdir()
    Image.new("RGB", (48, 48), (1, 2, 3)).save(pic)
    maker = tmp_path / "a" / "b"
    maker.mkdir(parents=True)
    (maker / "deck.fodp").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<office:document xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" xmlns:xlink="http://www.w3.org/1999/xlink" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" office:version="1.2" '
        'office:mimetype="application/vnd.oasis.opendocument.presentation">'
        '<office:master-styles><style:master-page style:name="Default"/></office:master-styles>'
        '<office:body><office:presentation><draw:page draw:name="p1" draw:master-page-name="Default">'
        '<draw:frame svg:x="2cm" svg:y="5cm" svg:width="4cm" svg:height="4cm">'
        f'<draw:image xlink:href="{pic.as_uri()}" xlink:type="simple" xlink:show="embed"/></draw:frame>'
        "</draw:page></office:presentation></office:body></office:document>"
    )
    subprocess.run(
        [
            libreoffice.soffice_path() or "soffice",
            f"-env:UserInstallation={(tmp_path / 'profile').as_uri()}",
            "--headless",
            "--convert-to",
            "ppt:MS PowerPoint 97",
            "--outdir",
            str(maker),
            str(maker / "deck.fodp"),
        ],
        capture_output=True,
        timeout=180,
        env={**os.environ, "HOME": str(tmp_path)},
        check=True,
    )
    data = (maker / "deck.ppt").read_bytes()
    assert b"\x89PNG" not in data  # the picture is a link (pibName "../../pic/linked.png"), not embedded
    # no "Current User" stream: the native reader gives up, LibreOffice (which does not need it) converts
    data = data.replace("Current User".encode("utf-16-le"), "Current Usex".encode("utf-16-le"))
    # LibreOffice's temporary directory two levels below tmp_path: the relative link reaches tmp_path/pic
    (tmp_path / "lo").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "lo"))
    Image.new("RGB", (48, 48), SECRET).save(pic)  # the worker's file, written after the deck was made
    try:
        result = build_docreader().read(
            ReadRequest(data=data, file_name="deck.ppt", file_type="ppt", options={})
        )
    except PermanentStageError:
        return
    assert result.metadata.get("converted_by") == "libreoffice"
    assert not [image.ref for image in result.images if _secret(image.data)]


@pytest.mark.requires_libreoffice
@pytest.mark.parametrize("bin_word", [b"\\bin0 ", b"\\bin-1 ", b"\\'\\bin1 "])
def test_no_field_instruction_hidden_behind_binary_data_reaches_libreoffice(
    tmp_path: Path, bin_word: bytes
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("LOCAL-FILE-SECRET-7Q\n")
    data = (
        b"{\\rtf1\\ansi A {\\field{"
        + bin_word
        + b'\\\\fldinst INCLUDETEXT "'
        + secret.as_posix().encode()
        + b'" }{\\fldrslt kept}} B\\par}'
    )
    with pytest.raises(PermanentStageError):
        office_input(data, "doc")
    with pytest.raises(PermanentStageError):
        convert_with_libreoffice(data, "doc", 120)
