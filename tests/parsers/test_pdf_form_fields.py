"""A filled PDF form (AcroForm): the values typed into its fields are not in the pages' content, so they
were missing from the Markdown. They are read from the form, only the filled ones, in a section of their
own; a PDF without a form is read as before, without setting up a form at all. The forms are written here
by hand (no PDF writer in the dependencies): objects, a cross-reference table, the widgets."""

from __future__ import annotations

import io

import pypdfium2 as pdfium
import pytest
from parser_helpers import pdf_text

FORM_FIELDS_HEADING = "## Form fields"

_CHECKBOX_AP = b"/AP << /N << /Yes 5 0 R /Off 5 0 R >> >>"
_RADIO_AP = b"/AP << /N << /%s 5 0 R /Off 5 0 R >> >>"


def _stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def _utf16(text: str) -> bytes:
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode() + b">"


def _kids(widgets: list[bytes]) -> int:
    return sum(w.startswith(b"KID ") for w in widgets)


def _form_pdf(page_fields: list[list[bytes]], text: bytes = b"Application for a parking permit") -> bytes:
    """A PDF with one page per entry of `page_fields`, each the field dictionaries (without /P, /Rect)
    whose widgets sit on that page. A dictionary with /Kids is a field whose kids are given after it."""
    objects: list[bytes] = [b"", b"", b"", b"", b""]  # catalog, pages, font, content, appearance
    pages, fields = [], []
    for widgets in page_fields:
        page_number = len(objects) + 1
        objects.append(b"")
        annots: list[int] = []
        parent = 0
        for body in widgets:
            number = len(objects) + 1
            if body.startswith(b"KID "):  # a widget of the last field with kids
                body = body[4:] + b" /Parent %d 0 R" % parent
            else:
                fields.append(number)
                if b"/Kids" in body:
                    parent = number
                    kids = b" ".join(b"%d 0 R" % (number + 1 + i) for i in range(_kids(widgets)))
                    objects.append(b"<< " + body.replace(b"/Kids", b"/Kids [%s]" % kids) + b" >>")
                    continue
            y = 700 - 30 * len(annots)
            objects.append(
                b"<< /Type /Annot /Subtype /Widget "
                + body
                + b" /P %d 0 R /Rect [72 %d 300 %d] >>" % (page_number, y, y + 20)
            )
            annots.append(number)
        refs = b" ".join(b"%d 0 R" % n for n in annots)
        objects[page_number - 1] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Annots [%s]"
            b" /Resources << /Font << /F1 3 0 R >> >> >>" % refs
        )
        pages.append(page_number)
    field_refs = b" ".join(b"%d 0 R" % n for n in fields)
    objects[0] = (
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [%s] /NeedAppearances true >> >>" % field_refs
    )
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % n for n in pages),
        len(pages),
    )
    objects[2] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    objects[3] = _stream(b"BT /F1 14 Tf 72 740 Td (" + text + b") Tj ET")
    objects[4] = _stream(b"", b"/Type /XObject /Subtype /Form /BBox [0 0 18 18]")
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


APPLICATION = [
    [
        b"/FT /Tx /T (applicant_name) /TU (Applicant name) /V (Maria Schmidt)",
        b"/FT /Tx /T (street) /V " + _utf16("Müllerstraße 5"),
        b"/FT /Tx /T (middle_name)",  # left empty
        b"/FT /Tx /T (notes) /Ff 4096 /V (Second car\\nparked at night)",  # multi-line
        b"/FT /Btn /T (resident) /V /Yes /AS /Yes " + _CHECKBOX_AP,
        b"/FT /Btn /T (company_car) /V /Off /AS /Off " + _CHECKBOX_AP,  # not ticked
        b"/FT /Btn /Ff 49152 /T (permit_type) /V /Annual /Kids",
        b"KID /AS /Off " + _RADIO_AP % b"Monthly",
        b"KID /AS /Annual " + _RADIO_AP % b"Annual",
        b"/FT /Ch /Ff 131072 /T (vehicle) /Opt [(Car) (Motorbike)] /V (Motorbike)",
        b"/FT /Btn /Ff 65536 /T (submit)",  # a push button: no value to read
    ]
]


def test_filled_fields_are_read_empty_ones_are_not(read) -> None:
    md = read("application.pdf", data=_form_pdf(APPLICATION)).markdown
    assert md.startswith("Application for a parking permit\n\n" + FORM_FIELDS_HEADING + "\n\n")
    section = md.split(FORM_FIELDS_HEADING, 1)[1].strip().split("\n")
    assert section == [
        "- **Applicant name**: Maria Schmidt",
        "- **street**: Müllerstraße 5",
        "- **notes**: Second car parked at night",
        "- **resident**: Yes",
        "- **permit_type**: Annual",
        "- **vehicle**: Motorbike",
    ]


def test_fields_follow_the_page_range_and_a_value_is_capped(read) -> None:
    long_value = "x" * 6000
    pages = [
        [b"/FT /Tx /T (first_page) /V (one)"],
        [b"/FT /Tx /T (second_page) /V (%s)" % long_value.encode()],
    ]
    whole = read("two.pdf", data=_form_pdf(pages)).markdown
    assert "- **first_page**: one" in whole
    second = whole.split("- **second_page**: ", 1)[1].strip()
    assert len(second) == 2000 and second.endswith("…")  # pdf_forms.MAX_VALUE_CHARS
    only_second = read("two.pdf", data=_form_pdf(pages), page_range=[1, 2]).markdown
    assert "first_page" not in only_second and "second_page" in only_second


def test_a_form_with_nothing_filled_adds_no_section(read) -> None:
    md = read(
        "blank.pdf",
        data=_form_pdf([[b"/FT /Tx /T (name)", b"/FT /Btn /T (ok) /V /Off /AS /Off " + _CHECKBOX_AP]]),
    ).markdown
    assert FORM_FIELDS_HEADING not in md and "Application for a parking permit" in md


def test_a_pdf_without_a_form_sets_none_up(read, monkeypatch: pytest.MonkeyPatch) -> None:
    set_up: list[int] = []
    init_forms = pdfium.PdfDocument.init_forms

    def counted(self: pdfium.PdfDocument, config: object = None) -> bool:
        set_up.append(1)
        return init_forms(self, config)

    monkeypatch.setattr(pdfium.PdfDocument, "init_forms", counted)
    pdf = pdfium.PdfDocument.new()
    page = pdf.new_page(612, 792)
    pdf_text(pdf, page, "A plain page", 72, 700, 12)
    page.gen_content()
    out = io.BytesIO()
    pdf.save(out)
    assert read("plain.pdf", data=out.getvalue()).markdown.strip() == "A plain page"
    assert set_up == []
    assert FORM_FIELDS_HEADING in read("application.pdf", data=_form_pdf(APPLICATION)).markdown
    assert set_up == [1]
