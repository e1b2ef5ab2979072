"""Legacy Office files through LibreOffice: a .doc/.ppt the builtin readers cannot read (and RTF named .doc),
converted by a headless soffice to its OOXML twin in a throwaway profile that reaches no network and gets
none of the worker's environment. What soffice is given is guarded (office_input: only 97-2003 OLE files and
RTF without field instructions; an encrypted OOXML package refused) and opened with the import filter its
kind calls for (import_filters), never one LibreOffice picks by the content; a converted deck keeps only the
pictures the file holds (media_of_the_file_only)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from chalicelib.domain import metering
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.parsers.base import is_rtf, parse_failed, unsupported
from chalicelib.parsers.magic import OLE_MAGIC
from chalicelib.settings import subprocess_env

_SOFFICE_LOCK = threading.Lock()  # one profile, one instance at a time
LEGACY_TARGET = {"doc": "docx", "ppt": "pptx", "xls": "xlsx"}

#: the settings of LibreOffice's throwaway profile (its user/registrymodifications.xcu): (path, name, value)
OFFICE_SETTINGS: tuple[tuple[str, str, str], ...] = (
    # every URL LibreOffice fetches itself (a linked picture in a .doc fetched while converting it, an OLE
    # or section link) goes to a proxy that takes no connection (127.0.0.1:9), local addresses included:
    # our SSRF-safe client is not LibreOffice's, and a document may name the metadata service. The one
    # setting seen to stop a linked picture's fetch (LibreOffice 7.4: the link-update settings below do not)
    *(
        ("/org.openoffice.Inet/Settings", name, value)
        for name, value in (
            ("ooInetProxyType", "2"),  # 2: the proxies named here
            ("ooInetHTTPProxyName", "127.0.0.1"),
            ("ooInetHTTPProxyPort", "9"),
            ("ooInetHTTPSProxyName", "127.0.0.1"),
            ("ooInetHTTPSProxyPort", "9"),
            ("ooInetFTPProxyName", "127.0.0.1"),
            ("ooInetFTPProxyPort", "9"),
            ("ooInetNoProxy", ""),
        )
    ),
    # links are never updated as a document loads (Writer 2 and Calc 1 are "never"; both default to "on
    # request"): a linked section or INCLUDETEXT field could read a local file (another process's environ)
    # into the text. A headless 7.4 updates none either way; a later version or document may.
    ("/org.openoffice.Office.Writer/Content/Update", "Link", "2"),
    ("/org.openoffice.Office.Calc/Content/Update", "Link", "1"),
    # no macro runs
    ("/org.openoffice.Office.Common/Security/Scripting", "MacroSecurityLevel", "3"),
    ("/org.openoffice.Office.Common/Security/Scripting", "DisableMacrosExecution", "true"),
)
#: what LibreOffice gets of our environment: what it needs to run, never the worker's credentials (AWS_*)
#: or settings: it reads a document we do not trust, and a link in it could read its environment
OFFICE_ENVIRONMENT = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


def soffice_path() -> str | None:
    return shutil.which("soffice") or shutil.which("libreoffice")


# A control word (letters, an optional numeric parameter, the space that may end it), a control symbol
# (\\, \{, \}, \~ …; \' takes its two hex digits), or a group's brace: all an RTF's markup is made of
_RTF_TOKEN = re.compile(rb"[{}]|\\(?:([A-Za-z]+)(-?[0-9]+)? ?|'..|.)", re.DOTALL)
#: the word of a field instruction anywhere, markup or not: what the file is checked for before and after the
#: scan (LibreOffice reads markup the scan can take for data: `\\bin0` and `\\bin-1` swallow a byte there,
#: so `\\bin0 \\\\fldinst` is an instruction to LibreOffice and an escaped backslash to a tokenizer)
_RTF_FIELD_INSTRUCTION = re.compile(rb"fldinst", re.IGNORECASE)


def rtf_without_field_instructions(data: bytes) -> bytes:
    """The RTF without its fields' instructions (each group holding a \\fldinst, nested groups and all); each
    field keeps its result (\\fldrslt), the text and pictures Word saved for it, which is what the reader
    reads of a field. LibreOffice's RTF import loads the file an INCLUDEPICTURE field names as it opens the
    document (7.4, whatever its link settings: no setting stops it), and embeds it in the converted docx: a
    tenant's RTF named .doc could name any picture the worker can read (an SVG is rendered, its text OCR'd)
    and get it back among its images. A \\binN's N bytes are skipped, as LibreOffice skips them; a
    \\fldinst left anywhere after that (one hidden where LibreOffice would read markup this scan reads as
    data) refuses the file."""
    if not _RTF_FIELD_INSTRUCTION.search(data):  # most: one C pass
        return data
    drops: list[tuple[int, int]] = []
    open_groups: list[int] = []  # the offsets of the open groups' braces
    marked: set[int] = set()  # the groups that hold a field instruction
    position = 0
    while (token := _RTF_TOKEN.search(data, position)) is not None:
        position = token.end()
        text = token.group()
        if text == b"{":
            open_groups.append(token.start())
        elif text == b"}":
            if open_groups and (start := open_groups.pop()) in marked:
                drops.append((start, position))
        elif (word := token.group(1)) is not None:
            word = word.lower()
            if word == b"fldinst":
                if len(open_groups) < 2:  # in no group, or in the document's own: nothing to take out
                    raise parse_failed(
                        "The .doc file (an RTF document) is damaged: a field is outside any group."
                    )
                marked.add(open_groups[-1])
            elif word == b"bin" and (count := int(token.group(2) or 0)) > 0:
                position += count
    drops.extend((start, len(data)) for start in open_groups if start in marked)  # groups never closed
    kept: list[bytes] = []
    end = 0
    for start, stop in sorted(drops):
        if start >= end:  # a group inside one already dropped goes with it
            kept.append(data[end:start])
            end = stop
    kept.append(data[end:])
    cleaned = b"".join(kept)
    if _RTF_FIELD_INSTRUCTION.search(cleaned):  # one the scan did not see as markup: refused, never passed
        raise parse_failed(
            "The .doc file (an RTF document) is damaged: a field instruction is hidden in its binary data."
        )
    return cleaned


def holds_encrypted_package(data: bytes) -> bool:
    """Whether a compound file's directory names an EncryptedPackage stream (any case: the format compares
    names so), i.e. it is an encrypted .docx/.xlsx/.pptx: LibreOffice decrypts one with Excel's built-in
    password ("VelvetSweatshop", which the author can choose) whatever the file's name, and opens the OOXML
    inside. A 97-2003 file's own encryption is in its streams. Only the directory is read: a document whose
    text names the stream is none. One olefile cannot read is left to the import filter (import_filters),
    which refuses any file that is not of its format."""
    import olefile  # (the docreader image's; doc_notes reads Word files with it too)

    try:
        with olefile.OleFileIO(io.BytesIO(data)) as ole:
            entries = ole.listdir(streams=True, storages=True)
    except (OSError, ValueError, RecursionError):
        return False
    return any(path[-1].lower() == "encryptedpackage" for path in entries)


def office_input(data: bytes, source_type: str) -> bytes:
    """What LibreOffice is given to convert: a Word/PowerPoint/Excel 97-2003 file (an OLE compound file), or
    for .doc an RTF without its field instructions (rtf_without_field_instructions). Left to itself,
    LibreOffice picks its import filter by the content, not the name (a flat OpenDocument presentation named
    .ppt had its linked pictures, file:///…, read from the local disk into the converted deck); it is given
    one (import_filters), and this guard stands before that all the same. The reader sends
    nothing else here (base.resolve_file_type); this keeps any other caller to the same. An OLE file that
    is an encrypted OOXML package (holds_encrypted_package) is refused: it is no 97-2003 file."""
    if data.startswith(OLE_MAGIC):
        if holds_encrypted_package(data):
            raise parse_failed(
                "The file is an encrypted (password-protected) Word, Excel or PowerPoint 2007 or later "
                "document; remove the password and upload it again."
            )
        return data
    if source_type == "doc" and is_rtf(data):
        return rtf_without_field_instructions(data)
    raise unsupported(
        f"The file is named .{source_type} but it is not a Word, PowerPoint or Excel 97-2003 file"
        f"{' or an RTF document' if source_type == 'doc' else ''}; rename it with the right extension or "
        "re-export it."
    )


#: LibreOffice's import filter for each kind it is given, so it never picks one by the content (an OLE file
#: may hold a format LibreOffice opens with another importer: StarOffice, Works, Visio, Publisher, an
#: encrypted OOXML package); a filter refuses a file of another format ("source file could not be loaded")
_RTF_FILTER = "Rich Text Format"
_OLE_FILTERS = {"ppt": ("MS PowerPoint 97",), "xls": ("MS Excel 97",)}
#: a Word binary file's FIB (its WordDocument stream's first bytes): wIdent (0xA5EC; 0xA5DC in Word 6.0 and
#: 95 files), then nFib, the format's version: 0x65-0x69 Word 6.0 and 95, 0x6A and later Word 97-2003 (0x00C1,
#: or a later writer's own number)
_WORD_IDENTS, _FIRST_WORD97_FIB = frozenset({0xA5EC, 0xA5DC}), 0x6A
_WORD97_FILTERS = ("MS Word 97",)
#: the Word 6.0 and Word 95 importers each take their own range of versions: the first that loads it
_WORD6_FILTERS = ("MS WinWord 6.0", "MS Word 95")


def import_filters(data: bytes, source_type: str) -> tuple[str, ...]:
    """The import filters LibreOffice may open `data` (what office_input passed) with, in order: RTF's for an
    RTF, the Word importer the FIB's version names for a .doc, PowerPoint's or Excel's 97-2003 importer
    otherwise. A .doc without a Word FIB is refused."""
    if not data.startswith(OLE_MAGIC):
        return (_RTF_FILTER,)
    if source_type != "doc":
        return _OLE_FILTERS[source_type]
    import olefile  # (the docreader image's; doc_notes reads Word files with it too)

    fib = b""
    with contextlib.suppress(OSError, ValueError, RecursionError), olefile.OleFileIO(io.BytesIO(data)) as ole:
        if ole.exists("WordDocument"):
            fib = ole.openstream("WordDocument").read(4)
    if len(fib) < 4 or struct.unpack_from("<H", fib)[0] not in _WORD_IDENTS:
        raise unsupported(
            "The file is named .doc but it holds no Word document (no Word 6.0-2003 text stream); "
            "rename it with the right extension or re-export it."
        )
    return _WORD97_FILTERS if struct.unpack_from("<H", fib, 2)[0] >= _FIRST_WORD97_FIB else _WORD6_FILTERS


def convert_with_libreoffice(data: bytes, source_type: str, timeout: float) -> bytes:
    """Converts doc/ppt/xls bytes to their OOXML twin with a headless LibreOffice, opened with the import
    filter its kind calls for (import_filters)."""
    binary = soffice_path()
    target = LEGACY_TARGET[source_type]
    if binary is None:
        raise unsupported(
            f".{source_type} files need LibreOffice, which is not installed on this server; save the file as "
            f".{target} and upload it again."
        )
    data = office_input(data, source_type)
    filters = import_filters(data, source_type)
    for import_filter in filters[:-1]:
        with contextlib.suppress(LibreOfficeRefused):
            return _convert(binary, data, source_type, import_filter, timeout)
    return _convert(binary, data, source_type, filters[-1], timeout)


class LibreOfficeRefused(PermanentStageError):
    """LibreOffice ended without a converted file (its import filter did not load the file, or it failed)."""

    def __init__(self, source_type: str):
        super().__init__(
            f"The .{source_type} file is damaged or could not be converted by LibreOffice.",
            code=SpanErrorCode.DOCREADER_PARSE_FAILED,
        )


def _convert(binary: str, data: bytes, source_type: str, import_filter: str, timeout: float) -> bytes:
    target = LEGACY_TARGET[source_type]
    with _SOFFICE_LOCK, tempfile.TemporaryDirectory(prefix="weknora-lo-") as tmp:
        src = os.path.join(tmp, f"input.{source_type}")
        with open(src, "wb") as fh:
            fh.write(data)
        profile = Path(tmp) / "profile"
        write_office_profile(profile)
        cmd = [
            binary,
            f"-env:UserInstallation={profile.as_uri()}",
            "--headless",
            "--norestore",
            "--nolockcheck",
            f"--infilter={import_filter}",
            "--convert-to",
            target,
            "--outdir",
            os.path.join(tmp, "out"),
            src,
        ]
        try:
            with metering.child_process():
                proc = subprocess.run(
                    cmd, capture_output=True, timeout=timeout, check=False, env=office_env(tmp)
                )
        except subprocess.TimeoutExpired as exc:
            raise parse_failed(
                f"Converting the .{source_type} file took longer than {int(timeout)} s."
            ) from exc
        out = os.path.join(tmp, "out", f"input.{target}")
        if proc.returncode != 0 or not os.path.exists(out):
            raise LibreOfficeRefused(source_type)
        with open(out, "rb") as fh:
            converted = fh.read()
    return media_of_the_file_only(converted, data) if source_type == "ppt" else converted


def media_of_the_file_only(package: bytes, source: bytes) -> bytes:
    """The converted deck without the pictures the uploaded .ppt does not hold itself: a PowerPoint 97 shape
    may be a link to a path (its `pibName`) that LibreOffice loads from the worker's disk as it opens the
    deck (7.4: no setting stops it) and embeds. A picture the file holds is stored in its Pictures stream as
    it is (PNG, JPEG); one that is not there byte for byte (a linked one, and a metafile the file keeps
    compressed) is left out of the package, so its slide shows the picture's place without it."""
    with zipfile.ZipFile(io.BytesIO(package)) as converted:
        members = converted.infolist()
        foreign = {
            m.filename
            for m in members
            if m.filename.startswith("ppt/media/") and converted.read(m) not in source
        }
        if not foreign:
            return package
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as kept:
            for member in members:
                if member.filename not in foreign:
                    kept.writestr(member, converted.read(member))
    return out.getvalue()


def write_office_profile(profile: Path) -> None:
    """A new LibreOffice profile holding only OFFICE_SETTINGS (LibreOffice fills in the rest as it starts)."""
    items = "".join(
        f'<item oor:path={quoteattr(path)}><prop oor:name={quoteattr(name)} oor:op="fuse">'
        f"<value>{escape(value)}</value></prop></item>\n"
        for path, name, value in OFFICE_SETTINGS
    )
    (profile / "user").mkdir(parents=True)
    (profile / "user" / "registrymodifications.xcu").write_text(
        '<?xml version="1.0" encoding="UTF-8"?>\n<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
        'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
        f"{items}</oor:items>\n",
        encoding="utf-8",
    )


def office_env(home: str) -> dict[str, str]:
    """LibreOffice's environment: OFFICE_ENVIRONMENT of ours, HOME and TMPDIR in its temporary directory."""
    inherited = subprocess_env()
    env = {name: inherited[name] for name in OFFICE_ENVIRONMENT if name in inherited}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    return {**env, "HOME": home, "TMPDIR": home}
