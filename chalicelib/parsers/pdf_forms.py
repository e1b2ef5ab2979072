"""The filled-in fields of a PDF form (AcroForm): a field's value lives in the form, not in the page's
content, so pdfium's text of the page never holds it. Read with pdfium's form calls, only for a document
that has a form (`FPDF_GetFormType`: one look at the catalog, so a PDF without one costs nothing more), and
only fields with a value, as `- **label**: value` lines under a heading of their own. Used under
`pdf.PDFIUM_LOCK`."""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from typing import Any

FORM_FIELDS_HEADING = "## Form fields"
#: fields kept, and widgets looked at, per document: a form of thousands of widgets stays a bounded read
MAX_FORM_FIELDS = 500
MAX_FORM_WIDGETS = 20_000
MAX_LABEL_CHARS = 200
MAX_VALUE_CHARS = 2_000

_WS = re.compile(r"\s+")


def form_fields_markdown(
    pdf: Any, first: int, last: int, pdfium_c: Any, check_time: Callable[[str], None]
) -> str:
    """The form's filled fields on pages `first` to `last` (end excluded) as a Markdown section, in page and
    widget order, each field once; "" for a PDF without a form or without a filled field."""
    import pypdfium2 as pdfium

    if pdfium_c.FPDF_GetFormType(pdf.raw) == pdfium_c.FORMTYPE_NONE:
        return ""
    try:
        pdf.init_forms()
    except pdfium.PdfiumError:  # pdfium could not set up the form: the pages' text stands without it
        return ""
    try:
        lines = _field_lines(pdf.raw, pdf.formenv.raw, first, last, pdfium_c, check_time)
    finally:
        pdf.close_forms()
    return f"{FORM_FIELDS_HEADING}\n\n" + "\n".join(lines) if lines else ""


def _field_lines(
    document: Any, form: Any, first: int, last: int, pdfium_c: Any, check_time: Callable[[str], None]
) -> list[str]:
    skipped = {pdfium_c.FPDF_FORMFIELD_PUSHBUTTON, pdfium_c.FPDF_FORMFIELD_SIGNATURE}
    toggles = {pdfium_c.FPDF_FORMFIELD_CHECKBOX, pdfium_c.FPDF_FORMFIELD_RADIOBUTTON}
    seen: set[str] = set()
    lines: list[str] = []
    widgets = 0
    for index in range(first, last):
        check_time("the PDF's form")
        page = pdfium_c.FPDF_LoadPage(document, index)
        if not page:
            continue  # the page loop reports an unreadable page
        pdfium_c.FORM_OnAfterLoadPage(page, form)  # the page's widgets join the form (their checked state)
        try:
            for k in range(pdfium_c.FPDFPage_GetAnnotCount(page)):
                if widgets >= MAX_FORM_WIDGETS or len(lines) >= MAX_FORM_FIELDS:
                    return lines
                annot = pdfium_c.FPDFPage_GetAnnot(page, k)
                if not annot:
                    continue
                try:
                    if pdfium_c.FPDFAnnot_GetSubtype(annot) != pdfium_c.FPDF_ANNOT_WIDGET:
                        continue
                    widgets += 1
                    kind = pdfium_c.FPDFAnnot_GetFormFieldType(form, annot)
                    if kind in skipped or (kind in toggles and not pdfium_c.FPDFAnnot_IsChecked(form, annot)):
                        continue  # a radio group's other widgets: the checked one gives its value
                    name = _text(pdfium_c.FPDFAnnot_GetFormFieldName, form, annot)
                    value = _text(pdfium_c.FPDFAnnot_GetFormFieldValue, form, annot)
                    if kind in toggles and value in ("", "Off"):
                        value = "Yes"  # checked, with no export value of its own
                    if not value or name in seen:
                        continue
                    seen.add(name)
                    label = _text(pdfium_c.FPDFAnnot_GetFormFieldAlternateName, form, annot) or name
                    label = _cut(label, MAX_LABEL_CHARS).replace("*", "\\*")
                    lines.append(f"- **{label}**: {_cut(value, MAX_VALUE_CHARS)}")
                finally:
                    pdfium_c.FPDFPage_CloseAnnot(annot)
        finally:
            pdfium_c.FORM_OnBeforeClosePage(page, form)
            pdfium_c.FPDF_ClosePage(page)
    return lines


def _text(call: Callable[..., int], form: Any, annot: Any) -> str:
    """A UTF-16 string pdfium writes into a buffer it first gives the size of (in bytes, NUL included)."""
    size = call(form, annot, None, 0)
    if size <= 2:
        return ""
    buffer = (ctypes.c_ushort * (size // 2))()
    call(form, annot, buffer, size)
    return bytes(buffer).decode("utf-16-le", errors="replace").rstrip("\x00")


def _cut(text: str, limit: int) -> str:
    """One line (a multi-line field's breaks as spaces), at most `limit` characters."""
    line = _WS.sub(" ", text).strip()
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"
