"""Office Open XML packages read part by part with lxml: the parts a reader needs, their relationships
resolved as OPC says (targets relative to the source part's folder), each part parsed once with a parser that
resolves no entity and loads no DTD. python-pptx and python-docx build a proxy object per element and load
every part of the package up front, which was most of a .pptx's parse time; reading the XML directly gives
the same text. The reader hands over the package's members (ParseContext.package_parts: guards.PackageParts,
which checks the central directory's claims before any engine runs and inflates each part, under the caps and
with its entity scan, when it is read) so that no part is inflated twice and unread parts not at all."""

from __future__ import annotations

import io
import posixpath
import zipfile
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from lxml import etree

from chalicelib.parsers.base import ZIP_DIRECTORY_ERRORS, ZIP_MEMBER_ERRORS, Limits, parse_failed, read_member

R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "{http://schemas.openxmlformats.org/package/2006/relationships}Relationship"
OFFICE_DOCUMENT = f"{R_NS}/officeDocument"
# ISO 29500 Strict ("Strict Open XML" in Word's Save As) names the same things under other URIs: relationship
# types are read as their transitional twins, and a Strict part's namespaces are mapped (`transitional`) so
# that one set of readers serves both.
_STRICT_REL_TYPES = "http://purl.oclc.org/ooxml/officeDocument/relationships/"
STRICT_NAMESPACES = (
    (
        b"http://purl.oclc.org/ooxml/wordprocessingml/main",
        b"http://schemas.openxmlformats.org/wordprocessingml/2006/main",
    ),
    (b"http://purl.oclc.org/ooxml/officeDocument/relationships", R_NS.encode()),
    (
        b"http://purl.oclc.org/ooxml/officeDocument/math",
        b"http://schemas.openxmlformats.org/officeDocument/2006/math",
    ),
    (b"http://purl.oclc.org/ooxml/drawingml/main", b"http://schemas.openxmlformats.org/drawingml/2006/main"),
    (
        b"http://purl.oclc.org/ooxml/drawingml/wordprocessingDrawing",
        b"http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing",
    ),
    (
        b"http://purl.oclc.org/ooxml/drawingml/picture",
        b"http://schemas.openxmlformats.org/drawingml/2006/picture",
    ),
)
_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def int_attribute(value: str | None, default: int) -> int:
    """An integer attribute as written, or `default` when it is absent or not an integer: a value the
    schema does not allow costs that value, not the document."""
    try:
        return int(value) if value else default
    except ValueError:
        return default


@lru_cache(maxsize=4096)
def _part_name(folder: str, target: str) -> str:
    """A relationship's target as a part name (OPC: relative to the source part's folder). Cached: every
    slide names the same layouts, masters and notes folders."""
    name = target.lstrip("/") if target.startswith("/") else posixpath.join(folder, target)
    return posixpath.normpath(name)


@lru_cache(maxsize=4096)
def _rels_part(part: str) -> tuple[str, str]:
    """(the part's folder, the name of its relationships part)."""
    folder, base = posixpath.split(part)
    return folder, posixpath.join(folder, "_rels", base + ".rels")


class Package:
    """An OOXML package: parts by name, relationships by source part. Given the members the reader's
    preflight already inflated and checked (ParseContext.package_parts), it reads the XML parts and images
    from those, and opens the zip only for a member the preflight did not keep; else it opens the zip and
    inflates each part it is asked for. A part with more markup than `mark_limit` (Limits.xml_part_max_marks)
    is refused before it is parsed."""

    def __init__(
        self,
        data: bytes,
        what: str,
        member_limit: int,
        parts: Mapping[str, bytes | None] | None = None,
        mark_limit: int = Limits.xml_part_max_marks,
    ) -> None:
        self.data = data
        self.what = what
        self.member_limit = member_limit
        self.mark_limit = mark_limit
        self.parts = parts
        self.zip: zipfile.ZipFile | None = None
        self.rels_by_bytes: dict[tuple[str, bytes], dict[str, tuple[str, str]]] = {}
        self.names = set(parts) if parts is not None else set(self.opened().namelist())

    def opened(self) -> zipfile.ZipFile:
        """The package's zip, opened at the first read (a reader streaming a large part reads from it too)."""
        if self.zip is None:
            try:
                self.zip = zipfile.ZipFile(io.BytesIO(self.data))
            except ZIP_DIRECTORY_ERRORS as exc:
                raise parse_failed(f"The {self.what} file is damaged or not a valid package.") from exc
        return self.zip

    def close(self) -> None:
        if self.zip is not None:
            self.zip.close()

    def blob(self, name: str) -> bytes | None:
        if name not in self.names:
            return None
        if self.parts is not None and (kept := self.parts[name]) is not None:
            return kept
        try:
            return read_member(self.opened(), name, self.member_limit)
        except ZIP_MEMBER_ERRORS as exc:
            raise parse_failed(f"The {self.what} file is damaged ({name} cannot be read).") from exc

    def xml(self, name: str) -> Any | None:
        """The part's root element, or None when the package has no such part."""
        raw = self.blob(name)
        return None if raw is None else self._parsed(name, raw)

    def _parsed(self, name: str, raw: bytes) -> Any:
        # the tree's size told by the bytes (two C scans): past the limit, lxml would take gigabytes
        marks = raw.count(b"<") + raw.count(b"=")
        if marks > self.mark_limit:
            raise parse_failed(
                f"The {self.what} file's part {name} has {marks:,} XML tags and attributes, more than the "
                f"{self.mark_limit:,} one part may have to be read in memory; it looks like a zip bomb (split a "
                "real document into smaller files)."
            )
        try:
            return etree.fromstring(raw, _PARSER)
        except etree.XMLSyntaxError as exc:
            raise parse_failed(f"The {self.what} file is damaged ({name} is not well-formed XML).") from exc

    def rels(self, part: str) -> dict[str, tuple[str, str]]:
        """rId → (relationship type, target part name) of the part's internal relationships (a new dict)."""
        folder, name = _rels_part(part)
        raw = self.blob(name)
        if raw is None:
            return {}
        # parts in one folder whose .rels are the same bytes have the same relationships (a deck's slides
        # often name only their layout): each such .rels is parsed and walked once
        key = (folder, raw)
        known = self.rels_by_bytes.get(key)
        if known is None:
            known = {}
            for rel in self._parsed(name, raw).iter(_PKG_REL):
                if rel.get("TargetMode") == "External":
                    continue
                kind = rel.get("Type") or ""
                if kind.startswith(_STRICT_REL_TYPES):
                    kind = f"{R_NS}/{kind[len(_STRICT_REL_TYPES) :]}"
                known[rel.get("Id") or ""] = (kind, _part_name(folder, rel.get("Target") or ""))
            self.rels_by_bytes[key] = known
        return known.copy()

    def main_part(self) -> str:
        for rel_type, target in self.rels("").values():
            if rel_type == OFFICE_DOCUMENT:
                return target
        raise parse_failed(f"The {self.what} file has no main document part.")


def transitional(root: Any) -> Any:
    """A part's tree with the Strict namespaces (STRICT_NAMESPACES) it uses renamed to their transitional
    twins, or the tree itself when its root is not in a Strict namespace (a look at one name: Strict files
    are rare, and only they pay for the second parse)."""
    if not root.tag.startswith("{http://purl.oclc.org/ooxml/"):
        return root
    raw = etree.tostring(root)
    for strict, twin in STRICT_NAMESPACES:
        raw = raw.replace(strict, twin)
    return etree.fromstring(raw, _PARSER)
