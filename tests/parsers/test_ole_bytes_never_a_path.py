"""olefile reads bytes shorter than an OLE file's minimum (1,536) as a file name: a tiny upload that spells
the path of a file on the server must not make a legacy reader open that file."""

from __future__ import annotations

from pathlib import Path

import pytest
from project_paths import CORPUS

from chalicelib.parsers.doc_notes import doc_notes
from chalicelib.parsers.ppt import read_ppt_natively

pytest.importorskip("olefile")


def test_a_short_ppt_upload_naming_a_server_file_is_not_read_from_disk() -> None:
    on_disk = Path(CORPUS, "python-howto-sorting.ppt")
    assert read_ppt_natively(on_disk.read_bytes()) is not None  # the file itself reads
    assert read_ppt_natively(str(on_disk).encode()) is None


def test_a_short_doc_upload_naming_a_server_file_is_not_read_from_disk() -> None:
    on_disk = Path(__file__).resolve().parents[1] / "fixtures" / "doc" / "notes.doc"
    assert doc_notes(on_disk.read_bytes())  # the file itself has notes
    assert doc_notes(str(on_disk).encode()) == []
