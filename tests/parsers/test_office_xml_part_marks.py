"""A docx/pptx part read whole into an lxml tree is bounded by its markup (Limits.xml_part_max_marks), not only
by the zip's byte caps: a <1 MB file whose document.xml inflated to 90-120 MB (under the 128 MB part cap and
the 200 ratio) took ~3 GB in lxml and the docx transform, the docreader's whole memory. Such a part fails at
once with the parse-failed code; a real document of over 1,000 pages is still read."""

from __future__ import annotations

import io
import re
import zipfile

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.base import Limits

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_PML = (
    'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
)
_RELS = 'xmlns="http://schemas.openxmlformats.org/package/2006/relationships"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_TYPES = (
    '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="xml" ContentType="application/xml"/></Types>'
)
_TOO_MUCH = "XML tags and attributes, more than the"


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return out.getvalue()


def _docx(body: bytes, styles: bytes | None = None) -> bytes:
    members = {
        "[Content_Types].xml": _TYPES.encode(),
        "_rels/.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship Id="rId1" '
        f'Type="{_REL}/officeDocument" Target="word/document.xml"/></Relationships>'.encode(),
        "word/document.xml": f'<?xml version="1.0"?><w:document {_W}><w:body>'.encode()
        + body
        + b"</w:body></w:document>",
    }
    if styles is not None:
        members["word/_rels/document.xml.rels"] = (
            f'<?xml version="1.0"?><Relationships {_RELS}><Relationship Id="rId2" Type="{_REL}/styles" '
            'Target="styles.xml"/></Relationships>'
        ).encode()
        members["word/styles.xml"] = (
            f'<?xml version="1.0"?><w:styles {_W}>'.encode() + styles + b"</w:styles>"
        )
    return _zip(members)


def _pptx(shapes: bytes) -> bytes:
    slide = (
        f'<?xml version="1.0"?><p:sld {_PML}><p:cSld><p:spTree><p:sp><p:txBody><a:p>'.encode()
        + shapes
        + b"</a:p></p:txBody></p:sp></p:spTree></p:cSld></p:sld>"
    )
    return _zip(
        {
            "[Content_Types].xml": _TYPES.encode(),
            "_rels/.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship Id="rId1" '
            f'Type="{_REL}/officeDocument" Target="ppt/presentation.xml"/></Relationships>'.encode(),
            "ppt/presentation.xml": f'<?xml version="1.0"?><p:presentation {_PML}><p:sldIdLst>'
            '<p:sldId id="256" r:id="rId2"/></p:sldIdLst></p:presentation>'.encode(),
            "ppt/_rels/presentation.xml.rels": f'<?xml version="1.0"?><Relationships {_RELS}><Relationship '
            f'Id="rId2" Type="{_REL}/slide" Target="slides/slide1.xml"/></Relationships>'.encode(),
            "ppt/slides/slide1.xml": slide,
        }
    )


def _paragraphs(count: int) -> bytes:
    # numbered, so that the part compresses like text (well under the zip ratio cap)
    return b"".join(b"<w:p><w:r><w:t>%d</w:t></w:r></w:p>" % n for n in range(count))


def _runs(count: int) -> bytes:
    return b"".join(b"<a:r><a:t>%d</a:t></a:r>" % n for n in range(count))  # 4 marks each


SMALL = {"xml_part_max_marks": 1_000}


def test_docx_body_over_the_mark_limit_fails_at_once_and_one_under_it_is_read(read) -> None:
    # 200 paragraphs: 1,200 tags; 150: 900 (and the part's own 7 marks)
    with pytest.raises(PermanentStageError, match=_TOO_MUCH) as failed:
        read("bomb.docx", data=_docx(_paragraphs(200)), limits=SMALL)
    assert failed.value.code == "docreader_parse_failed"
    assert "word/document.xml has 1,207 " in str(failed.value)
    markdown = read("ok.docx", data=_docx(_paragraphs(150)), limits=SMALL).markdown
    assert markdown.split("\n\n") == [str(n) for n in range(149)] + ["149\n"]


def test_docx_styles_part_is_bounded_as_the_body_is(read) -> None:
    styles = b'<w:style w:styleId="S"><w:name w:val="x"/></w:style>' * 300  # 5 marks each
    with pytest.raises(PermanentStageError, match=r"word/styles\.xml has 1,50\d "):
        read("styles.docx", data=_docx(_paragraphs(3), styles), limits=SMALL)


def test_real_size_docx_bomb_fails_at_once_under_the_default_limit(read) -> None:
    """The auditor's shape at the default limit: ~550 k one-run paragraphs (3.3 M marks, 20 MB of XML in a
    file of a few MB) fail before lxml sees them (on HEAD they parsed, ~0.6 GB)."""
    with pytest.raises(PermanentStageError, match=_TOO_MUCH):
        read("big.docx", data=_docx(_paragraphs(550_000)))


def test_real_size_pptx_slide_over_the_default_limit_fails_at_once(read) -> None:
    with pytest.raises(PermanentStageError, match=r"ppt/slides/slide1\.xml has [\d,]+ " + _TOO_MUCH):
        read("big.pptx", data=_pptx(_runs(800_000)))  # 3.2 M marks, 17 MB of XML


@pytest.mark.slow
def test_real_document_of_over_1000_pages_is_read(read) -> None:
    """A real document.xml (a corpus chapter's body, ~35 pages, repeated to ~32 MB and ~2.9 M marks): read
    under the limit (~9 s, ~0.4 GB)."""
    from parser_helpers import corpus_bytes

    with zipfile.ZipFile(io.BytesIO(corpus_bytes("debian-reference-ch02.docx"))) as zf:
        members = {info.filename: zf.read(info) for info in zf.infolist()}
    document = members["word/document.xml"]
    head, rest = document.split(b"<w:body>", 1)
    body, tail = rest.rsplit(b"<w:sectPr", 1)
    times = (Limits.xml_part_max_marks - 20_000) // (body.count(b"<") + body.count(b"="))
    assert times >= 30
    members["word/document.xml"] = head + b"<w:body>" + body * times + b"<w:sectPr" + tail
    one = read("one.docx", data=_zip({**members, "word/document.xml": document})).markdown
    many = read("many.docx", data=_zip(members)).markdown
    headings = re.compile(r"^#+ ", re.MULTILINE)
    assert len(headings.findall(many)) == times * len(headings.findall(one)) > 1_000
