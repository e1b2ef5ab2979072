"""What a file's first bytes say it is, for the families the document reader names by content: legacy
Office (an OLE compound file) and audio. `base.sniff` and the URL importer read them."""

from __future__ import annotations

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"


def audio_kind(data: bytes) -> str:
    """mp3, flac, ogg, wav or m4a from the magic bytes; '' for anything else."""
    head = data[:12]
    if head[:3] == b"ID3" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "mp3"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    return {b"fLaC": "flac", b"OggS": "ogg"}.get(head[:4], "m4a" if head[4:8] == b"ftyp" else "")


#: the stream each legacy Office file keeps its text in, as its directory names it (UTF-16LE), by priority:
#: a document that embeds a workbook holds both names
_OLE_STREAMS = (("WordDocument", "doc"), ("PowerPoint Document", "ppt"), ("Workbook", "xls"), ("Book", "xls"))


def ole_kind(data: bytes) -> str:
    """doc, ppt or xls for an OLE compound file, by the text stream its directory names; '' for another."""
    if not data.startswith(OLE_MAGIC):
        return ""
    for stream, kind in _OLE_STREAMS:
        if stream.encode("utf-16-le") in data:
            return kind
    return ""
