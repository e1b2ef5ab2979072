"""Office formats: docx read from its XML with lxml (ooxml.Package) and its body by one XSLT pass (libxslt, in
C; images put back in place; the pptx reader is slides.py), xlsx/xls with every sheet (python-calamine), doc with unword (a Rust reader of Word 97-2003
files); what these cannot read goes through LibreOffice (libreoffice.py).

Over 600 lines, not split: a third of it is the docx body's XSLT text, and each part (docx, sheets, doc) is a
section of its own that the others do not call; the lead may move one out when it grows."""

from __future__ import annotations

import datetime as dt
import marshal
import os
import select
import subprocess
import sys
import threading
from collections.abc import Sequence
from itertools import compress, islice
from operator import itemgetter
from pathlib import Path
from typing import Any

from lxml import etree

from chalicelib.domain import metering
from chalicelib.observability import logger
from chalicelib.parsers import calamine_child
from chalicelib.parsers.base import ParseContext, image_kind, parse_failed
from chalicelib.parsers.calamine_child import native_panic
from chalicelib.parsers.doc_notes import WORD_MARKS, doc_notes
from chalicelib.parsers.guards import sheet_measures
from chalicelib.parsers.markdown_tables import (
    column_texts,
    format_table,
    markdown_table,
    padded_rows,
    table_cells,
)
from chalicelib.parsers.ooxml import R_NS, Package, int_attribute, transitional
from chalicelib.parsers.sparse_sheets import SparseSheets, read_sparse_sheets
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult
from chalicelib.settings import subprocess_env

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_STYLES_REL = f"{R_NS}/styles"
#: the notes parts, each with the reference to it in the body and its mark's prefix ([^1], [^e1])
_NOTES = (
    (f"{R_NS}/footnotes", f"{_W}footnoteReference", ""),
    (f"{R_NS}/endnotes", f"{_W}endnoteReference", "e"),
)
# Word writes a text box (and other shapes) twice, as its DrawingML (mc:Choice) and as VML (mc:Fallback): the
# first alternative is read, as a consumer that understands it does
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"


# ---------------------------------------------------------------- docx

# The body in one libxslt pass (C): each paragraph's text joined (tabs, breaks and no-break hyphens as their
# characters, a picture as an <i> with its relationship ids), its style id and list level, tables as rows of
# cells with their spans and merges, content controls' paragraphs. Python then only assembles the Markdown.
# A paragraph's text follows python-docx: every w:t below it (text boxes' too), an element's leading text
# (lxml's .text) or, for a mark without one, the mark's character; in a paragraph with a picture the marks
# always give their character. A cell's or content control's paragraphs are its outermost ones: a paragraph
# inside another (a text box's) is in that one's text already, and nested paragraphs would repeat it per level.
# A footnote or endnote reference is a Markdown footnote mark ([^1], [^e1]); the notes parts go through the
# same pass (their root's w:footnote/w:endnote children, separators left out). An equation (OMML) is its
# text as inline TeX: runs in order, scripts as ^{}/_{}, fractions and radicals as \frac and \sqrt.
_DOCX_BODY_XSLT = etree.XSLT(
    etree.XML(
        b"""<xsl:stylesheet version="1.0" xmlns:xsl="http://www.w3.org/1999/XSL/Transform"
 xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"
 xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"
 xmlns:v="urn:schemas-microsoft-com:vml"
 xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"
 xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"
 exclude-result-prefixes="w a v r m">
<xsl:template match="/"><d><xsl:apply-templates select="/*/w:body[1]/*|/*/w:footnote|/*/w:endnote"/></d></xsl:template>
<xsl:template match="*"/>
<xsl:template match="w:p">
 <p><xsl:for-each select="w:pPr[1]/w:pStyle[1]/@w:val"><xsl:attribute name="s"><xsl:value-of
  select="."/></xsl:attribute></xsl:for-each>
  <xsl:if test="w:pPr[1]/w:numPr"><xsl:attribute name="l"><xsl:value-of
   select="(w:pPr[1]/w:numPr/w:ilvl)[1]/@w:val"/></xsl:attribute></xsl:if>
  <xsl:call-template name="text"/>
 </p>
</xsl:template>
<xsl:template match="w:tbl">
 <t n="{count(w:tblGrid[1]/w:gridCol)}"><xsl:for-each select="w:tr"><r><xsl:for-each select="w:trPr[1]/w:gridBefore[1]/@w:val"><xsl:attribute
  name="g"><xsl:value-of select="."/></xsl:attribute></xsl:for-each><xsl:for-each select="w:tc">
  <c><xsl:for-each select="w:tcPr[1]/w:gridSpan[1]/@w:val"><xsl:attribute name="s"><xsl:value-of
   select="."/></xsl:attribute></xsl:for-each>
   <xsl:if test="w:tcPr[1]/w:vMerge"><xsl:attribute name="m"><xsl:value-of
    select="w:tcPr[1]/w:vMerge[1]/@w:val"/></xsl:attribute></xsl:if>
   <xsl:for-each select=".//w:p[not(ancestor::w:p)]"><p><xsl:call-template name="text"/></p></xsl:for-each>
  </c>
 </xsl:for-each></r></xsl:for-each></t>
</xsl:template>
<xsl:template match="w:sdt"><x><xsl:for-each select=".//w:p[not(ancestor::w:p)]"><p><xsl:call-template name="text"/></p></xsl:for-each></x></xsl:template>
<xsl:template match="w:footnote|w:endnote"><xsl:if test="not(@w:type) or @w:type='normal'"><n i="{@w:id}"><xsl:for-each
 select=".//w:p[not(ancestor::w:p)]"><p><xsl:call-template name="text"/></p></xsl:for-each></n></xsl:if></xsl:template>
<xsl:template name="text">
 <xsl:choose>
  <xsl:when test=".//a:blip or .//v:imagedata"><xsl:apply-templates select=".//*" mode="pictured"/></xsl:when>
  <xsl:otherwise><xsl:apply-templates select=".//*" mode="text"/></xsl:otherwise>
 </xsl:choose>
</xsl:template>
<xsl:template match="*" mode="text"/>
<xsl:template match="*" mode="pictured"/>
<xsl:template match="w:t" mode="text"><xsl:value-of select="node()[1][self::text()]"/></xsl:template>
<xsl:template match="w:t" mode="pictured"><xsl:value-of select="node()[1][self::text()]"/></xsl:template>
<xsl:template match="w:tab|w:br|w:cr|w:noBreakHyphen" mode="text">
 <xsl:choose>
  <xsl:when test="node()[1][self::text()]"><xsl:value-of select="node()[1]"/></xsl:when>
  <xsl:otherwise><xsl:apply-templates select="." mode="pictured"/></xsl:otherwise>
 </xsl:choose>
</xsl:template>
<xsl:template match="w:tab" mode="pictured"><xsl:text>&#9;</xsl:text></xsl:template>
<xsl:template match="w:br|w:cr" mode="pictured"><xsl:text>&#10;</xsl:text></xsl:template>
<xsl:template match="w:noBreakHyphen" mode="pictured">-</xsl:template>
<xsl:template match="a:blip|v:imagedata" mode="pictured"><i e="{@r:embed}" d="{@r:id}"/></xsl:template>
<xsl:template match="w:footnoteReference" mode="text"><xsl:apply-templates select="." mode="pictured"/></xsl:template>
<xsl:template match="w:footnoteReference" mode="pictured">[^<xsl:value-of select="@w:id"/>]</xsl:template>
<xsl:template match="w:endnoteReference" mode="text"><xsl:apply-templates select="." mode="pictured"/></xsl:template>
<xsl:template match="w:endnoteReference" mode="pictured">[^e<xsl:value-of select="@w:id"/>]</xsl:template>
<xsl:template match="m:oMath" mode="text"><xsl:apply-templates select="." mode="pictured"/></xsl:template>
<xsl:template match="m:oMath" mode="pictured">$<xsl:apply-templates select="*" mode="math"/>$</xsl:template>
<xsl:template match="*" mode="math"><xsl:apply-templates select="*" mode="math"/></xsl:template>
<xsl:template match="m:t" mode="math"><xsl:value-of select="."/></xsl:template>
<xsl:template match="m:sSup" mode="math"><xsl:apply-templates select="m:e" mode="math"/>^{<xsl:apply-templates
 select="m:sup" mode="math"/>}</xsl:template>
<xsl:template match="m:sSub" mode="math"><xsl:apply-templates select="m:e" mode="math"/>_{<xsl:apply-templates
 select="m:sub" mode="math"/>}</xsl:template>
<xsl:template match="m:sSubSup" mode="math"><xsl:apply-templates select="m:e" mode="math"/>_{<xsl:apply-templates
 select="m:sub" mode="math"/>}^{<xsl:apply-templates select="m:sup" mode="math"/>}</xsl:template>
<xsl:template match="m:f" mode="math">\\frac{<xsl:apply-templates select="m:num" mode="math"/>}{<xsl:apply-templates
 select="m:den" mode="math"/>}</xsl:template>
<xsl:template match="m:rad" mode="math">\\sqrt<xsl:if test="m:deg//m:t">[<xsl:apply-templates select="m:deg"
 mode="math"/>]</xsl:if>{<xsl:apply-templates select="m:e" mode="math"/>}</xsl:template>
<xsl:template match="m:d" mode="math"><xsl:value-of select="substring(concat(m:dPr[1]/m:begChr[1]/@m:val, '('), 1,
 1)"/><xsl:for-each select="m:e"><xsl:if test="position() > 1">,</xsl:if><xsl:apply-templates select="."
 mode="math"/></xsl:for-each><xsl:value-of select="substring(concat(m:dPr[1]/m:endChr[1]/@m:val, ')'), 1, 1)"/></xsl:template>
<xsl:template match="m:nary" mode="math"><xsl:value-of select="substring(concat(m:naryPr[1]/m:chr[1]/@m:val,
 '&#8747;'), 1, 1)"/>_{<xsl:apply-templates select="m:sub" mode="math"/>}^{<xsl:apply-templates select="m:sup"
 mode="math"/>}<xsl:apply-templates select="m:e" mode="math"/></xsl:template>
</xsl:stylesheet>"""
    )
)


class _DocxImages:
    def __init__(self, package: Package, rels: dict[str, tuple[str, str]], limit: int) -> None:
        self.package = package
        self.rels = rels
        self.limit = limit
        self.images: list[ParsedImage] = []
        self.by_rid: dict[str, str] = {}

    def ref(self, rid: str) -> str | None:
        if rid in self.by_rid:
            return self.by_rid[rid]
        if len(self.images) >= self.limit:
            return None
        target = self.rels.get(rid)
        blob = self.package.blob(target[1]) if target else None
        if blob is None:
            return None
        kind = image_kind(blob)
        if kind is None:  # EMF/WMF and other vector formats cannot be shown or OCR'd
            return None
        ref = f"docx-image-{len(self.images) + 1}.{kind[0]}"
        self.images.append(ParsedImage(ref=ref, data=blob, mime_type=kind[1]))
        self.by_rid[rid] = ref
        return ref


def _docx_paragraph_text(p: Any, images: _DocxImages) -> str:
    """A paragraph of the transform's output: its text, with its pictures (<i>) put in place."""
    if not len(p):  # most paragraphs: no picture
        return (p.text or "").strip()
    out = [p.text or ""]
    for picture in p:
        rid = picture.get("e") or picture.get("d")
        ref = images.ref(rid) if rid else None
        if ref:
            out.append(f" ![]({ref}) ")
        out.append(picture.tail or "")
    return "".join(out).strip()


def _docx_cell_text(cell: Any, images: _DocxImages) -> str:
    """A table cell's paragraphs' texts, a line each."""
    return "\n".join([_docx_paragraph_text(p, images) for p in cell]).strip()


# Each style's first name, in document order, as its w:val attribute (the style is its grandparent): one C
# pass over styles.xml instead of a Python step per style (~70 in a 20 KB styles.xml).
_STYLE_NAMES = etree.XPath("w:style/w:name[1]/@w:val", namespaces={"w": _W[1:-1]})


def _docx_heading_levels(styles: Any) -> dict[str, int]:
    """styleId → heading level for the Title and "heading N" styles (names compared in lower case)."""
    levels: dict[str, int] = {}
    if styles is None:
        return levels
    for name_value in _STYLE_NAMES(styles):
        name = name_value.lower()
        if name == "title":
            level = 1
        elif name.startswith("heading ") and name[8:].strip().isdigit():
            level = min(int(name[8:].strip()), 6)
        else:
            continue
        sid = name_value.getparent().getparent().get(f"{_W}styleId")
        if sid:
            levels[sid] = level
    return levels


WORD_MAX_COLUMNS = 63


def _docx_table(table: Any, images: _DocxImages, max_chars: int) -> str:
    """python-docx's row.cells: a cell spanning columns repeats per grid column, a vertically merged
    continuation repeats the cell above it (WeKnora fills merged cells)."""
    rows: list[list[str]] = []
    above: dict[int, tuple[str, int]] = {}  # grid offset → (text, span) of the cell that owns it
    # A span never reaches past the table's grid (Word's at most 63 columns when it declares none): a tiny
    # file with gridSpan="30000000" would otherwise repeat a cell into gigabytes.
    width = int_attribute(table.get("n"), 0) or WORD_MAX_COLUMNS
    produced = 0
    for tr in table:
        offset = int_attribute(tr.get("g"), 0)
        cells: list[str] = []
        owners: dict[int, tuple[str, int]] = {}
        for tc in tr:
            grid_span = tc.get("s")  # the transform writes it only when Word did
            span = min(max(int_attribute(grid_span, 1), 1), max(width - offset, 1)) if grid_span else 1
            merge = tc.get("m")
            if merge is not None and (merge or "continue") == "continue" and offset in above:
                owner = above[offset]
            else:
                owner = (_docx_cell_text(tc, images), span)
            text, repeat = owner
            cells.extend([text] * repeat)
            # merged cells repeat their text: a few bytes of XML can ask for gigabytes
            produced += len(text) * repeat
            if produced > max_chars:
                raise parse_failed(
                    f"A table's merged cells repeat into more than {max_chars:,} characters, the limit for one file."
                )
            owners[offset] = owner
            offset += span
        above = owners
        rows.append(cells)
    return markdown_table(rows)


def parse_docx(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    """The main document part read with lxml (ooxml.Package) and its body by one XSLT pass
    (_DOCX_BODY_XSLT): paragraphs with heading styles and list levels, tables, content controls, images put
    back in place. python-docx is not used: it loads every part up front and builds an object per element."""
    package = Package(
        request.data,
        "Word",
        ctx.limits.zip_max_member_uncompressed,
        ctx.package_parts,
        ctx.limits.xml_part_max_marks,
    )
    try:
        main = package.main_part()
        rels = package.rels(main)
        # one part's tree at a time (each is under Limits.xml_part_max_marks, not their sum): the styles
        # before the body, the body's tree and its transform gone (_docx_body returned) before the notes
        styles_part = next((t for kind, t in rels.values() if kind == _STYLES_REL), None)
        levels = _docx_heading_levels(_word_xml(package, styles_part) if styles_part else None)
        images = _DocxImages(package, rels, ctx.limits.max_images)
        blocks, title, notes = _docx_body(package, main, rels, levels, images, ctx)
        blocks.extend(_docx_notes(package, notes, images))
    finally:
        package.close()
    markdown = _join_blocks(blocks)
    return ReadResult(markdown=markdown, images=images.images, title=title.strip()[:300])


def _docx_body(
    package: Package,
    main: str,
    rels: dict[str, tuple[str, str]],
    levels: dict[str, int],
    images: _DocxImages,
    ctx: ParseContext,
) -> tuple[list[str], str, list[tuple[str, str]]]:
    """The body's blocks of Markdown, its title (the first heading) and the notes parts it refers to."""
    root = _word_xml(package, main)
    if root is None or root.find(f"{_W}body") is None:
        raise parse_failed("The Word file is damaged or not a .docx document.")
    notes = _referenced_notes(root, rels)
    body = _DOCX_BODY_XSLT(root).getroot()
    root = None  # the source tree is not needed while the transform's output is walked
    blocks: list[str] = []
    title = ""
    for n, child in enumerate(body):
        if n % 256 == 0:
            ctx.check_time("the Word file")
        tag = child.tag
        if tag == "p":
            text = _docx_paragraph_text(child, images)
            if not text:
                continue
            level = levels.get(child.get("s"))
            if level:
                blocks.append(f"{'#' * level} {' '.join(text.split())}")
                title = title or text
            elif (ilvl := child.get("l")) is not None:  # a list item
                blocks.append(f"{'  ' * min(max(int_attribute(ilvl, 0), 0), 8)}- {text}")
            else:
                blocks.append(text)
        elif tag == "t":
            table = _docx_table(child, images, ctx.limits.max_markdown_chars)
            if table:
                blocks.append(table)
        else:  # "x": a content control's paragraphs (tables of contents, cover pages)
            for p in child:
                text = _docx_paragraph_text(p, images)
                if text:
                    blocks.append(text)
    return blocks, title, notes


def _word_xml(package: Package, part: str) -> Any | None:
    """A WordprocessingML part's tree in the transitional namespaces, without the fallbacks of its
    alternate content (the lookup for them is free when the part has none: lxml sees the name is unused)."""
    root = package.xml(part)
    if root is None:
        return None
    root = transitional(root)
    for fallback in list(root.iter(_MC_FALLBACK)):
        fallback.getparent().remove(fallback)
    return root


def _referenced_notes(body: Any, rels: dict[str, tuple[str, str]]) -> list[tuple[str, str]]:
    """The notes parts (footnotes, endnotes) the body refers to, with their marks' prefix: a notes part is
    read only when the body refers to a note (Word writes footnotes.xml with its separators into most
    files)."""
    wanted: list[tuple[str, str, str]] = []
    for rel_type, reference, prefix in _NOTES:
        part = next((target for kind, target in rels.values() if kind == rel_type), None)
        if part is not None:
            wanted.append((part, reference, prefix))
    # the references of both kinds looked for in one walk of the body (Word writes both notes parts)
    tags = [reference for _part, reference, _prefix in wanted]
    referenced: set[str] = set()
    for found in body.iter(*tags) if tags else ():
        referenced.add(found.tag)
        if len(referenced) == len(tags):
            break
    return [(part, prefix) for part, reference, prefix in wanted if reference in referenced]


def _docx_notes(package: Package, parts: list[tuple[str, str]], images: _DocxImages) -> list[str]:
    """The footnotes and endnotes as Markdown footnotes (`[^1]: text`) after the body."""
    blocks: list[str] = []
    for part, prefix in parts:
        notes = _word_xml(package, part)
        if notes is None:
            continue
        for note in _DOCX_BODY_XSLT(notes).getroot():
            text = " ".join(t for p in note if (t := _docx_paragraph_text(p, images)))
            if text:
                blocks.append(f"[^{prefix}{note.get('i')}]: {text}")
    return blocks


def _join_blocks(blocks: list[str]) -> str:
    out: list[str] = []
    for block in blocks:
        is_item = block.lstrip().startswith("- ")
        if out and is_item and out[-1].lstrip().startswith("- "):
            out[-1] += "\n" + block
        else:
            out.append(block)
    return "\n\n".join(out).strip() + "\n" if out else ""


# ---------------------------------------------------------------- xlsx / xls


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, dt.datetime):
        return value.isoformat(sep=" ").removesuffix(" 00:00:00")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return str(value)
    return str(value).strip()


def _labelled_column(column: Sequence[Any], label: str, end: str = "") -> list[str]:
    """One column's "label: text" + end cells, "" for a cell without text (left out of the row's line)."""
    return column_texts(column, lambda value: label + text + end if (text := _cell(value)) else "")


def _sheet_lines(
    grid: Sequence[Sequence[Any]], header_mode: bool, numbers: Sequence[int] | None = None
) -> list[str]:
    """Each row with text as `header: value, …` without its empty cells (WeKnora's builtin Excel reader, the
    "rows" layout):
    the first row with text is the header when another row with text follows, else columns are colN.
    `numbers`: each grid column's N (a sparse sheet's compact grid); else its place."""
    grid = padded_rows(grid)
    width = len(grid[0]) if grid else 0
    first = next((n for n, row in enumerate(grid) if any(map(_cell, row))), None)
    if first is None:
        return []
    numbers = numbers or range(1, width + 1)
    numbered = [f"col{n}: " for n in numbers]
    if header_mode:
        header = [f"{text or f'col{n}'}: " for n, text in zip(numbers, map(_cell, grid[first]), strict=False)]
        lines = _labelled_lines(grid[first + 1 :], header)
        if lines:
            return lines
        return _labelled_lines(grid[first : first + 1], numbered)
    return _labelled_lines(grid[first:], numbered)


_CELL_SEPARATOR = ", "


def _labelled_lines(rows: Sequence[Sequence[Any]], labels: list[str]) -> list[str]:
    """Each cell with text already ends with the separator, an empty one is "": a row's line is its cells
    joined (map in C) less the last separator, and a row without text joins to "" (left out)."""
    columns = [
        _labelled_column(column, label, _CELL_SEPARATOR)
        for label, column in zip(labels, zip(*rows, strict=True), strict=False)
    ]
    cut = -len(_CELL_SEPARATOR)
    return [line[:cut] for line in map("".join, zip(*columns, strict=True)) if line]


def _sheet_table(grid: list[list[Any]], header_mode: bool, numbers: Sequence[int] | None = None) -> str:
    """The sheet's rows with text as one Markdown table (the CSV path's writer, `markdown_table`'s parts): the
    first row with text is the header when another row with text follows, else the columns are colN; a
    header cell without text is named colN too. The chunker repeats the header atop every chunk of it.
    `numbers`: each grid column's N (a sparse sheet's compact grid); else its place."""
    rows = list(filter(any, table_cells(grid, _cell)))
    if not rows:
        return ""
    columns = _columns_with_text(rows)
    numbered = tuple(f"col{numbers[i] if numbers else i + 1}" for i in columns)
    if len(columns) < len(rows[0]):
        pick = itemgetter(*columns)
        rows = [pick(row) for row in rows] if len(columns) > 1 else [(row[columns[0]],) for row in rows]
    if header_mode and len(rows) > 1:
        rows[0] = tuple(text or label for text, label in zip(rows[0], numbered, strict=True))
    else:
        rows.insert(0, numbered)
    return format_table(rows)


def _columns_with_text(rows: Sequence[Sequence[str]]) -> list[int]:
    """The indexes of the columns with text in some row: a sheet's grid spans its cells' bounding box, and
    two cells at A1 and XFD1 would otherwise make a table of 16,384 columns, nearly all empty. A sheet whose
    first rows fill every column (most) costs those rows' look; the columns still empty then, one C pass each."""
    width = len(rows[0])
    empty = set(range(width))
    for row in islice(rows, 64):
        empty.difference_update(compress(range(width), row))
        if not empty:
            return list(range(width))
    empty = {i for i in empty if not any(map(itemgetter(i), rows))}
    return [i for i in range(width) if i not in empty]


#: the address space a contained calamine read may take: the largest sheet an .xls can hold (65,536 rows ×
#: 256 columns) as calamine's grid and as Python values, with room for the interpreter
CONTAINED_READER_BYTES = 2 << 30
#: formats read by calamine in a child process (calamine_child.py): .xls, whose reader sized buffers from
#: damaged counts (5.4 GB, 44 TB) and aborted the process; xlsx is measured by the preflight (check_zip)
CONTAINED_FORMATS = frozenset({"xls"})


def parse_spreadsheet(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    """Every sheet under its name: a Markdown table (header row once, as for CSV), or with the
    `spreadsheet_layout` setting "rows" each row as `header: value, …` (WeKnora's builtin Excel reader)."""
    # an xlsx's package was inflated, bounded and searched for entity declarations by the reader's preflight
    # (guards.check_zip, which also measured every sheet's extent) before any engine ran
    header_mode = ctx.options.get("xlsx_first_row_as_header", True) is not False
    as_rows = ctx.options.get("spreadsheet_layout") == "rows"
    max_cells = ctx.limits.max_sheet_cells
    sparse = SparseSheets()
    if request.file_type in CONTAINED_FORMATS:
        answer = CONTAINED_CALAMINE.read(request.data, max_cells, ctx.limits.convert_timeout_s)
    else:
        if request.file_type == "xlsx":  # sheets whose cells are few for their grid: read by their cells
            sparse = read_sparse_sheets(
                request.data, sheet_measures(request.data, ctx.limits, ctx.sheet_measures), ctx.limits
            )
        # its panics: the reader's (native_panic)
        answer = calamine_child.read(request.data, max_cells - sparse.spanned, sparse.names)
    if "error" in answer:
        raise parse_failed(f"The spreadsheet is damaged or unreadable ({answer['error']}).")
    if "over" in answer:
        name, rows, cols = answer["over"]
        raise parse_failed(
            f"The spreadsheet has more than {max_cells:,} cells (sheet '{name}' has {rows:,} rows × {cols:,} "
            "columns); split it into smaller files."
        )
    sections: list[str] = []
    for name, grid in answer["sheets"]:
        ctx.check_time("the spreadsheet")
        numbers = None
        if name in sparse.names:
            if name not in sparse.grids:
                continue
            grid, numbers = sparse.grids[name].grid, sparse.grids[name].numbers
        if as_rows:
            body = "\n".join(_sheet_lines(grid, header_mode, numbers))
        else:
            body = _sheet_table(grid, header_mode, numbers)
        if body:
            sections.append(f"## {name}\n{body}" if as_rows else f"## {name}\n\n{body}")
    markdown = "\n\n".join(sections)
    metadata: dict[str, Any] = {"sheets": len(sections)}
    unreadable = answer["unreadable"] + sparse.unreadable
    if unreadable:  # a damaged sheet costs that sheet, named here
        metadata["unreadable_sheets"] = unreadable
    return ReadResult(markdown=markdown + "\n" if markdown else "", metadata=metadata)


class ContainedCalamine:
    """calamine_child.py kept warm in a child process limited to CONTAINED_READER_BYTES: an abort there (a
    failed allocation, a panic that cannot unwind) is the file's failure, and the next file gets a new
    child. One file at a time per child (a lock): .xls files are few and each read takes milliseconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        script = Path(calamine_child.__file__)
        # the child finds calamine where we do (on Lambda, /var/task is on sys.path but not in PYTHONPATH);
        # -S: no site (its .pth files cost ~30 ms a start), PYTHONPATH already holds site-packages
        env = subprocess_env(PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        return subprocess.Popen(
            [sys.executable, "-S", str(script), str(CONTAINED_READER_BYTES)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a panic's message and backtrace: nothing the parent reads
            env=env,
        )

    def _stop(self, child: subprocess.Popen[bytes]) -> int | None:
        self._child = None
        child.kill()
        return child.wait()

    def read(self, data: bytes, max_cells: int, timeout: float) -> dict[str, Any]:
        with self._lock:
            child = self._child if self._child is not None and self._child.poll() is None else self._start()
            self._child = child
            assert child.stdin is not None and child.stdout is not None
            head = body = b""
            try:
                child.stdin.write(len(data).to_bytes(8, "little") + max_cells.to_bytes(8, "little") + data)
                child.stdin.flush()
                if not select.select([child.stdout], [], [], timeout)[0]:
                    self._stop(child)
                    raise parse_failed(f"The spreadsheet took longer than {timeout:.0f} s to read.")
                head = child.stdout.read(8)
                body = child.stdout.read(int.from_bytes(head, "little")) if len(head) == 8 else b""
            except BrokenPipeError:  # it died before it had read the whole file
                pass
            if len(head) < 8 or len(body) < int.from_bytes(head, "little"):
                # killed by a signal: a failed allocation aborts it; the same bytes would fail the same way
                logger.warning("contained spreadsheet read failed", extra={"returncode": self._stop(child)})
                raise parse_failed(
                    "The spreadsheet is damaged: reading it stopped (it needs more memory than its size "
                    "can explain)."
                )
        answer: dict[str, Any] = marshal.loads(body)
        metering.record_offloaded(answer.pop("cpu"))
        if "sheets" in answer:
            untagged = calamine_child.untagged
            answer["sheets"] = [
                (name, untagged(grid) if dated else grid) for name, grid, dated in answer["sheets"]
            ]
        return answer


CONTAINED_CALAMINE = ContainedCalamine()


# ---------------------------------------------------------------- doc (unword)


def read_doc_natively(request: ReadRequest) -> ReadResult | None:
    """A Word 97-2003 file read by unword (headings as Markdown, text boxes after the body) in about a
    millisecond, where LibreOffice takes seconds to start; None when unword is not installed or cannot read
    the file, or finds no text in it (the caller converts it with LibreOffice). Embedded images are not
    extracted, and table cells run together (unword drops the cell marks). The footnotes and endnotes, which
    unword does not read, come after the body as Markdown footnotes (doc_notes.py); their marks in the body
    are not placed, as unword drops them."""
    try:
        import unword
    except ImportError:
        return None
    try:
        document = unword.parse_doc(request.data)
    except (
        ValueError
    ):  # unword's error for a container or stream it cannot read (Word 95, encrypted, damaged)
        return None
    except BaseException as error:  # a panic on damage it does not check for: LibreOffice may still read it
        if native_panic(error):
            return None
        raise
    parts = [
        document.body_text.translate(WORD_MARKS).strip(),
        *(box.translate(WORD_MARKS).strip() for box in document.textboxes),
    ]
    markdown = "\n\n".join(part for part in parts if part)
    if not markdown:
        return None
    markdown = "\n\n".join([markdown, *doc_notes(request.data)])
    title = next((line[2:].strip() for line in markdown.splitlines() if line.startswith("# ")), "")
    return ReadResult(markdown=markdown + "\n", title=title[:300], metadata={"read_by": "unword"})
