"""The .docx reader works on the package's XML (chalicelib/parsers/office.py with ooxml.Package), not
python-docx's objects: merged table cells come out as python-docx's row.cells gives them, headings by style
name, breaks and tabs in place."""

from __future__ import annotations

import io
import zipfile

import docx

from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.office import parse_docx
from chalicelib.ports import ReadRequest


def _document() -> tuple[bytes, list[list[str]]]:
    document = docx.Document()
    document.add_heading("Chapter one", level=1)
    document.add_heading("Section", level=2)
    run = document.add_paragraph().add_run("left")
    run.add_tab()
    run.add_text("right")
    run.add_break()
    run.add_text("below")
    table = document.add_table(rows=4, cols=3)
    for r in range(4):
        for c in range(3):
            table.cell(r, c).text = f"r{r}c{c}"
    table.cell(0, 0).merge(table.cell(0, 1))  # a horizontal span
    table.cell(1, 2).merge(table.cell(3, 2))  # a vertical span over three rows
    table.cell(2, 0).merge(table.cell(3, 1))  # both at once
    out = io.BytesIO()
    document.save(out)
    data = out.getvalue()
    reread = docx.Document(io.BytesIO(data)).tables[0]
    expected = [[cell.text.strip().replace("\n", "<br>") for cell in row.cells] for row in reread.rows]
    return data, expected


def test_merged_cells_headings_lists_and_breaks_read_as_python_docx_gives_them() -> None:
    data, expected_rows = _document()
    result = parse_docx(ReadRequest(data=data, file_name="d.docx", file_type="docx"), ParseContext())
    blocks = result.markdown.split("\n\n")
    assert blocks[0] == "# Chapter one"
    assert result.title == "Chapter one"
    assert blocks[1] == "## Section"
    assert blocks[2] == "left\tright\nbelow"
    table_lines = blocks[3].splitlines()
    cells = [
        [c.strip() for c in line.strip("|").split(" | ")]
        for line in table_lines
        if not line.startswith("|---")
    ]
    assert (
        len(expected_rows) == 4 and expected_rows[3][2] == expected_rows[1][2]
    )  # the reference really merges
    assert cells == expected_rows


# A document.xml written by hand with what the body transform (office._DOCX_BODY_XSLT) has to get right; the
# expected Markdown is what the Python element walk it replaced gave for the same file.
_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64
_W = (
    'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:v="urn:schemas-microsoft-com:vml"'
)
_BODY = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document {_W}><w:body>
<w:p><w:pPr><w:pStyle w:val="Heading2"/></w:pPr><w:r><w:t>A  heading</w:t></w:r><w:r><w:t xml:space="preserve"> split</w:t></w:r></w:p>
<w:p><w:pPr><w:numPr><w:ilvl w:val="1"/><w:numId w:val="3"/></w:numPr></w:pPr><w:r><w:t>second level</w:t></w:r></w:p>
<w:p><w:pPr><w:numPr><w:numId w:val="3"/></w:numPr></w:pPr><w:r><w:t>no level given</w:t></w:r></w:p>
<w:p><w:r><w:t>non</w:t><w:noBreakHyphen/><w:t>breaking</w:t><w:tab/><w:t><!--c-->after a comment</w:t><w:cr/><w:t>end</w:t></w:r></w:p>
<w:p><w:r><w:t>see</w:t><w:br/><w:drawing><a:blip r:embed="rIdImg"/></w:drawing><w:t>the picture</w:t><w:tab/></w:r><w:r><w:pict><v:imagedata r:id="rIdImg"/></w:pict></w:r></w:p>
<w:p><w:r><w:t>outer</w:t><w:txbxContent><w:p><w:r><w:t> boxed</w:t></w:r></w:p></w:txbxContent></w:r></w:p>
<w:sdt><w:sdtContent><w:p><w:r><w:t>contents entry</w:t></w:r></w:p><w:p/><w:p><w:r><w:t>second entry</w:t></w:r></w:p></w:sdtContent></w:sdt>
<w:tbl>
 <w:tr><w:tc><w:tcPr><w:gridSpan w:val="2"/></w:tcPr><w:p><w:r><w:t>wide</w:t></w:r></w:p></w:tc><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p><w:r><w:t>tall</w:t></w:r></w:p><w:p><w:r><w:t>two lines</w:t></w:r></w:p></w:tc></w:tr>
 <w:tr><w:trPr><w:gridBefore w:val="2"/></w:trPr><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p><w:r><w:t>hidden</w:t></w:r></w:p></w:tc></w:tr>
 <w:tr><w:tc><w:p><w:r><w:t>a|b</w:t></w:r></w:p></w:tc><w:tc><w:p/></w:tc><w:tc><w:tcPr><w:vMerge w:val="restart"/></w:tcPr><w:p><w:r><w:t>new</w:t></w:r></w:p></w:tc></w:tr>
</w:tbl>
<w:p><w:r><w:t>   </w:t></w:r></w:p>
<w:sectPr/>
</w:body></w:document>"""
_STYLES = f"""<?xml version="1.0"?><w:styles {_W}><w:style w:styleId="Heading2"><w:name w:val="heading 2"/></w:style></w:styles>"""
_RELS = """<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rIdImg" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="media/image1.png"/>
<Relationship Id="rIdSt" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/styles" Target="styles.xml"/>
</Relationships>"""
_PKG_RELS = """<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/>
</Relationships>"""


def _hand_written_package() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr("_rels/.rels", _PKG_RELS)
        zf.writestr("word/document.xml", _BODY)
        zf.writestr("word/_rels/document.xml.rels", _RELS)
        zf.writestr("word/styles.xml", _STYLES)
        zf.writestr("word/media/image1.png", _PNG)
    return out.getvalue()


def test_the_body_transform_keeps_every_rule_of_the_element_walk_it_replaced() -> None:
    """Heading text joined across runs (title kept as written), list levels with and without w:ilvl, marks
    (tab, break, carriage return, no-break hyphen) as characters, an element's leading text only (a w:t that
    starts with a comment gives nothing, as lxml's .text), pictures in place (the same relationship once),
    a text box's paragraph inside its host, content controls' paragraphs, spans, gridBefore and vertical
    merges (restart, continuation, a continuation's own text ignored)."""
    data = _hand_written_package()
    result = parse_docx(ReadRequest(data=data, file_name="e.docx", file_type="docx"), ParseContext())
    assert result.markdown == (
        "## A heading split\n\n  - second level\n- no level given\n\nnon-breaking\t\nend\n\n"
        "see\n ![](docx-image-1.png) the picture\t ![](docx-image-1.png)\n\nouter boxed\n\n"
        "contents entry\n\nsecond entry\n\n| wide | wide | tall<br>two lines |\n|---|---|---|\n"
        "| tall<br>two lines |  |  |\n| a\\|b |  | new |\n"
    )
    assert result.title == "A  heading split"
    assert [(i.ref, i.data) for i in result.images] == [("docx-image-1.png", _PNG)]
