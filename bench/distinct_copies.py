"""Distinct copies of a corpus file for the soak (issue 27): copy N of a file is the file with a tag
(`soak0042`) written into its text every few words, so every chunk of every copy is new to the embedding
cache and to the knowledge base's dedupe, and every copy of one file does the same work (same size, same
structure: the tag has a fixed width). Each copy stays a valid file of its type: text is edited as text,
CSV through the csv module (a column added), JSON as data (a key added to every object, the tag appended to
every string), HTML and the XML inside DOCX/XLSX/PPTX/EPUB by editing text nodes only.

Types that cannot be edited this way honestly (PDF, legacy .doc/.xls/.ppt, MHTML, images, audio) are not
`EDITABLE`; the soak leaves them out.
"""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

EDITABLE = {".txt", ".md", ".markdown", ".csv", ".json", ".html", ".htm", ".docx", ".xlsx", ".pptx", ".epub"}
WORDS_PER_TAG = 20  # a tag every 20 words: every chunk of 512 runes holds at least one


def tag_of(copy_no: int) -> str:
    return f"soak{copy_no:04d}"


def tag_text(text: str, tag: str) -> str:
    """The tag after every `WORDS_PER_TAG` words of each line and at the end of each line with words."""
    lines = []
    for line in text.split("\n"):
        words = line.split(" ")
        if not line.strip():
            lines.append(line)
            continue
        for i in range(WORDS_PER_TAG, len(words), WORDS_PER_TAG + 1):
            words.insert(i, tag)
        stripped = " ".join(words)
        trail = len(stripped) - len(stripped.rstrip())
        lines.append(stripped.rstrip() + " " + tag + stripped[len(stripped) - trail :])
    return "\n".join(lines)


_SKIPPED_ELEMENTS = re.compile(r"<(script|style)\b[^>]*>.*?</\1\s*>", re.S | re.I)
_TEXT_NODE = re.compile(r">([^<]*[^\s<][^<]*)<")


def tag_markup(markup: str, tag: str) -> str:
    """The tag in every text node of HTML/XML; script and style bodies (and everything in tags) untouched."""
    pieces, last = [], 0
    for skipped in _SKIPPED_ELEMENTS.finditer(markup):
        pieces.append(_tag_nodes(markup[last : skipped.start()], tag))
        pieces.append(skipped.group(0))
        last = skipped.end()
    pieces.append(_tag_nodes(markup[last:], tag))
    return "".join(pieces)


def _tag_nodes(markup: str, tag: str) -> str:
    return _TEXT_NODE.sub(lambda m: ">" + tag_text(m.group(1), tag) + "<", markup)


def tag_csv(text: str, tag: str) -> str:
    dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t")
    rows = list(csv.reader(io.StringIO(text), dialect))
    out = io.StringIO()
    writer = csv.writer(out, dialect, lineterminator="\n")
    for i, row in enumerate(rows):
        writer.writerow([*row, "copy" if i == 0 else tag] if row else row)
    return out.getvalue()


def tag_json(value: Any, tag: str) -> Any:
    if isinstance(value, dict):
        return {**{k: tag_json(v, tag) for k, v in value.items()}, "soak_copy": tag}
    if isinstance(value, list):
        return [tag_json(v, tag) for v in value]
    if isinstance(value, str):
        return f"{value} {tag}"
    return value


#: the zip members whose text nodes carry a document's text, per type
_ZIP_TEXT = {
    ".docx": re.compile(r"word/(document|footnotes|endnotes|header\d*|footer\d*)\.xml"),
    ".xlsx": re.compile(r"xl/sharedStrings\.xml"),
    ".pptx": re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml"),
    ".epub": re.compile(r".*\.(x?html?)"),
}


def tag_zip(data: bytes, suffix: str, tag: str) -> bytes:
    members = _ZIP_TEXT[suffix]
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for (
            info
        ) in source.infolist():  # same order, same compression (an EPUB's mimetype stays first, stored)
            body = source.read(info)
            if members.fullmatch(info.filename):
                body = tag_markup(body.decode("utf-8"), tag).encode("utf-8")
            target.writestr(info, body)
    return out.getvalue()


def distinct_copy(path: Path, data: bytes, copy_no: int) -> bytes:
    suffix = path.suffix.lower()
    tag = tag_of(copy_no)
    if suffix in _ZIP_TEXT:
        return tag_zip(data, suffix, tag)
    text = data.decode("utf-8")
    if suffix in (".txt", ".md", ".markdown"):
        edited = tag_text(text, tag)
    elif suffix in (".html", ".htm"):
        edited = tag_markup(text, tag)
    elif suffix == ".csv":
        edited = tag_csv(text, tag)
    elif suffix == ".json":
        edited = json.dumps(tag_json(json.loads(text), tag), ensure_ascii=False, indent=1)
    else:
        raise ValueError(f"{path.name}: no distinct copy for {suffix} files")
    return edited.encode("utf-8")
