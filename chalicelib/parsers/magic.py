"""What a file's first bytes say it is, for the families the document reader names by content: legacy
Office (an OLE compound file) and audio. `base.sniff` and the URL importer read them."""

from __future__ import annotations

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
#: ISO media brands of audio files (an mp4, mov, 3gp or HEIC names none: video is not imported)
_AUDIO_BRANDS = frozenset({b"M4A ", b"M4B ", b"M4P ", b"F4A ", b"F4B "})


def audio_kind(data: bytes) -> str:
    """mp3, flac, ogg, wav or m4a from the magic bytes; '' for anything else."""
    head = data[:12]
    if head[:3] == b"ID3" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "mp3"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[4:8] == b"ftyp":  # its major brand, or one of the brands it is compatible with, says audio
        size = int.from_bytes(data[:4], "big")
        brands = [data[i : i + 4] for i in range(8, min(size, 64), 4) if i != 12]
        return "m4a" if any(brand in _AUDIO_BRANDS for brand in brands) else ""
    return {b"fLaC": "flac", b"OggS": "ogg"}.get(head[:4], "")


def is_iso_media(data: bytes) -> bool:
    """An ISO base media file (mp4, m4a, mov, 3gp, HEIC...): its `ftyp` box first."""
    return data[4:8] == b"ftyp"


#: the stream each legacy Office file keeps its text in, as its directory names it
_OLE_STREAMS = (("WordDocument", "doc"), ("PowerPoint Document", "ppt"), ("Workbook", "xls"), ("Book", "xls"))
_DIRECTORY_ENTRY = 128  # bytes; entries start at multiples of it (sectors are 512 or 4,096 bytes)
_NAME_LENGTH_AT = 64  # the entry's name length in bytes, terminator included (UTF-16LE)


def ole_kind(data: bytes) -> str:
    """doc, ppt or xls for an OLE compound file, by the text stream its directory names; '' for another.
    A file that embeds another (a workbook in a document) names both streams: the document's own comes first
    in its directory, before the embedded object's storage, so the earliest entry decides."""
    if not data.startswith(OLE_MAGIC):
        return ""
    first: tuple[int, str] | None = None
    for stream, kind in _OLE_STREAMS:
        name = stream.encode("utf-16-le")
        length = (len(name) + 2).to_bytes(2, "little")
        at = data.find(name)
        while at != -1 and (first is None or at < first[0]):
            field = data[at + _NAME_LENGTH_AT : at + _NAME_LENGTH_AT + 2]
            if at % _DIRECTORY_ENTRY == 0 and field == length:
                first = (at, kind)
                break
            at = data.find(name, at + 1)
    return first[1] if first else ""
