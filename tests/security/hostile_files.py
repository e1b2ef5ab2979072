"""Hostile files, generated in memory (the costly ones once per session): zip containers with forged headers, bombs of every kind, malformed
and oversized documents. Nothing here reads or writes the shared corpus."""

from __future__ import annotations

import io
import json
import os
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from dataclasses import dataclass
from functools import cache

from project_paths import ROOT

# ---------------------------------------------------------------- a zip writer that can lie


@dataclass
class Member:
    name: str
    data: bytes = b""
    #: raw member bytes as stored (already deflated when method is 8); None: built from `data`
    raw: bytes | None = None
    method: int = zipfile.ZIP_DEFLATED
    declared_size: int | None = None  # what the headers claim (None: the truth)
    crc: int | None = None
    flags: int = 0


def deflate(data: bytes, level: int = 9) -> bytes:
    compressor = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


@cache
def deflate_zeros(size: int) -> bytes:
    """Raw deflate of `size` zero bytes, made in milliseconds: a 1 MiB block compressed once and ended with a
    full flush (which resets the window, so the block stands alone) is repeated, then one final block."""
    mib = 1 << 20
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = compressor.compress(b"\0" * mib) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.compress(b"\0" * (size % mib)) + compressor.flush(zlib.Z_FINISH)
    return block * (size // mib) + tail


@cache
def crc_of_zeros(size: int) -> int:
    crc = 0
    block = b"\0" * (1 << 20)
    left = size
    while left > 0:
        crc = zlib.crc32(block[: min(left, len(block))], crc)
        left -= len(block)
    return crc


def build_zip(members: list[Member]) -> bytes:
    """A zip whose local and central headers say exactly what each Member says (true or not)."""
    out = io.BytesIO()
    central = []
    for m in members:
        if m.raw is None:
            raw = deflate(m.data) if m.method == zipfile.ZIP_DEFLATED else m.data
            if m.method == zipfile.ZIP_BZIP2:
                import bz2

                raw = bz2.compress(m.data)
        else:
            raw = m.raw
        size = len(m.data) if m.declared_size is None else m.declared_size
        crc = zlib.crc32(m.data) if m.crc is None else m.crc
        name = m.name.encode()
        offset = out.tell()
        out.write(
            struct.pack(
                "<IHHHHHIIIHH", 0x04034B50, 20, m.flags, m.method, 0, 0x21, crc, len(raw), size, len(name), 0
            )
        )
        out.write(name)
        out.write(raw)
        central.append(
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                m.flags,
                m.method,
                0,
                0x21,
                crc,
                len(raw),
                size,
                len(name),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + name
        )
    start = out.tell()
    for entry in central:
        out.write(entry)
    end = out.tell()
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), end - start, start, 0))
    return out.getvalue()


# ---------------------------------------------------------------- minimal Office / EPUB skeletons

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
CT = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
    'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
    'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>{overrides}</Types>'
)
RELS = (
    '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
    '2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/'
    '2006/relationships/officeDocument" Target="{target}"/></Relationships>'
)


def _override(part: str, kind: str) -> str:
    return (
        f'<Override PartName="/{part}" ContentType="application/vnd.openxmlformats-officedocument.{kind}"/>'
    )


def docx_document(text: str = "hello") -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>{text}'
        "</w:t></w:r></w:p></w:body></w:document>"
    ).encode()


def docx_members(document: Member | None = None, extra: list[Member] | None = None) -> list[Member]:
    return [
        Member(
            "[Content_Types].xml",
            CT.format(
                overrides=_override("word/document.xml", "wordprocessingml.document.main+xml")
            ).encode(),
        ),
        Member("_rels/.rels", RELS.format(target="word/document.xml").encode()),
        document or Member("word/document.xml", docx_document()),
        *(extra or []),
    ]


SHEET_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"


def xlsx_members(sheet: Member | None = None, extra: list[Member] | None = None) -> list[Member]:
    workbook = (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{SHEET_NS}" xmlns:r="{R_NS}"><sheets>'
        '<sheet name="S" sheetId="1" r:id="rId1"/></sheets></workbook>'
    ).encode()
    wb_rels = (
        b'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/package/'
        b'2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/'
        b'2006/relationships/worksheet" Target="worksheets/sheet1.xml"/></Relationships>'
    )
    overrides = _override("xl/workbook.xml", "spreadsheetml.sheet.main+xml") + _override(
        "xl/worksheets/sheet1.xml", "spreadsheetml.worksheet+xml"
    )
    return [
        Member("[Content_Types].xml", CT.format(overrides=overrides).encode()),
        Member("_rels/.rels", RELS.format(target="xl/workbook.xml").encode()),
        Member("xl/workbook.xml", workbook),
        Member("xl/_rels/workbook.xml.rels", wb_rels),
        sheet
        or Member(
            "xl/worksheets/sheet1.xml",
            sheet_xml('<row r="1"><c r="A1" t="inlineStr"><is><t>a</t></is></c></row>'),
        ),
        *(extra or []),
    ]


def sheet_xml(rows: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{SHEET_NS}"><sheetData>{rows}</sheetData>'
        "</worksheet>"
    ).encode()


P_NS = "http://schemas.openxmlformats.org/presentationml/2006/main"


def pptx_members(presentation: Member | None = None) -> list[Member]:
    pres = (
        f'<?xml version="1.0" encoding="UTF-8"?><p:presentation xmlns:p="{P_NS}" xmlns:r="{R_NS}">'
        "<p:sldIdLst/></p:presentation>"
    ).encode()
    return [
        Member(
            "[Content_Types].xml",
            CT.format(
                overrides=_override("ppt/presentation.xml", "presentationml.presentation.main+xml")
            ).encode(),
        ),
        Member("_rels/.rels", RELS.format(target="ppt/presentation.xml").encode()),
        presentation or Member("ppt/presentation.xml", pres),
    ]


def epub_members(chapter: Member | None = None) -> list[Member]:
    container = (
        b'<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
        b'<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
        b"</rootfiles></container>"
    )
    opf = (
        b'<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">'
        b'<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>T</dc:title><dc:identifier id="id">x'
        b'</dc:identifier></metadata><manifest><item id="c1" href="c1.xhtml" media-type="application/xhtml+xml"/>'
        b'</manifest><spine><itemref idref="c1"/></spine></package>'
    )
    return [
        Member("mimetype", b"application/epub+zip", method=zipfile.ZIP_STORED),
        Member("META-INF/container.xml", container),
        Member("OEBPS/content.opf", opf),
        chapter or Member("OEBPS/c1.xhtml", b"<html><body><p>chapter text</p></body></html>"),
    ]


def forged(member_name: str, real_size: int, claimed: int = 1000) -> Member:
    """A member whose headers claim `claimed` bytes while its data inflates to `real_size` zero bytes (the
    CRC is the one of the claimed prefix, so a reader that stops at the claimed size sees a valid part)."""
    return Member(member_name, raw=deflate_zeros(real_size), declared_size=claimed, crc=crc_of_zeros(claimed))


@cache
def lying(kind: str, real_size: int = 1 << 30) -> bytes:
    """A valid-looking container of `kind` whose main part lies about its size."""
    if kind == "docx":
        return build_zip(docx_members(forged("word/document.xml", real_size)))
    if kind == "xlsx":
        return build_zip(xlsx_members(forged("xl/worksheets/sheet1.xml", real_size)))
    if kind == "pptx":
        return build_zip(pptx_members(forged("ppt/presentation.xml", real_size)))
    return build_zip(epub_members(forged("OEBPS/c1.xhtml", real_size)))


@cache
def honest_bomb(kind: str, size: int = 64 * 1024 * 1024) -> bytes:
    """Headers tell the truth, the ratio gives it away."""
    bomb = Member("word/media/bomb.bin", raw=deflate_zeros(size), declared_size=size, crc=crc_of_zeros(size))
    return build_zip(docx_members(extra=[bomb]))


@cache
def wide_bomb(members: int = 24, each: int = 16 * 1024 * 1024) -> bytes:
    """Many members, each under the per-part cap, together far over the total."""
    raw = deflate_zeros(each)
    crc = crc_of_zeros(each)
    parts = [Member(f"word/media/p{i}.bin", raw=raw, declared_size=each, crc=crc) for i in range(members)]
    return build_zip(docx_members(extra=parts))


@cache
def many_members(count: int = 20_500) -> bytes:
    return build_zip(
        docx_members(extra=[Member(f"word/media/{i}.bin", b"x", method=0) for i in range(count)])
    )


def nested_zips(depth: int = 30) -> bytes:
    data = b"innermost"
    for level in range(depth):
        data = build_zip([Member(f"layer{level}.zip" if level else "core.txt", data)])
    return data


BILLION_LAUGHS_DTD = (
    '<!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + (str(i - 1) if i > 1 else "") + ";") * 10}">' for i in range(1, 10)
    )
    + "]>"
)


def laughs_docx(padding: int = 0) -> bytes:
    doc = (
        '<?xml version="1.0"?>'
        + ("<!--" + "x" * padding + "-->" if padding else "")
        + BILLION_LAUGHS_DTD
        + f'<w:document xmlns:w="{W_NS}"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>'
    ).encode()
    return build_zip(docx_members(Member("word/document.xml", doc)))


def laughs_xlsx() -> bytes:
    shared = (
        '<?xml version="1.0"?>' + BILLION_LAUGHS_DTD + f'<sst xmlns="{SHEET_NS}"><si><t>&lol9;</t></si></sst>'
    ).encode()
    sheet = sheet_xml('<row r="1"><c r="A1" t="s"><v>0</v></c></row>')
    return build_zip(
        xlsx_members(Member("xl/worksheets/sheet1.xml", sheet), [Member("xl/sharedStrings.xml", shared)])
    )


def sparse_xlsx() -> bytes:
    """Two cells: A1 and XFD1048576. Engines that build a dense grid allocate 17 billion cells."""
    rows = '<row r="1"><c r="A1"><v>1</v></c></row><row r="1048576"><c r="XFD1048576"><v>2</v></c></row>'
    return build_zip(xlsx_members(Member("xl/worksheets/sheet1.xml", sheet_xml(rows))))


def truncated(data: bytes, share: float = 0.5) -> bytes:
    return data[: int(len(data) * share)]


def encrypted_docx() -> bytes:
    members = docx_members()
    members[2] = Member("word/document.xml", docx_document(), flags=0x1)
    return build_zip(members)


def bzip2_docx() -> bytes:
    members = docx_members()
    members[2] = Member("word/document.xml", docx_document(), method=zipfile.ZIP_BZIP2)
    return build_zip(members)


def bad_crc_docx() -> bytes:
    members = docx_members()
    members[2] = Member("word/document.xml", docx_document(), crc=0x12345678)
    return build_zip(members)


@cache
def deep_epub(depth: int = 60_000) -> bytes:
    html = b"<html><body>" + b"<div>" * depth + b"x" + b"</div>" * depth + b"</body></html>"
    return build_zip(epub_members(Member("OEBPS/c1.xhtml", html)))


# ---------------------------------------------------------------- PDF


@cache
def many_page_pdf(pages: int = 20_000) -> bytes:
    """A real PDF with `pages` empty pages (every reader walks them all)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + i} 0 R" for i in range(pages))
    objects.append(f"<< /Type /Pages /Count {pages} /Kids [{kids}] >>".encode())
    for _ in range(pages):
        objects.append(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


MALFORMED_PDF = b"%PDF-1.7\n" + b"\x00\xff garbage that is no object " * 2000 + b"\n%%EOF\n"


# ---------------------------------------------------------------- images


def _png_chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def png_bomb(width: int = 100_000, height: int = 100_000) -> bytes:
    """A PNG whose header claims `width`×`height` 1-bit pixels; its data is a few KB of zlib."""
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\0" + b"\0" * ((width + 7) // 8)
    compressor = zlib.compressobj(9)
    idat = compressor.compress(row * 64) + compressor.flush()
    return (
        b"\x89PNG\r\n\x1a\n"
        + _png_chunk(b"IHDR", ihdr)
        + _png_chunk(b"IDAT", idat)
        + _png_chunk(b"IEND", b"")
    )


def jpeg_bomb(width: int = 65_500, height: int = 65_500) -> bytes:
    sof = struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00"
    dqt = b"\x00" + bytes([1] * 64)
    dht = b"\x00" + bytes([1] + [0] * 15) + b"\x00"
    sos = b"\x01\x01\x00\x00\x3f\x00"

    def seg(marker: int, body: bytes) -> bytes:
        return struct.pack(">BBH", 0xFF, marker, len(body) + 2) + body

    return (
        b"\xff\xd8"
        + seg(0xDB, dqt)
        + seg(0xC0, sof)
        + seg(0xC4, dht)
        + seg(0xDA, sos)
        + b"\x00" * 64
        + b"\xff\xd9"
    )


def gif_bomb(width: int = 65_535, height: int = 65_535) -> bytes:
    header = b"GIF89a" + struct.pack("<HHBBB", width, height, 0x80, 0, 0) + b"\0\0\0\xff\xff\xff"
    image = b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0) + b"\x02\x02\x44\x01\x00"
    return header + image + b"\x3b"


# ---------------------------------------------------------------- text and markup


@cache
def nested_divs(depth: int = 400_000) -> bytes:
    return b"<html><body>" + b"<div>" * depth + b"deep text" + b"</div>" * depth + b"</body></html>"


def deep_json(depth: int = 100_000) -> bytes:
    return b"[" * depth + b"]" * depth


def json_over_depth(depth: int = 60) -> bytes:
    value: object = "leaf"
    for i in range(depth):
        value = {f"k{i}": value}
    return json.dumps(value).encode()


NUL_TEXT = b"plain words " + b"\x00" * 4096 + b" more words" * 50
HTML_LAUGHS = (
    "<!DOCTYPE html [" + BILLION_LAUGHS_DTD[len("<!DOCTYPE lolz [") : -2] + "]><html><body><p>"
    "Hello &lol9; world, some ordinary words to index.</p></body></html>"
).encode()
SVG_LAUGHS = (
    '<?xml version="1.0"?>'
    + BILLION_LAUGHS_DTD
    + '<svg xmlns="http://www.w3.org/2000/svg"><text>&lol9;</text></svg>'
).encode()
INVALID_UTF8 = (
    b"Valve manual\n\nThe valve \xc3\x28 opens at \xff\xfe\xfd pressure; see \xed\xa0\x80 table.\n" * 20
)


@cache
def pdf_with_image_bomb(width: int = 60_000, height: int = 60_000) -> bytes:
    """One page of text and a small-looking figure whose image claims `width`×`height` grey pixels."""
    row = b"\0" * width
    compressor = zlib.compressobj(9)
    pixels = compressor.compress(row * 16) + compressor.flush()
    content = b"BT /F1 12 Tf 20 700 Td (A page with a figure that is far larger than it looks.) Tj ET q 200 0 0 200 100 300 cm /Im0 Do Q"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Count 1 /Kids [3 0 R] >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 6 0 R >> /XObject << /Im0 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"\nendstream",
        b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8 "
        b"/Filter /FlateDecode /Length %d >>\nstream\n"
        % (width, height, len(pixels))
        + pixels
        + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def xls_far_cell(row: int = 0xFFFF, column: int = 0xFFFE) -> bytes:
    """A corpus .xls whose first number cell is moved to (row, column): calamine lays every sheet out as a
    dense grid when it opens the workbook, so this one cell asks for ~100 GB."""
    import shutil
    import tempfile
    from pathlib import Path

    import olefile
    from project_paths import CORPUS

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "far.xls"
        shutil.copy(CORPUS / "vega-us-employment.xls", path)
        with olefile.OleFileIO(str(path), write_mode=True) as ole:
            stream = bytearray(ole.openstream("Workbook").read())
            position, in_sheet = 0, False
            while position + 4 <= len(stream):
                kind, size = struct.unpack_from("<HH", stream, position)
                if kind == 0x0809:  # BOF: a worksheet's substream is type 0x0010
                    in_sheet = struct.unpack_from("<H", stream, position + 6)[0] == 0x0010
                elif kind == 0x0203 and in_sheet:  # NUMBER: row, column, format, value
                    struct.pack_into("<HH", stream, position + 4, row, column)
                    break
                position += 4 + size
            else:
                raise AssertionError("no number cell in the sample")
            ole.write_stream("Workbook", bytes(stream))
        return path.read_bytes()


def read_in_a_two_gb_child(data: bytes, file_name: str) -> str:
    """What the docreader answers for `data`, read in a child process limited to 2 GB of address space (the
    Lambda has 3): a bomb that aborted the worker fails the child's run, a refusal prints its code."""
    code = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
        from chalicelib.parsers import build_docreader
        from chalicelib.ports import ReadRequest
        data = sys.stdin.buffer.read()
        try:
            request = ReadRequest(data=data, file_name={file_name!r}, file_type={file_name.rsplit(".", 1)[-1]!r})
            build_docreader().read(request)
            print("parsed")
        except Exception as error:
            print(getattr(error, "code", ""), error)
        """
    )
    env = {"PATH": os.defpath, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    child = subprocess.run(
        [sys.executable, "-c", code],
        input=data,
        capture_output=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    return child.stdout.decode()
