""".pptx with speaker notes, read from the package's XML (ooxml.Package): each slide's shapes in reading
order, titles as headings, bulleted paragraphs by level, tables, charts (title and cached data as a table, as
MarkItDown gives them), pictures put in place, then the notes. The
text is what python-pptx gives for each shape and paragraph (runs, fields, line breaks); python-pptx itself
is not used, as it loads every part of the package and builds an object per element."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from lxml import etree

from chalicelib.parsers.base import MarkdownBudget, ParseContext, image_kind, md_image_alt, parse_failed
from chalicelib.parsers.markdown_tables import markdown_table
from chalicelib.parsers.ooxml import R_NS, Package, int_attribute
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult

_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_R = "{" + R_NS + "}"
_SLIDE_REL = f"{R_NS}/slide"
_NOTES_REL = f"{R_NS}/notesSlide"
_CHART_REL = f"{R_NS}/chart"
_C = "{http://schemas.openxmlformats.org/drawingml/2006/chart}"
_SHAPE_TAGS = {f"{_P}sp", f"{_P}grpSp", f"{_P}graphicFrame", f"{_P}cxnSp", f"{_P}pic", f"{_P}contentPart"}
_T, _BR, _FLD, _PPR = f"{_A}t", f"{_A}br", f"{_A}fld", f"{_A}pPr"
_TX_BODY = f"{_P}txBody"
# the tags the walk compares, built once (an f-string in a loop is built on every pass)
_SP, _GRP_SP, _GRAPHIC_FRAME, _PIC = f"{_P}sp", f"{_P}grpSp", f"{_P}graphicFrame", f"{_P}pic"
_AP, _AR, _A_TX_BODY, _TR, _TC = f"{_A}p", f"{_A}r", f"{_A}txBody", f"{_A}tr", f"{_A}tc"


def _first(path: str) -> Callable[[Any], Any]:
    """`el.find(path)` for a path of child steps (the first element reached, in document order, or None) as
    one compiled XPath: a third of find's cost per shape, whose ElementPath runs each step in Python."""
    xpath = etree.XPath(path, namespaces={"p": _P[1:-1], "a": _A[1:-1]})

    def first(el: Any) -> Any:
        found = xpath(el)
        return found[0] if found else None

    return first


def _child(el: Any, tag: str) -> Any:
    """`el.find(tag)`: the first child with that tag, or None."""
    return next(el.iterchildren(tag), None)


_own_position = _first("./p:spPr/a:xfrm/a:off")  # its spPr's, not a search of the whole shape (text runs too)
_placeholder = _first("./p:nvSpPr/p:nvPr/p:ph")
_picture_placeholder = _first("./p:nvPicPr/p:nvPr/p:ph")
_picture_name = _first("./p:nvPicPr/p:cNvPr")
_picture_blip = _first("./p:blipFill/a:blip")
_table = _first("./a:graphic/a:graphicData/a:tbl")
_shape_tree = _first("./p:cSld/p:spTree")
_chart_ref = etree.XPath(
    "./a:graphic/a:graphicData/c:chart/@r:id",
    namespaces={"a": _A[1:-1], "c": _C[1:-1], "r": R_NS},
)
#: a chart's table is cut to this many categories (rows) and series (columns): its cached data can be a
#: whole sheet's, and a slide shows far less
CHART_MAX_CATEGORIES = 200
CHART_MAX_SERIES = 30
#: where a series' cached points are: categories as strings, numbers or levels (the first, innermost,
#: level of a multi-level axis), values as numbers; literals when the chart has no sheet
_POINT_CACHES = (f"{_C}strCache", f"{_C}numCache", f"{_C}lvl", f"{_C}strLit", f"{_C}numLit")


def _iter_shapes(tree: Any) -> Any:
    """The shape elements of a shape tree, groups opened, in document order."""
    for el in tree.iterchildren(*_SHAPE_TAGS):
        if el.tag == _GRP_SP:
            yield from _iter_shapes(el)
        else:
            yield el


def _reading_order(shapes: list[Any]) -> list[Any]:
    """Top-to-bottom, left-to-right; a shape without its own position (a placeholder that inherits it:
    resolving that is slow) stays after the one before it."""
    keyed: list[tuple[tuple[int, int], int, Any]] = []
    last = (-1, -1)
    for i, shape in enumerate(shapes):
        off = _own_position(shape)
        if off is not None:
            last = int_attribute(off.get("y"), 0), int_attribute(off.get("x"), 0)
        keyed.append((last, i, shape))
    keyed.sort()  # by (position, index): the indexes differ, so the shapes themselves are never compared
    return [shape for _key, _i, shape in keyed]


def _mark_breaks(tree: Any) -> set[Any]:
    """Gives each line break a newline as its text, so that a paragraph's text is one C-level walk over its
    a:t and a:br elements (python-pptx reads a break as a vertical tab, which XML cannot hold; a newline
    reads better in Markdown too). In the same walk: the paragraphs that have a field (a:fld) child, a set
    lookup per paragraph then, where looking among its children costs a tag-filtered iterator each."""
    fielded = set()
    for el in tree.iter(_BR, _FLD):
        if el.tag == _BR:
            el.text = "\n"
        else:
            fielded.add(el.getparent())  # lxml gives one proxy per node while it lives: the set holds it
    return fielded


def _paragraph_text(p: Any) -> str:
    """python-pptx's paragraph text (runs and fields), a newline for each line break (_mark_breaks); a list
    of .text costs half of itertext with a tag filter."""
    return "".join([el.text or "" for el in p.iter(_T, _BR)])


def _runs_text(p: Any) -> str:
    """The text of the paragraph's runs, a line break as a newline, without its fields (slide numbers,
    dates). (python-pptx's runs lose the line breaks: "before" and "after" ran together.)"""
    parts: list[str] = []
    for child in p.iterchildren(_AR, _BR):
        t = child if child.tag == _BR else _child(child, _T)
        parts.append((t.text or "") if t is not None else "")
    return "".join(parts)


def _body_lines(body: Any, fielded: set[Any], lines: list[str]) -> None:
    """A body's paragraphs as lines: each one's text (its runs' when it has fields (`fielded`), unless they
    give nothing), a bullet by its level."""
    for p in body.iterchildren(_AP):
        text = _runs_text(p) if p in fielded else ""
        text = (text or _paragraph_text(p)).strip()
        if not text:
            continue
        # its properties: its first a:pPr child, nearly always its first child (it has one: it has text)
        props = p[0]
        if props.tag != _PPR:
            props = next(p.iterchildren(_PPR), None)
        level = int_attribute(props.get("lvl"), 0) if props is not None else 0
        lines.append(f"{'  ' * min(level - 1, 6)}- {text}" if level else text)


def _frame_text(body: Any) -> str:
    return "\n".join(_paragraph_text(p) for p in body.iterchildren(_AP)) if body is not None else ""


def _is_title(el: Any) -> bool:
    ph = _placeholder(el)
    return ph is not None and ph.get("type") in ("title", "ctrTitle")


def _notes_text(package: Package, notes_part: str) -> str:
    """The text of the notes page's body placeholder (python-pptx's notes_text_frame)."""
    root = package.xml(notes_part)
    tree = _shape_tree(root) if root is not None else None
    if tree is None:
        return ""
    _mark_breaks(tree)
    for el in tree.iterchildren(_SP):  # python-pptx looks at the top level only
        ph = _placeholder(el)
        if ph is not None and ph.get("type") == "body":
            return _frame_text(_child(el, _TX_BODY))
    return ""


def _either_child(el: Any, tag: str, other: str) -> Any:
    """The child `tag` (a category or value chart's), else `other` (a scatter or bubble chart's)."""
    found = _child(el, tag)
    return found if found is not None else _child(el, other)


def _cached_points(el: Any) -> tuple[dict[int, str], int]:
    """A series part's cached points (idx → text, those below CHART_MAX_CATEGORIES) and how many it has."""
    cache = next(el.iter(*_POINT_CACHES), None) if el is not None else None
    if cache is None:
        return {}, 0
    points: dict[int, str] = {}
    count = 0
    for pt in cache.iterchildren(f"{_C}pt"):
        idx = int_attribute(pt.get("idx"), -1)
        count = max(count, idx + 1)
        v = _child(pt, f"{_C}v")
        if 0 <= idx < CHART_MAX_CATEGORIES and v is not None:
            points[idx] = (v.text or "").strip()
    return points, count


def _chart_title(chart: Any) -> str:
    title = _child(chart, f"{_C}title")
    tx = _child(title, f"{_C}tx") if title is not None else None
    if tx is None:
        return ""
    rich = _child(tx, f"{_C}rich")
    if rich is not None:
        return " ".join(" ".join(_paragraph_text(p) for p in rich.iterchildren(_AP)).split())
    return " ".join(" ".join(v.text or "" for v in tx.iter(f"{_C}v")).split())


def _chart_markdown(root: Any) -> str:
    """A chart part (c:chartSpace) as MarkItDown writes it: "### Chart: title", then a table of its
    cached data, a row per category and a column per series, cut to CHART_MAX_CATEGORIES ×
    CHART_MAX_SERIES with a line saying what was left out."""
    chart = _child(root, f"{_C}chart")
    if chart is None:
        return ""
    title = _chart_title(chart)
    plot_area = _child(chart, f"{_C}plotArea")
    series = list(plot_area.iter(f"{_C}ser")) if plot_area is not None else []
    if not series:
        return f"### Chart: {title}" if title else "### Chart"
    categories: dict[int, str] = {}
    rows = 0
    names: list[str] = []
    columns: list[dict[int, str]] = []
    for number, ser in enumerate(series[:CHART_MAX_SERIES], start=1):
        tx = _child(ser, f"{_C}tx")
        name = " ".join(" ".join(v.text or "" for v in tx.iter(f"{_C}v")).split()) if tx is not None else ""
        names.append(name or f"Series {number}")
        values, count = _cached_points(_either_child(ser, f"{_C}val", f"{_C}yVal"))
        labels, label_count = _cached_points(_either_child(ser, f"{_C}cat", f"{_C}xVal"))
        categories = categories or labels
        columns.append(values)
        rows = max(rows, count, label_count)
    if not title and len(series) == 1 and _child(chart, f"{_C}title") is not None:
        title = names[0]  # a title with no text of its own: Office shows the one series' name
    heading = f"### Chart: {title}" if title else "### Chart"
    shown = min(rows, CHART_MAX_CATEGORIES)
    table = [["Category", *names]]
    table.extend([categories.get(i, ""), *(column.get(i, "") for column in columns)] for i in range(shown))
    lines = [heading, markdown_table(table)]
    left_out = []
    if rows > shown:
        left_out.append(f"{rows - shown} more categories")
    if len(series) > CHART_MAX_SERIES:
        left_out.append(f"{len(series) - CHART_MAX_SERIES} more series")
    if left_out:
        lines.append(f"({' and '.join(left_out)} not shown)")
    return "\n\n".join(lines)


class _Charts:
    """The deck's chart parts as Markdown, each part read once however many frames show it."""

    def __init__(self, package: Package) -> None:
        self.package = package
        self.by_part: dict[str, str] = {}

    def markdown(self, part: str) -> str:
        if part not in self.by_part:
            root = self.package.xml(part)
            if root is None:
                self.by_part[part] = ""
            else:
                _mark_breaks(root)
                self.by_part[part] = _chart_markdown(root)
        return self.by_part[part]


class _Pictures:
    def __init__(self, package: Package, limit: int) -> None:
        self.package = package
        self.limit = limit
        self.images: list[ParsedImage] = []
        self.by_digest: dict[str, str] = {}

    def ref(self, pic: Any, rels: dict[str, tuple[str, str]], page: int) -> str | None:
        blip = _picture_blip(pic)
        rid = blip.get(f"{_R}embed") if blip is not None else None
        target = rels.get(rid or "")
        blob = self.package.blob(target[1]) if target else None
        if blob is None:
            return None
        kind = image_kind(blob)
        if kind is None:
            return None
        digest = hashlib.sha1(blob).hexdigest()
        if digest not in self.by_digest:
            ref = f"pptx-image-{len(self.images) + 1}.{kind[0]}"
            self.by_digest[digest] = ref
            self.images.append(ParsedImage(ref=ref, data=blob, mime_type=kind[1], page=page))
        return self.by_digest[digest]


def _slide_lines(
    el_tree: Any, rels: dict[str, tuple[str, str]], pictures: _Pictures, charts: _Charts, number: int
) -> tuple[list[str], str]:
    lines: list[str] = []
    title = ""
    fielded = _mark_breaks(el_tree)
    # chart parts are read only on a slide whose relationships name one
    chart_parts = {rid: target for rid, (kind, target) in rels.items() if kind == _CHART_REL}
    for el in _reading_order(list(_iter_shapes(el_tree))):
        tag = el.tag
        if tag == _SP:
            body = _child(el, _TX_BODY)
            if _is_title(el):
                text = " ".join(_frame_text(body).split())
                if text:
                    lines.append(f"# {text}")
                    title = title or text
                continue
            if body is not None:
                _body_lines(body, fielded, lines)
        elif tag == _GRAPHIC_FRAME:
            table = _table(el)
            if table is not None:
                rows = [
                    [_frame_text(_child(tc, _A_TX_BODY)) for tc in tr.iterchildren(_TC)]
                    for tr in table.iterchildren(_TR)
                ]
                lines.append(markdown_table(rows))
            elif chart_parts:
                target = next((chart_parts[rid] for rid in _chart_ref(el) if rid in chart_parts), None)
                chart = charts.markdown(target) if target else ""
                if chart:
                    lines.append(chart)
        elif (
            tag == _PIC
            and len(pictures.images) < pictures.limit
            and _picture_placeholder(el) is None  # a picture placeholder, as python-pptx
        ):
            ref = pictures.ref(el, rels, number)
            if ref is not None:
                name_el = _picture_name(el)
                alt = md_image_alt(name_el.get("name") or "" if name_el is not None else "")
                lines.append(f"![{alt}]({ref})")
    return lines, title


def _slide_text(
    package: Package, part: str, pictures: _Pictures, charts: _Charts, number: int
) -> tuple[str, str]:
    """A slide's Markdown after its number line (shapes, then notes, each after a blank line), and its
    title."""
    root = package.xml(part)
    tree = _shape_tree(root) if root is not None else None
    rels = package.rels(part)
    lines = [""]
    title = ""
    if tree is not None:
        shape_lines, title = _slide_lines(tree, rels, pictures, charts, number)
        lines.extend(shape_lines)
    notes_part = next((target for kind, target in rels.values() if kind == _NOTES_REL), None)
    notes = _notes_text(package, notes_part).strip() if notes_part else ""
    if notes:
        lines.append("### Notes:\n" + notes)
    return "\n\n".join(lines) if len(lines) > 1 else "", title


def parse_pptx(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    # half the marks a docx part may hold: a slide's chart is parsed while the slide's shapes are still held
    # (a slide and a chart each at the docx limit peaked at 2.6 GB; real slides hold ~10 k marks)
    package = Package(
        request.data,
        "PowerPoint",
        ctx.limits.zip_max_member_uncompressed,
        ctx.package_parts,
        mark_limit=ctx.limits.xml_part_max_marks // 2,
    )
    try:
        main = package.main_part()
        presentation = package.xml(main)
        if presentation is None:
            raise parse_failed("The PowerPoint file is damaged or not a .pptx presentation.")
        main_rels = package.rels(main)
        slide_parts = []
        for sld in presentation.iterfind(f"./{_P}sldIdLst/{_P}sldId"):
            rel = main_rels.get(sld.get(f"{_R}id") or "")
            if rel and rel[0] == _SLIDE_REL:
                slide_parts.append(rel[1])
        pictures = _Pictures(package, ctx.limits.max_images)
        charts = _Charts(package)
        parts: list[str] = []
        title = ""
        budget = MarkdownBudget(ctx.limits)
        # a slide part the list names again is read once: its text (after the number), its title
        read: dict[str, tuple[str, str]] = {}
        for number, part in enumerate(slide_parts, start=1):
            ctx.check_time("the PowerPoint file")
            if part not in read:
                read[part] = _slide_text(package, part, pictures, charts, number)
            text, slide_title = read[part]
            title = title or slide_title
            parts.append(budget.add(f"<!-- Slide number: {number} -->{text}"))
    finally:
        package.close()
    markdown = "\n\n".join(parts).strip()
    return ReadResult(
        markdown=markdown + "\n" if markdown else "",
        images=pictures.images,
        title=title[:300],
        metadata={"slides": len(parts)},
    )
