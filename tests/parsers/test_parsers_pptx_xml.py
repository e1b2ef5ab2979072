"""The .pptx reader works on the package's XML (chalicelib/parsers/slides.py), not python-pptx's objects: a
deck written with python-pptx, with the features whose text python-pptx defines (runs, fields, line breaks,
levels, groups, tables, pictures, notes), reads back as python-pptx would give it, but for a line break
inside a paragraph, which python-pptx's runs drop."""

from __future__ import annotations

import io

from PIL import Image
from pptx import Presentation
from pptx.util import Inches

from chalicelib.parsers.base import ParseContext
from chalicelib.parsers.slides import parse_pptx
from chalicelib.ports import ReadRequest


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), (200, 10, 10)).save(out, "PNG")
    return out.getvalue()


def _deck() -> bytes:
    prs = Presentation()
    first = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    first.shapes.title.text = "Deck   title"
    body = first.placeholders[1].text_frame
    body.text = "Top point"
    deeper = body.add_paragraph()
    deeper.text = "Deeper point"
    deeper.level = 1
    broken = body.add_paragraph()
    broken.add_run().text = "before"
    broken.add_line_break()
    broken.add_run().text = "after"
    first.shapes.add_picture(io.BytesIO(_png()), Inches(5), Inches(6), Inches(1), Inches(1))
    second = prs.slides.add_slide(prs.slide_layouts[6])  # blank
    group = second.shapes.add_group_shape()
    box = group.shapes.add_textbox(Inches(1), Inches(5), Inches(3), Inches(1))
    box.text_frame.text = "Grouped low"
    high = second.shapes.add_textbox(Inches(1), Inches(1), Inches(3), Inches(1))
    high.text_frame.text = "Free high"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(3), Inches(4), Inches(1)).table
    for (r, c), text in {(0, 0): "h1", (0, 1): "h2", (1, 0): "a", (1, 1): "b|c"}.items():
        table.cell(r, c).text = text
    second.notes_slide.notes_text_frame.text = "Say this\nthen that"
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def test_a_deck_reads_back_with_python_pptx_text_rules() -> None:
    result = parse_pptx(ReadRequest(data=_deck(), file_name="d.pptx", file_type="pptx"), ParseContext())
    slides = result.markdown.split("<!-- Slide number: 2 -->")
    assert slides[0] == (
        "<!-- Slide number: 1 -->\n\n# Deck title\n\nTop point\n\n- Deeper point\n\nbefore\nafter\n\n"
        "![Picture 3](pptx-image-1.png)\n\n"
    )
    assert slides[1] == (
        "\n\nFree high\n\n| h1 | h2 |\n|---|---|\n| a | b\\|c |\n\nGrouped low\n\n### Notes:\nSay this\nthen that\n"
    )
    assert result.title == "Deck title"
    assert result.metadata["slides"] == 2
    assert [(i.ref, i.page, i.mime_type) for i in result.images] == [("pptx-image-1.png", 1, "image/png")]


def test_a_paragraph_with_fields_gives_its_runs_text_or_else_the_fields() -> None:
    """python-pptx's runs leave fields (slide numbers, dates) out; a paragraph of fields alone gives their
    text rather than nothing, and a field paragraph keeps its bullet level."""
    from lxml import etree

    a = "http://schemas.openxmlformats.org/drawingml/2006/main"
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(2)).text_frame
    frame.text = "Page "

    def field(p: object, text: str) -> None:
        fld = etree.SubElement(
            p._p, f"{{{a}}}fld", id="{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}", type="slidenum"
        )
        etree.SubElement(fld, f"{{{a}}}t").text = text

    field(frame.paragraphs[0], "7")
    only = frame.add_paragraph()
    only.level = 2
    field(only, "12 May")
    out = io.BytesIO()
    prs.save(out)
    result = parse_pptx(
        ReadRequest(data=out.getvalue(), file_name="f.pptx", file_type="pptx"), ParseContext()
    )
    assert result.markdown == "<!-- Slide number: 1 -->\n\nPage\n\n  - 12 May\n"
