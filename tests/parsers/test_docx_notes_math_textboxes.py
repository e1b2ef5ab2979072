"""What Word writes beyond plain paragraphs, read once each (found by an audit on unseen documents): a text box
(its DrawingML and its VML fallback) once, footnotes and endnotes as Markdown footnotes, equations (OMML) as
inline TeX, a file saved as Strict Open XML, and a .doc's reference marks left out of its text."""

from __future__ import annotations

import io
import types
import zipfile

import docx
import pytest
from docx.oxml import parse_xml

from chalicelib.parsers import ooxml

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"
_CT = "application/vnd.openxmlformats-officedocument.wordprocessingml."
_TEXT_BOX = f"""<w:r {_W} xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006"
 xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"
 xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"
 xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:v="urn:schemas-microsoft-com:vml">
<mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:anchor><wp:docPr id="1" name="tb"/><a:graphic>
<a:graphicData uri="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"><wps:wsp><wps:txbx>
<w:txbxContent><w:p><w:r><w:t>TEXTBOXTEXT</w:t></w:r></w:p></w:txbxContent></wps:txbx><wps:bodyPr/></wps:wsp>
</a:graphicData></a:graphic></wp:anchor></w:drawing></mc:Choice><mc:Fallback><w:pict><v:shape><v:textbox>
<w:txbxContent><w:p><w:r><w:t>TEXTBOXTEXT</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict>
</mc:Fallback></mc:AlternateContent></w:r>"""
_MATH = (
    '<m:oMath xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"><m:r><m:t>E=mc</m:t></m:r>'
    "<m:sSup><m:e><m:r><m:t>X</m:t></m:r></m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup>"
    "<m:r><m:t>+</m:t></m:r><m:f><m:num><m:r><m:t>a</m:t></m:r></m:num><m:den><m:r><m:t>b</m:t></m:r></m:den></m:f>"
    "</m:oMath>"
)


def _saved(document: docx.document.Document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _with_part(data: bytes, member: str, content: str, kind: str, rid: str) -> bytes:
    """The package with one more part of the main document, named in its relationships and content types."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            raw = source.read(name)
            if name == "[Content_Types].xml":
                override = f'<Override PartName="/{member}" ContentType="{_CT}{kind}+xml"/></Types>'
                raw = raw.replace(b"</Types>", override.encode())
            if name == "word/_rels/document.xml.rels":
                rel = f'<Relationship Id="{rid}" Type="{_REL}{kind}" Target="{member.split("/", 1)[1]}"/>'
                raw = raw.replace(b"</Relationships>", rel.encode() + b"</Relationships>")
            target.writestr(name, raw)
        target.writestr(member, content)
    return out.getvalue()


def _notes_document(references: bool) -> bytes:
    document = docx.Document()
    paragraph = document.add_paragraph("Claim with a footnote")
    if references:
        paragraph._p.append(parse_xml(f'<w:r {_W}><w:footnoteReference w:id="1"/></w:r>'))
        paragraph._p.append(parse_xml(f'<w:r {_W}><w:endnoteReference w:id="1"/></w:r>'))
    document.add_paragraph("Next paragraph.")
    data = _saved(document)
    footnotes = (
        f'<w:footnotes {_W}><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p>'
        '</w:footnote><w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t>FOOTNOTEBODY source'
        "</w:t></w:r></w:p><w:p><w:r><w:t>second paragraph</w:t></w:r></w:p></w:footnote></w:footnotes>"
    )
    endnotes = f'<w:endnotes {_W}><w:endnote w:id="1"><w:p><w:r><w:t>ENDNOTEBODY text</w:t></w:r></w:p></w:endnote></w:endnotes>'
    data = _with_part(data, "word/footnotes.xml", footnotes, "footnotes", "rIdFn")
    return _with_part(data, "word/endnotes.xml", endnotes, "endnotes", "rIdEn")


def test_a_text_box_is_read_once_not_again_from_its_fallback(read) -> None:
    """Word writes each text box as DrawingML (mc:Choice) and again as VML (mc:Fallback)."""
    document = docx.Document()
    document.add_paragraph("Main body text.")
    document.add_paragraph()._p.append(parse_xml(_TEXT_BOX))
    markdown = read("box.docx", data=_saved(document)).markdown
    assert markdown.count("TEXTBOXTEXT") == 1
    assert markdown == "Main body text.\n\nTEXTBOXTEXT\n"


def test_footnotes_and_endnotes_are_markdown_footnotes_after_the_body(read) -> None:
    markdown = read("notes.docx", data=_notes_document(references=True)).markdown
    assert markdown == (
        "Claim with a footnote[^1][^e1]\n\nNext paragraph.\n\n"
        "[^1]: FOOTNOTEBODY source second paragraph\n\n[^e1]: ENDNOTEBODY text\n"
    )


def test_notes_parts_are_not_read_when_the_body_refers_to_no_note(read, monkeypatch) -> None:
    """Word writes footnotes.xml (its separators) into most files: it is parsed only for a body with notes."""
    parsed: list[str] = []
    original = ooxml.Package.xml

    def recording(self: ooxml.Package, name: str) -> object:
        parsed.append(name)
        return original(self, name)

    monkeypatch.setattr(ooxml.Package, "xml", recording)
    markdown = read("plain.docx", data=_notes_document(references=False)).markdown
    assert markdown == "Claim with a footnote\n\nNext paragraph.\n"
    assert "word/footnotes.xml" not in parsed and "word/endnotes.xml" not in parsed


def test_an_equation_is_its_text_as_inline_tex(read) -> None:
    document = docx.Document()
    document.add_paragraph("Formula: ")._p.append(parse_xml(_MATH))
    markdown = read("math.docx", data=_saved(document)).markdown
    assert markdown == "Formula: $E=mcX^{2}+\\frac{a}{b}$\n"


def test_a_strict_open_xml_document_is_read_with_its_headings(read) -> None:
    document = docx.Document()
    document.add_heading("Strict title", level=1)
    document.add_paragraph("STRICTBODY paragraph text.")
    data = _saved(document)
    strict = {
        b"http://schemas.openxmlformats.org/wordprocessingml/2006/main": b"http://purl.oclc.org/ooxml/wordprocessingml/main",
        b"http://schemas.openxmlformats.org/officeDocument/2006/relationships": b"http://purl.oclc.org/ooxml/officeDocument/relationships",
    }
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            raw = source.read(name)
            for transitional, iso in strict.items():
                raw = raw.replace(transitional, iso)
            target.writestr(name, raw)
    assert b"purl.oclc.org/ooxml/officeDocument/relationships/officeDocument" in zipfile.ZipFile(
        io.BytesIO(out.getvalue())
    ).read("_rels/.rels")
    markdown = read("strict.docx", data=out.getvalue()).markdown
    assert markdown == "# Strict title\n\nSTRICTBODY paragraph text.\n"


def test_a_docs_reference_marks_do_not_leak_into_its_text(read, monkeypatch) -> None:
    """unword leaves Word's marks in the text: a footnote reference (\\x02), an annotation's (\\x05)."""
    unword = pytest.importorskip("unword")
    document = types.SimpleNamespace(
        body_text="Claim with a footnote\x02\x02\x05\rline\x0bbreak non\x1ebreaking\n\n",
        textboxes=["box\x01 text"],
        fields=[],
    )
    monkeypatch.setattr(unword, "parse_doc", lambda data: document)
    result = read("notes.doc", data=b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504)
    assert result.metadata["read_by"] == "unword"
    assert result.markdown == "Claim with a footnote\nline\nbreak non-breaking\n\nbox text\n"
