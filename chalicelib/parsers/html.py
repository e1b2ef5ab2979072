"""HTML → Markdown on the lexbor parser (selectolax): main content only, headings, lists, tables, code,
links and images (data-URI images stay inline for the ImageResolver). Also MHTML and EPUB containers."""

from __future__ import annotations

import email
import email.policy
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any
from urllib.parse import unquote

from selectolax.lexbor import LexborHTMLParser, LexborNode

from chalicelib.domain.charsets import encodable, text_codec
from chalicelib.domain.urls import joined
from chalicelib.parsers.base import (
    Limits,
    MarkdownBudget,
    ParseContext,
    image_kind,
    md_image_alt,
    open_zip_checked,
    parse_failed,
    read_member,
)
from chalicelib.parsers.html_depth import measure_html
from chalicelib.parsers.list_numbers import list_numbering
from chalicelib.parsers.markdown_tables import DEFAULT_MAX_CELLS, check_padded_size
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult

DROP_TAGS = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "iframe",
        "nav",
        "footer",
        "form",
        "button",
        "select",
        "input",
        "textarea",
        "head",
        "object",
        "embed",
        "canvas",
        "audio",
        "video",
        "map",
        "link",
        "meta",
    }
)
DROP_MARKERS = frozenset(
    {
        "sidebar",
        "sphinxsidebar",
        "related",
        "navigation",
        "navbar",
        "nav",
        "footer",
        "breadcrumb",
        "breadcrumbs",
        "skip-link",
        "headerlink",
        "cookie-banner",
        "mobile-nav",
    }
)
#: an <aside> is a sidebar (dropped) unless its role, class or epub:type says it is the page's own text:
#: footnotes (Sphinx, DPUB-ARIA, EPUB 3), notes and admonitions
ASIDE_CONTENT_MARKERS = frozenset(
    {
        "note",
        "footnote",
        "footnote-list",
        "footnotes",
        "endnote",
        "endnotes",
        "rearnote",
        "rearnotes",
        "doc-footnote",
        "doc-endnote",
        "doc-endnotes",
        "doc-notice",
        "doc-tip",
        "admonition",
        "tip",
        "warning",
        "caution",
        "important",
    }
)
BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "section",
        "article",
        "main",
        "header",
        "body",
        "html",
        "center",
        "address",
        "details",
        "summary",
        "figure",
        "figcaption",
        "dl",
        "fieldset",
        "caption",
    }
)
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
MAX_DEPTH = 400
_WS = re.compile(r"[ \t\r\n\f\v]+")
_MANY_NL = re.compile(r"\n{3,}")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w-]+)""", re.IGNORECASE)


def decode_html(data: bytes, charset: str | None = None) -> str:
    """The page's text in the charset its server (`charset`) or its <meta> names, when that is a text charset
    the bytes are valid in; otherwise as text of an unknown charset is read (`decode_text`)."""
    from chalicelib.parsers.simple import decode_text

    candidates = [charset] if charset else []
    match = _META_CHARSET.search(data[:4096])
    if match:
        candidates.append(match.group(1).decode("ascii", "ignore"))
    for named in candidates:
        codec = text_codec(named)
        if codec is None:  # unknown, or a codec that is no text charset (punycode, undefined, idna…)
            continue
        try:
            text = data.decode(codec)
        except UnicodeDecodeError:
            continue
        if encodable(text):  # utf-7 spells lone surrogates
            return text
    return decode_text(data)


def page_title(html: str) -> str:
    tree = LexborHTMLParser(html[:200_000])
    node = tree.css_first("title")
    title = _WS.sub(" ", node.text()).strip() if node is not None else ""
    if not title:
        h1 = tree.css_first("h1")
        title = _WS.sub(" ", h1.text()).strip() if h1 is not None else ""
    return title[:300]


@dataclass
class HtmlMarkdown:
    markdown: str
    title: str = ""
    image_srcs: list[str] = field(default_factory=list)


class _Renderer:
    def __init__(
        self,
        base_url: str,
        src_map: dict[str, str] | None,
        check_time: Callable[[], None] | None = None,
        max_cells: int = DEFAULT_MAX_CELLS,
    ) -> None:
        self.base_url = base_url
        self.max_cells = max_cells
        self.src_map = src_map or {}
        self.image_srcs: list[str] = []
        self.check_time = check_time
        self.nodes = 0

    # Inline rendering returns text; blocks are separated by blank lines and normalised at the end.
    def render(self, node: LexborNode, depth: int = 0, pre: bool = False) -> str:
        parts: list[str] = []
        child = node.child
        while child is not None:
            parts.append(self.node(child, depth + 1, pre))
            child = child.next
        return "".join(parts)

    def node(self, node: LexborNode, depth: int, pre: bool) -> str:
        self.nodes += 1
        if self.check_time is not None and self.nodes % 2048 == 0:
            self.check_time()
        tag = node.tag or ""
        if tag == "-text":
            text = node.text_content or ""
            return text if pre else _WS.sub(" ", text)
        if tag.startswith("-") or tag in DROP_TAGS:
            return ""
        if depth > MAX_DEPTH:
            return _WS.sub(" ", node.text(deep=True))
        attrs = node.attributes
        marker = (
            f"{attrs.get('class') or ''} {attrs.get('id') or ''} {attrs.get('role') or ''}".lower().split()
        )
        if marker and DROP_MARKERS.intersection(marker):
            return ""
        if tag == "aside" and not ASIDE_CONTENT_MARKERS.intersection(
            marker + (attrs.get("epub:type") or "").lower().split()
        ):
            return ""
        hidden = "hidden" in attrs and (attrs["hidden"] or "").lower() != "until-found"  # that one is found
        if hidden or "display:none" in (attrs.get("style") or "").replace(" ", ""):
            return ""
        if tag in HEADINGS:
            text = _WS.sub(" ", self.render(node, depth, pre)).strip()
            return f"\n\n{'#' * HEADINGS[tag]} {text}\n\n" if text else ""
        if tag in BLOCK_TAGS or tag == "aside":
            return f"\n\n{self.render(node, depth, pre)}\n\n"
        if tag == "br":
            return "\n" if pre else "  \n"
        if tag == "hr":
            return "\n\n---\n\n"
        if tag == "pre":
            code = node.text(deep=True).strip("\n")
            lang = ""
            parent_cls = (node.parent.attributes.get("class") or "") if node.parent else ""
            cls = f"{attrs.get('class') or ''} {parent_cls}"
            m = re.search(r"(?:language|highlight|lang)-([\w+-]+)", cls)
            if m:
                lang = m.group(1)
            return f"\n\n```{lang}\n{code}\n```\n\n"
        if tag == "code" or tag in ("kbd", "samp", "tt"):
            text = node.text(deep=True)
            if pre:
                return text
            text = _WS.sub(" ", text).strip()
            return f"`{text}`" if text else ""
        if tag in ("strong", "b"):
            text = self.render(node, depth, pre).strip()
            return f"**{text}**" if text else ""
        if tag in ("em", "i", "cite"):
            text = self.render(node, depth, pre).strip()
            return f"*{text}*" if text else ""
        if tag == "a":
            text = self.render(node, depth, pre).strip()
            href = (attrs.get("href") or "").strip()
            if not text:
                return ""
            if not href or href.startswith(("#", "javascript:", "mailto:")) or "](" in text or "\n" in text:
                return text
            return f"[{text}]({self._url(href)})"
        if tag == "img":
            src = (attrs.get("src") or attrs.get("data-src") or "").strip()
            if not src:
                return ""
            alt = md_image_alt(attrs.get("alt") or "")
            target = self.src_map.get(src) or (src if src.startswith("data:") else self._url(src))
            self.image_srcs.append(target)
            return f"![{alt}]({target})"
        if tag in ("ul", "ol"):
            return f"\n\n{self.list(node, depth, ordered=tag == 'ol')}\n\n"
        if tag == "li":
            return f"\n- {self.render(node, depth, pre).strip()}\n"
        if tag == "dt":
            return f"\n\n**{self.render(node, depth, pre).strip()}**\n"
        if tag == "dd":
            return f"\n: {self.render(node, depth, pre).strip()}\n\n"
        if tag == "blockquote":
            inner = _MANY_NL.sub("\n\n", self.render(node, depth, pre)).strip()
            return "\n\n" + "\n".join(f"> {line}" if line else ">" for line in inner.split("\n")) + "\n\n"
        if tag == "table":
            return f"\n\n{self.table(node, depth)}\n\n"
        return self.render(node, depth, pre)

    def _url(self, href: str) -> str:
        if self.base_url and not href.startswith(("data:", "http://", "https://")):
            return joined(self.base_url, href)
        return href

    def list(self, node: LexborNode, depth: int, ordered: bool) -> str:
        lines: list[str] = []
        numbering = list_numbering(node) if ordered else None
        n = numbering.first - numbering.step if numbering else 0
        child = node.child
        while child is not None:
            if child.tag == "li":
                n = numbering.number_of(child, n) if numbering else 0
                body = _MANY_NL.sub("\n\n", self.render(child, depth + 1)).strip()
                prefix = numbering.prefix(n) if numbering else "- "
                pad = " " * (2 if prefix.startswith("- ") else len(prefix))  # a list item's content column
                body_lines = body.split("\n")
                lines.append(prefix + body_lines[0])
                lines.extend((pad + line) if line.strip() else "" for line in body_lines[1:])
            elif child.tag in ("ul", "ol"):
                lines.append(self.list(child, depth + 1, child.tag == "ol"))
            child = child.next
        return "\n".join(lines)

    def table(self, node: LexborNode, depth: int) -> str:
        """The table's own rows (a nested table is rendered inside its cell), its caption a line above."""
        rows: list[list[str]] = []
        caption = ""
        child = node.child
        while child is not None and not caption:
            if child.tag == "caption":
                caption = _WS.sub(" ", self.render(child, depth + 1)).strip()
            child = child.next
        below: dict[int, int] = {}  # column → rows below this one that a rowspan above still covers
        for tr in node.css("tr"):
            # Skip rows of nested tables: their nearest table ancestor is not this one.
            parent = tr.parent
            while parent is not None and parent.tag != "table":
                parent = parent.parent
            if parent is None or parent.mem_id != node.mem_id:
                continue
            row: list[str] = []
            spans_down: dict[int, int] = {}
            cell = tr.child
            while cell is not None:
                if cell.tag in ("td", "th"):
                    while below.get(len(row), 0) > 0:  # the cell of a row above spans down here
                        row.append("")
                    text = _WS.sub(" ", self.render(cell, depth + 1).replace("|", "\\|")).strip()
                    colspan = _span(cell, "colspan", 1, 50)
                    rowspan = _span(cell, "rowspan", 65534, 65534)  # 0: to the end (HTML's limit)
                    if rowspan > 1:
                        spans_down.update(dict.fromkeys(range(len(row), len(row) + colspan), rowspan - 1))
                    row.append(text)
                    row.extend([""] * (colspan - 1))
                cell = cell.next
            if row:
                rows.append(row)
            below = {col: n - 1 for col, n in below.items() if n > 1} | spans_down
        if not rows:
            return caption
        if len(rows) == 1 and len(rows[0]) == 1:
            return f"{caption}\n\n{rows[0][0]}" if caption else rows[0][0]
        width = max(len(r) for r in rows)
        if any(len(r) != width for r in rows):
            check_padded_size(len(rows), width, self.max_cells)
        out = ["| " + " | ".join(r + [""] * (width - len(r))) + " |" for r in rows]
        out.insert(1, "|" + "---|" * width)
        if caption:
            out.insert(0, f"{caption}\n")
        return "\n".join(out)


def _span(cell: LexborNode, name: str, zero: int, cap: int) -> int:
    """A cell's colspan or rowspan: 1 when absent or not a number, `zero` for 0, at most `cap`."""
    value = (cell.attributes.get(name) or "").strip()
    if not re.fullmatch(r"[0-9]{1,9}", value):
        return 1
    return min(int(value), cap) if int(value) else zero


def _main_node(tree: LexborHTMLParser) -> LexborNode | None:
    for selector in ("main", "[role=main]", "article", "div.body", "#content", "#main-content", "body"):
        found = tree.css(selector)
        if len(found) == 1 and len(found[0].text(deep=True).strip()) > 200:
            return found[0]
    return tree.body or tree.root


_FENCE = re.compile(r"[ ]*(`{3,}|~{3,})(.*)")
_INDENT = re.compile(r"[ ]+(?=[^ \-\d>|`])")


def _fenced_lines(lines: list[str]) -> set[int]:
    """The indexes of the lines of closed fenced code blocks, fences included (a fence never closed, such
    as a row of tildes in prose, fences nothing)."""
    inside: set[int] = set()
    start, fence = -1, ""
    for index, line in enumerate(lines):
        match = _FENCE.fullmatch(line)
        if match is None:
            continue
        marker, info = match.groups()
        if not fence:
            if not (marker[0] == "`" and "`" in info):  # a backtick fence's info has no backtick
                start, fence = index, marker
        elif marker.startswith(fence) and not info.strip():
            inside.update(range(start, index + 1))
            fence = ""
    return inside


def _tidy(markdown: str) -> str:
    """Trailing spaces (save a hard break's two), runs of blank lines and the indent that inline whitespace
    leaves before a line go; the lines of a fenced code block are kept as they are."""
    lines = markdown.split("\n")
    fenced = _fenced_lines(lines)
    out: list[str] = []
    for index, line in enumerate(lines):
        if index in fenced:
            out.append(line)
            continue
        line = line if line.endswith("  ") and line.strip() else line.rstrip()
        if not line and out and not out[-1]:
            continue  # one blank line between blocks
        indent = _INDENT.match(line)
        out.append(line[indent.end() :] if indent else line)
    return "\n".join(out).strip() + "\n"


def html_to_markdown(
    html: str,
    *,
    base_url: str = "",
    src_map: dict[str, str] | None = None,
    main_only: bool = True,
    ctx: ParseContext | None = None,
) -> HtmlMarkdown:
    limits = ctx.limits if ctx is not None else Limits()
    # before lexbor builds a tree (measured already when the upload was UTF-8: then a cache hit)
    measure_html(html.encode("utf-8", "replace"), limits.max_html_depth, ctx.check_time if ctx else None)
    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = _WS.sub(" ", title_node.text()).strip() if title_node is not None else ""
    root = _main_node(tree) if main_only else (tree.body or tree.root)
    renderer = _Renderer(
        base_url, src_map, ctx.check_time if ctx is not None else None, limits.max_sheet_cells
    )
    body = renderer.render(root) if root is not None else ""
    return HtmlMarkdown(_tidy(body), title, renderer.image_srcs)


# ---------------------------------------------------------------- engines' format functions


def parse_html(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    html = decode_html(request.data)
    converted = html_to_markdown(html, base_url=request.url, ctx=ctx)
    return ReadResult(markdown=converted.markdown, title=converted.title)


def parse_mhtml(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    try:
        msg = email.message_from_bytes(request.data, policy=email.policy.default)
    except Exception as exc:  # the email parser raises many types on garbage
        raise parse_failed("The MHTML file is not a readable MIME archive.") from exc
    html_part: EmailMessage | None = None
    images: list[ParsedImage] = []
    src_map: dict[str, str] = {}
    for part in msg.walk():
        if part.is_multipart():
            continue
        ctype = part.get_content_type()
        payload: Any = part.get_payload(decode=True) or b""
        if ctype == "text/html" and html_part is None:
            html_part = part
        elif ctype.startswith("image/") and len(images) < ctx.limits.max_images * 4:
            kind = image_kind(payload)
            if kind is None:
                continue
            location = str(part.get("Content-Location", "") or "")
            cid = str(part.get("Content-ID", "") or "").strip("<>")
            ref = f"mhtml-image-{len(images) + 1}.{kind[0]}"
            images.append(ParsedImage(ref=ref, data=payload, mime_type=kind[1]))
            if location:
                src_map[location] = ref
            if cid:
                src_map[f"cid:{cid}"] = ref
    if html_part is None:
        raise parse_failed("The MHTML file has no HTML part.")
    raw = html_part.get_payload(decode=True) or b""
    html = decode_html(raw if isinstance(raw, bytes) else str(raw).encode(), html_part.get_content_charset())
    base = str(html_part.get("Content-Location", "") or msg.get("Snapshot-Content-Location", "") or "")
    # Relative srcs resolve against the page before lookup, as browsers stored them by absolute URL.
    resolved_map = dict(src_map)
    converted = _convert_with_map(html, base, resolved_map, ctx)
    used = set(converted.image_srcs)
    return ReadResult(
        markdown=converted.markdown, title=converted.title, images=[img for img in images if img.ref in used]
    )


def _convert_with_map(html: str, base: str, src_map: dict[str, str], ctx: ParseContext) -> HtmlMarkdown:
    measure_html(html.encode("utf-8", "replace"), ctx.limits.max_html_depth, ctx.check_time)
    tree = LexborHTMLParser(html)
    if base:
        for img in tree.css("img"):
            src = img.attributes.get("src") or ""
            absolute = joined(base, src)
            if src and src not in src_map and absolute in src_map:
                src_map[src] = src_map[absolute]
    return html_to_markdown(tree.html or html, base_url=base, src_map=src_map, ctx=ctx)


_OPF_NS = {
    "opf": "http://www.idpf.org/2007/opf",
    "dc": "http://purl.org/dc/elements/1.1/",
    "c": "urn:oasis:names:tc:opendocument:xmlns:container",
}


def _xml(data: bytes) -> Any:
    from defusedxml import ElementTree

    return ElementTree.fromstring(data)


def parse_epub(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    import posixpath

    from defusedxml.common import DefusedXmlException

    zf = open_zip_checked(request.data, ctx.limits, "EPUB")
    cap = ctx.limits.zip_max_member_uncompressed
    names = set(zf.namelist())
    try:
        container = _xml(read_member(zf, "META-INF/container.xml", cap))
        rootfile = container.find(".//c:rootfile", _OPF_NS)
        opf_path = rootfile.get("full-path") if rootfile is not None else None
        if not opf_path or opf_path not in names:
            raise parse_failed("The EPUB file has no package document.")
        opf = _xml(read_member(zf, opf_path, cap))
    except (KeyError, SyntaxError, DefusedXmlException) as exc:
        raise parse_failed("The EPUB file is damaged (its package description cannot be read).") from exc
    base_dir = posixpath.dirname(opf_path)
    title_el = opf.find(".//dc:title", _OPF_NS)
    title = (title_el.text or "").strip() if title_el is not None else ""
    manifest = {
        item.get("id"): item for item in opf.findall(".//opf:manifest/opf:item", _OPF_NS) if item.get("id")
    }
    spine = [ref.get("idref") for ref in opf.findall(".//opf:spine/opf:itemref", _OPF_NS)]
    sections: list[str] = []
    images: list[ParsedImage] = []
    stored: dict[str, str] = {}
    budget = MarkdownBudget(ctx.limits)
    converted_paths: dict[str, str] = {}  # a chapter the spine lists again is converted once
    for idref in spine:
        ctx.check_time("the EPUB file")
        item = manifest.get(idref)
        if item is None or "html" not in (item.get("media-type") or ""):
            continue
        path = posixpath.normpath(posixpath.join(base_dir, unquote(item.get("href") or "")))
        if path not in names:
            continue
        if path not in converted_paths:
            converted_paths[path] = _epub_chapter(zf, path, names, images, stored, ctx)
        if converted_paths[path]:
            sections.append(budget.add(converted_paths[path]))
    zf.close()
    markdown = "\n\n".join(sections)
    if title and not markdown.startswith("# "):
        markdown = f"# {title}\n\n{markdown}"
    return ReadResult(markdown=markdown + "\n", title=title, images=images)


def _epub_chapter(
    zf: zipfile.ZipFile,
    path: str,
    names: set[str],
    images: list[ParsedImage],
    stored: dict[str, str],
    ctx: ParseContext,
) -> str:
    """One spine document as Markdown (stripped); its images are added to `images`, `stored` maps the
    package paths kept so far to their refs."""
    import posixpath

    cap = ctx.limits.zip_max_member_uncompressed
    html = decode_html(read_member(zf, path, cap))
    src_map: dict[str, str] = {}
    for img_src in _img_srcs(html):
        if img_src.startswith(("http:", "https:", "data:")):
            continue
        img_path = posixpath.normpath(posixpath.join(posixpath.dirname(path), unquote(img_src)))
        if img_path in stored:
            src_map[img_src] = stored[img_path]
            continue
        if img_path not in names or len(images) >= ctx.limits.max_images:
            continue
        blob = read_member(zf, img_path, cap)
        kind = image_kind(blob)
        if kind is None:
            continue
        ref = f"epub-images/{posixpath.basename(img_path)}"
        stored[img_path] = ref
        src_map[img_src] = ref
        images.append(ParsedImage(ref=ref, data=blob, mime_type=kind[1]))
    return html_to_markdown(html, src_map=src_map, main_only=False, ctx=ctx).markdown.strip()


_IMG_TAG = re.compile(r"<img[^>]++>", re.IGNORECASE)
_IMG_SRC = re.compile(r"""src\s*=\s*["']([^"']+)""", re.IGNORECASE)


def _img_srcs(html: str) -> list[str]:
    """The (last) src of every <img> tag, read inside the tag; none after the last ">" (an unclosed `<img`
    would be scanned to the end once per start)."""
    closed = html[: html.rfind(">") + 1]
    return [srcs[-1] for tag in _IMG_TAG.findall(closed) if (srcs := _IMG_SRC.findall(tag[4:]))]
