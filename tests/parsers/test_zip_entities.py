"""The XML entity check of a zip container reads each XML part whole, not only its first bytes."""

from __future__ import annotations

import io
import zipfile

import pytest

from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.base import Limits, open_zip_checked
from chalicelib.parsers.guards import check_zip


def _zip(parts: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in parts.items():
            zf.writestr(name, data)
    return buffer.getvalue()


PADDING = b"<!-- " + b"x" * 200_000 + b" -->"


@pytest.mark.parametrize(
    "xml",
    [
        b'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY a "b">]><d/>',
        b'<?xml version="1.0"?>' + PADDING + b'<!DOCTYPE d [<!ENTITY a "b">]><d/>',
        # the declaration cut across the reader's pieces (64 KiB): found all the same
        b"<d>" + b"y" * (65536 - 3 - 4) + b'<!ENTITY a "b"></d>',
        b"<d>" + PADDING + b'<!entity lower "case"></d>',
    ],
)
def test_an_entity_declaration_anywhere_in_a_part_is_refused(xml: bytes) -> None:
    data = _zip({"[Content_Types].xml": b"<Types/>", "word/document.xml": xml})
    with pytest.raises(PermanentStageError, match="entity declarations"):
        open_zip_checked(data, Limits(), "docx")
    # the reader's preflight finds it in its single inflating pass (it skips open_zip_checked's own scan)
    with pytest.raises(PermanentStageError, match="entity declarations"):
        check_zip(data, Limits(), "Word")


def test_a_long_part_without_declarations_opens() -> None:
    data = _zip({"word/document.xml": b"<d>" + PADDING + b"<p>ENTITY is a word here</p></d>"})
    assert open_zip_checked(data, Limits(), "docx").namelist() == ["word/document.xml"]
