"""More of LibreOffice's import paths probed for a local file's content reaching the parse output (the first
ones: test_libreoffice_local_files.py, test_libreoffice_bypasses.py, test_libreoffice_links.py).

Regression (found by a probe): an encrypted .docx is an OLE compound file (its EncryptionInfo and
EncryptedPackage streams), so the guard let it through as a 97-2003 file; LibreOffice decrypts it with Excel's
built-in password ("VelvetSweatshop", which anyone can encrypt with) whatever the file's name and opens the
OOXML inside with all of its importers (7.4: a .doc holding one was converted, its text read). Such a file is
now refused before LibreOffice sees it. The OOXML constructs tried through it (a linked picture, INCLUDETEXT
and INCLUDEPICTURE fields, a subdocument, an altChunk, a linked OLE object) read nothing in 7.4; the door is
closed all the same, as the guard lets LibreOffice open 97-2003 files and RTF only.

Tried and not leaking in 7.4 (pinned here where a test is cheap): an RTF's OLE link objects (\\objautlink and
\\objlink, whose OLE1 data names a local file) keep their saved result. Tried and not pinned (each needs a file
made by LibreOffice first, over 5 s): a Word 97 .doc's INCLUDETEXT, INCLUDEPICTURE (no \\d), DDEAUTO and LINK
fields naming a local file or /etc/passwd, and a floating picture linked by its pibName; an OLE workbook
(external reference, WEBSERVICE, DDE formulas) named .doc or .ppt, which LibreOffice cannot convert."""

from __future__ import annotations

import hashlib
import io
import os
import struct
import sys
import zipfile
from pathlib import Path

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers import build_docreader, libreoffice
from chalicelib.parsers.libreoffice import convert_with_libreoffice, office_input
from chalicelib.parsers.magic import OLE_MAGIC
from chalicelib.ports import ReadRequest

SECRET_TEXT = "LOCAL-FILE-SECRET-9K"
HIDDEN_TEXT = "TEXT-OF-THE-HIDDEN-DOCX"

# ---------------------------------------------------------------- a compound file and its encryption

_SECTOR = 512
_FREE, _END, _FAT_SECTOR = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD


def compound_file(streams: dict[str, bytes]) -> bytes:
    """A compound file (version 3) whose root holds `streams`, each at least 4,096 bytes long (padded with
    zeros) so that none is in the mini stream: the least a reader accepts."""
    blobs = {name: blob.ljust(4096, b"\0") for name, blob in streams.items()}
    fat: list[int] = []
    starts: list[int] = []
    body = b""
    for blob in blobs.values():
        count = -(-len(blob) // _SECTOR)
        starts.append(len(fat))
        fat.extend([*range(len(fat) + 1, len(fat) + count), _END])
        body += blob.ljust(count * _SECTOR, b"\0")
    directory_start = len(fat)
    directory_sectors = -(-(len(blobs) + 1) * 128 // _SECTOR)
    fat.extend([*range(directory_start + 1, directory_start + directory_sectors), _END])
    fat_sector = len(fat)
    fat.append(_FAT_SECTOR)
    fat.extend([_FREE] * (_SECTOR // 4 - len(fat)))

    def entry(name: str, kind: int, right: int, child: int, start: int, size: int) -> bytes:
        encoded = name.encode("utf-16-le") + b"\0\0"
        return (
            encoded.ljust(64, b"\0")
            + struct.pack("<HBBIII", len(encoded), kind, 1, _FREE, right, child)
            + b"\0" * 36
            + struct.pack("<IQ", start, size)
        )

    names = list(blobs)
    directory = entry("Root Entry", 5, _FREE, 1, _END, 0) + b"".join(
        entry(name, 2, n + 2 if n + 1 < len(names) else _FREE, _FREE, starts[n], len(blobs[name]))
        for n, name in enumerate(names)
    )
    header = (
        OLE_MAGIC
        + b"\0" * 16
        + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6)
        + b"\0" * 6
        + struct.pack("<9I", 0, 1, directory_start, 0, 4096, _END, 0, _END, 0)
        + struct.pack("<I", fat_sector)
        + struct.pack("<I", _FREE) * 108
    )
    return header + body + directory.ljust(directory_sectors * _SECTOR, b"\0") + struct.pack("<128I", *fat)


def encrypted_package(package: bytes, password: str = "VelvetSweatshop") -> dict[str, bytes]:
    """An OOXML package's EncryptionInfo and EncryptedPackage streams, ECMA-376 standard encryption (AES-128,
    its key from the password by MS-OFFCRYPTO's SHA-1 derivation)."""
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    salt = os.urandom(16)
    digest = hashlib.sha1(salt + password.encode("utf-16-le")).digest()
    for n in range(50000):
        digest = hashlib.sha1(struct.pack("<I", n) + digest).digest()
    digest = hashlib.sha1(digest + struct.pack("<I", 0)).digest()
    key = hashlib.sha1(bytes(b ^ 0x36 for b in digest.ljust(64, b"\0"))).digest()[:16]

    def encrypt(data: bytes) -> bytes:
        encryptor = Cipher(algorithms.AES(key), modes.ECB()).encryptor()
        return encryptor.update(data) + encryptor.finalize()

    verifier = os.urandom(16)
    provider = "Microsoft Enhanced RSA and AES Cryptographic Provider".encode("utf-16-le") + b"\0\0"
    header = struct.pack("<8I", 0x24, 0, 0x660E, 0x8004, 128, 0x18, 0, 0) + provider
    info = (
        struct.pack("<HHII", 4, 2, 0x24, len(header))
        + header
        + struct.pack("<I", 16)
        + salt
        + encrypt(verifier)
        + struct.pack("<I", 20)
        + encrypt(hashlib.sha1(verifier).digest().ljust(32, b"\0"))
    )
    padded = package.ljust(4096, b"\0")
    padded += b"\0" * (-len(padded) % 16)
    return {"EncryptionInfo": info, "EncryptedPackage": struct.pack("<Q", len(package)) + encrypt(padded)}


def _docx_linking(secret: Path) -> bytes:
    """A .docx with text of its own and a picture that is a link to a local file."""
    word = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    rels = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    document = (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{word}" xmlns:r="{rels}" '
        'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
        'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
        'xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture"><w:body>'
        f"<w:p><w:r><w:t>{HIDDEN_TEXT}</w:t></w:r></w:p><w:p><w:r><w:drawing><wp:inline>"
        '<wp:extent cx="457200" cy="457200"/><wp:docPr id="1" name="P1"/><a:graphic><a:graphicData '
        'uri="http://schemas.openxmlformats.org/drawingml/2006/picture"><pic:pic><pic:nvPicPr><pic:cNvPr id="1" '
        'name="P1"/><pic:cNvPicPr/></pic:nvPicPr><pic:blipFill><a:blip r:link="rIdL"/></pic:blipFill><pic:spPr>'
        '<a:prstGeom prst="rect"/></pic:spPr></pic:pic></a:graphicData></a:graphic></wp:inline></w:drawing>'
        "</w:r></w:p></w:body></w:document>"
    )
    package = io.BytesIO()
    with zipfile.ZipFile(package, "w") as zf:
        zf.writestr(
            "[Content_Types].xml",
            '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Override PartName='
            '"/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.'
            'document.main+xml"/></Types>',
        )
        zf.writestr(
            "_rels/.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            f'package/2006/relationships"><Relationship Id="rId1" Type="{rels}/officeDocument" '
            'Target="word/document.xml"/></Relationships>',
        )
        zf.writestr("word/document.xml", document)
        zf.writestr(
            "word/_rels/document.xml.rels",
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            f'package/2006/relationships"><Relationship Id="rIdL" Type="{rels}/image" '
            f'Target="{secret.as_uri()}" TargetMode="External"/></Relationships>',
        )
    return package.getvalue()


def _read(data: bytes, file_name: str, file_type: str) -> tuple[str, list[bytes]]:
    """What the reader gives of the file: its Markdown and its images (nothing when it refuses the file)."""
    try:
        result = build_docreader().read(
            ReadRequest(data=data, file_name=file_name, file_type=file_type, options={})
        )
    except PermanentStageError:  # refused: nothing of the file or the disk is read
        return "", []
    return result.markdown, [image.data for image in result.images]


@pytest.mark.requires_libreoffice
def test_an_encrypted_docx_is_not_opened_by_libreoffice(tmp_path: Path) -> None:
    """Fails before the fix: LibreOffice decrypts the package and converts the .docx inside."""
    pytest.importorskip("cryptography")
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG\r\n\x1a\n" + SECRET_TEXT.encode())
    data = compound_file(encrypted_package(_docx_linking(secret)))

    with pytest.raises(PermanentStageError, match="encrypted"):
        convert_with_libreoffice(data, "doc", 120)
    markdown, images = _read(data, "report.doc", "doc")
    assert HIDDEN_TEXT not in markdown and SECRET_TEXT not in markdown and images == []


def test_an_encrypted_ooxml_package_is_refused_whatever_its_names_case(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(libreoffice, "soffice_path", lambda: "/nonexistent/soffice")  # refused before it runs
    for name in ("EncryptedPackage", "ENCRYPTEDPACKAGE", "encryptedPackage"):
        data = compound_file({"EncryptionInfo": b"\4\0\4\0", name: b"\0" * 16})
        for kind in ("doc", "ppt", "xls"):
            with pytest.raises(PermanentStageError, match="encrypted"):
                office_input(data, kind)
        with pytest.raises(PermanentStageError, match="encrypted"):
            convert_with_libreoffice(data, "ppt", 5)
    # the name as text of a 97-2003 file (not at a directory entry's start) is no encrypted package
    word = compound_file({"WordDocument": b"\0" + "EncryptedPackage".encode("utf-16-le")})
    assert office_input(word, "doc") is word
    # nor is it where a directory entry's name would be (a sector's start): only the directory is read
    # (a review found Word 97 text about Office encryption refused: its text is UTF-16)
    word = compound_file({"WordDocument": "EncryptedPackage".encode("utf-16-le") * 64})
    assert office_input(word, "doc") is word


# ---------------------------------------------------------------- the import filter is ours, not LibreOffice's


def _pptx_saying(text: str) -> bytes:
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = text
    out = io.BytesIO()
    deck.save(out)
    return out.getvalue()


def _converted_text(data: bytes, kind: str) -> str:
    """Every part of what LibreOffice made of the file, as text; "" when it was refused."""
    try:
        converted = convert_with_libreoffice(data, kind, 120)
    except PermanentStageError:
        return ""
    with zipfile.ZipFile(io.BytesIO(converted)) as package:
        return "".join(package.read(name).decode("utf-8", "replace") for name in package.namelist())


@pytest.mark.requires_libreoffice
def test_an_ole_file_of_another_format_is_not_opened_by_what_libreoffice_finds_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LibreOffice picked its importer by the content, so any format it reads inside an OLE file (StarOffice,
    Works, Visio, Publisher, an encrypted OOXML package) passed the guard as a 97-2003 file. It is now given
    the Word, PowerPoint or Excel 97-2003 importer the file's kind names (a .doc without a Word FIB is
    refused before): with the guard's own check for encrypted packages switched off, an encrypted .docx
    named .doc and an encrypted .pptx named .ppt are not read all the same (before: both converted, the
    hidden text in them)."""
    pytest.importorskip("cryptography")
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG\r\n\x1a\n" + SECRET_TEXT.encode())
    monkeypatch.setattr(libreoffice, "holds_encrypted_package", lambda data: False)
    for package, kind in ((_docx_linking(secret), "doc"), (_pptx_saying(HIDDEN_TEXT), "ppt")):
        assert HIDDEN_TEXT not in _converted_text(compound_file(encrypted_package(package)), kind), kind


def test_each_kind_gets_its_own_import_filter() -> None:
    def word(fib_version: int) -> bytes:
        return compound_file({"WordDocument": struct.pack("<HH", 0xA5EC, fib_version)})

    assert libreoffice.import_filters(word(0x00C1), "doc") == ("MS Word 97",)
    assert libreoffice.import_filters(word(0x0101), "doc") == ("MS Word 97",)  # a later writer's own number
    assert libreoffice.import_filters(word(0x0065), "doc") == ("MS WinWord 6.0", "MS Word 95")
    assert libreoffice.import_filters(word(0x0068), "doc") == ("MS WinWord 6.0", "MS Word 95")
    word6 = compound_file({"WordDocument": struct.pack("<HH", 0xA5DC, 0x0065)})  # Word 6.0's own wIdent
    assert libreoffice.import_filters(word6, "doc") == ("MS WinWord 6.0", "MS Word 95")
    assert libreoffice.import_filters(compound_file({"PowerPoint Document": b"x"}), "ppt") == (
        "MS PowerPoint 97",
    )
    assert libreoffice.import_filters(b"{\\rtf1 text}", "doc") == ("Rich Text Format",)
    for not_word in (compound_file({"Workbook": b"x"}), compound_file({"WordDocument": b"\0\0\0\0"})):
        with pytest.raises(PermanentStageError, match="holds no Word document"):
            libreoffice.import_filters(not_word, "doc")


def test_a_word6_file_is_tried_with_the_word95_importer_when_the_word6_one_refuses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Word 6.0 and Word 95 share a FIB range but not an importer: the second is tried after the first."""
    fake = tmp_path / "soffice"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import pathlib, sys\n"
        "args = sys.argv[1:]\n"
        "if '--infilter=MS Word 95' in args:\n"
        "    out = pathlib.Path(args[args.index('--outdir') + 1])\n"
        "    out.mkdir()\n"
        "    (out / 'input.docx').write_bytes(b'converted by the Word 95 importer')\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(libreoffice, "soffice_path", lambda: str(fake))
    word95 = compound_file({"WordDocument": struct.pack("<HH", 0xA5EC, 0x0068)})
    assert convert_with_libreoffice(word95, "doc", 30) == b"converted by the Word 95 importer"
    word97 = compound_file({"WordDocument": struct.pack("<HH", 0xA5EC, 0x00C1)})
    with pytest.raises(PermanentStageError, match="damaged or could not be converted"):
        convert_with_libreoffice(word97, "doc", 30)


# ---------------------------------------------------------------- RTF OLE link objects (pinned)


def _ole1_link(class_name: str, path: str) -> bytes:
    """An OLE1 linked object (FormatID 1): its class, the linked file (topic), item and network name, then a
    reserved word and its update option (1: always)."""

    def string(text: str) -> bytes:
        encoded = text.encode("latin-1") + b"\0"
        return struct.pack("<I", len(encoded)) + encoded

    head = struct.pack("<II", 0x0501, 1)
    return head + string(class_name) + string(path) + string("") + string("") + struct.pack("<II", 0, 1)


@pytest.mark.requires_libreoffice
def test_an_rtf_ole_link_object_keeps_its_saved_result(tmp_path: Path) -> None:
    """Passes before and after the fix (LibreOffice 7.4 reads none of the linked files)."""
    text = tmp_path / "secret.txt"
    text.write_text(f"{SECRET_TEXT}\n")
    objects = b"".join(
        b"{\\object\\"
        + word
        + b"\\objupdate\\rsltpict\\objw2000\\objh1000{\\*\\objclass "
        + cls.encode()
        + b"}{\\*\\objdata "
        + _ole1_link(cls, path.as_posix()).hex().encode()
        + b"}{\\result {saved "
        + word
        + b"}}}\\par "
        for word, cls, path in (
            (b"objautlink", "Package", text),
            (b"objlink", "soffice.StarWriterDocument.6", text),
            (b"objautlink", "Package", Path("/etc/passwd")),
        )
    )
    data = b"{\\rtf1\\ansi Before the objects.\\par " + objects + b"After.\\par}"

    markdown, images = _read(data, "letter.doc", "doc")  # one conversion, as the reader gives it
    assert "Before the objects." in markdown and "saved objautlink" in markdown
    assert SECRET_TEXT not in markdown and "root:x:0:" not in markdown
    assert images == []  # the file holds no picture: one would be a linked file's rendering
