"""The one table of importable extensions, shared by every entry path (upload, presigned, URL, worker)."""

from __future__ import annotations

import posixpath

from chalicelib.domain.errors import BadRequest

IMPORTABLE_EXTENSIONS: frozenset[str] = frozenset(
    [
        "pdf",
        "txt",
        "docx",
        "doc",
        "epub",
        "html",
        "htm",
        "mhtml",
        "md",
        "markdown",
        "png",
        "jpg",
        "jpeg",
        "gif",
        "csv",
        "xlsx",
        "xls",
        "pptx",
        "ppt",
        "json",
        "mp3",
        "wav",
        "m4a",
        "flac",
        "ogg",
    ]
)
IMAGE_EXTENSIONS: frozenset[str] = frozenset({"png", "jpg", "jpeg", "gif"})
AUDIO_EXTENSIONS: frozenset[str] = frozenset({"mp3", "wav", "m4a", "flac", "ogg"})
DATA_TABLE_EXTENSIONS: frozenset[str] = frozenset({"csv", "xlsx", "xls"})
#: formats whose image links are markup (their remote images are fetched), not the document's text
MARKUP_EXTENSIONS: frozenset[str] = frozenset({"md", "markdown", "html", "htm", "mhtml", "epub"})
VIDEO_EXTENSIONS: frozenset[str] = frozenset(
    {"mp4", "mov", "avi", "mkv", "webm", "flv", "wmv", "m4v", "mpeg", "mpg", "3gp", "ts"}
)

UNSUPPORTED_TYPE_CODE = "unsupported_file_type"
VIDEO_CODE = "video_not_supported"
VIDEO_MESSAGE = "Video files are not supported yet: upload the audio track or a transcript instead"


def file_type_of(file_name: str) -> str:
    """Lower-case extension without the dot ('' when there is none)."""
    ext = posixpath.splitext(file_name.strip())[1]
    return ext[1:].lower() if ext else ""


def is_importable(file_type: str) -> bool:
    return file_type.lower() in IMPORTABLE_EXTENSIONS


def validate_import_file_type(file_name: str) -> str:
    """Returns the file type or raises a 400 with a stable code (video gets its own message)."""
    file_type = file_type_of(file_name)
    if file_type in VIDEO_EXTENSIONS:
        raise BadRequest(VIDEO_MESSAGE, code=VIDEO_CODE)
    if not is_importable(file_type):
        shown = f".{file_type}" if file_type else "(no extension)"
        raise BadRequest(
            f"Unsupported file type {shown}; supported: {', '.join(sorted(IMPORTABLE_EXTENSIONS))}",
            code=UNSUPPORTED_TYPE_CODE,
        )
    return file_type
