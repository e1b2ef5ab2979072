"""The office readers' shortcuts give what the plain walk gave (issue 27 item 4: they were added for speed,
the output must not move): relationships parsed once per distinct .rels bytes but resolved per folder, a
slide paragraph's properties found when they are not its first child, fields found by one walk per slide,
one-paragraph table cells read without the paragraph call, and notes looked for in one walk of the body.
They pass on the code before the shortcuts too: they pin its output where a shortcut could have changed it."""

from __future__ import annotations

import io
import zipfile

import docx
from docx.oxml import parse_xml
from pptx import Presentation
from pptx.util import Inches

from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.office import parse_docx
from chalicelib.parsers.ooxml import Package
from chalicelib.parsers.slides import parse_pptx
from chalicelib.ports import ReadRequest

_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in members.items():
            z.writestr(name, data)
    return out.getvalue()


def test_the_same_rels_bytes_in_two_folders_resolve_against_each_folder() -> None:
    rels = (
        f'<Relationships xmlns="{_PKG}"><Relationship Id="rId1" Type="{_R}/image" Target="../media/a.png"/>'
        "</Relationships>"
    ).encode()
    package = Package(
        _zip({"x/one/_rels/p.xml.rels": rels, "x/two/_rels/q.xml.rels": rels, "x/one/p.xml": b"<p/>"}),
        "Test",
        1 << 20,
    )
    first = package.rels("x/one/p.xml")
    assert first == {"rId1": (f"{_R}/image", "x/media/a.png")}
    assert package.rels("y/one/p.xml") == {}  # no such part
    first["rId9"] = ("changed", "by the caller")
    again = package.rels("x/one/p.xml")
    assert again == {"rId1": (f"{_R}/image", "x/media/a.png")}  # each call its own dict
    assert package.rels("x/two/q.xml") == {"rId1": (f"{_R}/image", "x/media/a.png")}
    package_b = Package(
        _zip({"x/one/_rels/p.xml.rels": rels, "x/one/deeper/_rels/p.xml.rels": rels}), "Test", 1 << 20
    )
    assert package_b.rels("x/one/deeper/p.xml") == {"rId1": (f"{_R}/image", "x/one/media/a.png")}
    assert package_b.rels("x/one/p.xml") == {"rId1": (f"{_R}/image", "x/media/a.png")}


def _deck_with_odd_paragraphs() -> bytes:
    """Paragraphs whose properties are not their first child (a comment before them, a run before them), and a
    field in a table cell and in a body: the shortcuts' slow paths."""
    from lxml import etree

    a = "http://schemas.openxmlformats.org/drawingml/2006/main"
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(2)).text_frame
    frame.text = "Plain top"
    commented = frame.add_paragraph()
    commented.text = "After a comment"
    commented.level = 2
    commented._p.insert(0, etree.Comment("a comment first"))
    late = frame.add_paragraph()
    late.text = "Properties last"
    late.level = 1
    props = late._p.find(f"{{{a}}}pPr")
    late._p.remove(props)
    late._p.append(props)
    fielded = frame.add_paragraph()
    fielded.text = "Page "
    fld = etree.SubElement(
        fielded._p, f"{{{a}}}fld", id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum"
    )
    etree.SubElement(fld, f"{{{a}}}t").text = "3"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text = "cell"
    cell_p = table.cell(0, 1).text_frame.paragraphs[0]
    cell_p.text = "No. "
    cell_fld = etree.SubElement(
        cell_p._p, f"{{{a}}}fld", id="{C6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum"
    )
    etree.SubElement(cell_fld, f"{{{a}}}t").text = "5"
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def test_slide_paragraph_levels_and_fields_are_found_wherever_they_stand() -> None:
    result = parse_pptx(
        ReadRequest(data=_deck_with_odd_paragraphs(), file_name="odd.pptx", file_type="pptx"), ParseContext()
    )
    assert result.markdown == (
        "<!-- Slide number: 1 -->\n\nPlain top\n\n  - After a comment\n\n- Properties last\n\nPage\n\n"
        "| cell | No. 5 |\n|---|---|\n"
    )


def test_docx_cells_and_one_referenced_notes_kind_read_as_before() -> None:
    """Cells of one paragraph, of several, and of a paragraph with a field mark; a footnote referenced while the
    endnotes part (present) is not."""
    document = docx.Document()
    paragraph = document.add_paragraph("Claim")
    paragraph._p.append(parse_xml(f'<w:r {_W}><w:footnoteReference w:id="1"/></w:r>'))
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "  one  "
    table.cell(0, 1).text = "first"
    table.cell(0, 1).add_paragraph("second")
    table.cell(1, 0).paragraphs[0]._p.append(
        parse_xml(f'<w:r {_W}><w:t xml:space="preserve"> a</w:t><w:tab/><w:t>b </w:t></w:r>')
    )
    table.cell(1, 1).paragraphs[0]._p.append(parse_xml(f'<w:r {_W}><w:footnoteReference w:id="1"/></w:r>'))
    out = io.BytesIO()
    document.save(out)
    source = zipfile.ZipFile(io.BytesIO(out.getvalue()))
    members = {name: source.read(name) for name in source.namelist()}
    members["word/footnotes.xml"] = (
        f'<w:footnotes {_W}><w:footnote w:id="1"><w:p><w:r><w:t>FOOT</w:t></w:r></w:p></w:footnote></w:footnotes>'
    ).encode()
    members["word/endnotes.xml"] = (
        f'<w:endnotes {_W}><w:endnote w:id="1"><w:p><w:r><w:t>END</w:t></w:r></w:p></w:endnote></w:endnotes>'
    ).encode()
    members["word/_rels/document.xml.rels"] = members["word/_rels/document.xml.rels"].replace(
        b"</Relationships>",
        f'<Relationship Id="rIdFn" Type="{_R}/footnotes" Target="footnotes.xml"/>'
        f'<Relationship Id="rIdEn" Type="{_R}/endnotes" Target="endnotes.xml"/></Relationships>'.encode(),
    )
    result = parse_docx(ReadRequest(data=_zip(members), file_name="n.docx", file_type="docx"), ParseContext())
    assert result.markdown == (
        "Claim[^1]\n\n| one | first<br>second |\n|---|---|\n| a\tb | [^1] |\n\n[^1]: FOOT\n"
    )
