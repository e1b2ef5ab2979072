"""The `simple` engine (WeKnora's Go in-process reader): text verbatim, CSV as a Markdown table, JSON as
structured Markdown, images and audio as placeholders carrying their bytes."""

from __future__ import annotations

import csv
import json
import re
from typing import Any

from chalicelib.domain.csv_rows import TooManyCells, excel_sep_line, read_csv_rows
from chalicelib.domain.filetypes import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from chalicelib.domain.parser_engines import SIMPLE_TYPES, TEXT_TYPES
from chalicelib.parsers.base import (
    ParseContext,
    image_kind,
    md_image_alt,
    parse_failed,
    unsupported,
    wide_text_codec,
)
from chalicelib.parsers.markdown_tables import DEFAULT_MAX_CELLS, markdown_table, md_escape_cell
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult

AUDIO_PLACEHOLDER = "[audio: {name}]"
MAX_JSON_DEPTH = 40


#: the share of a text's non-ASCII characters that may be invalid UTF-8 for it still to be read as UTF-8 (a
#: truncated last character, a stray cp1252 dash): a legacy encoding's text is mostly invalid UTF-8
MAX_UTF8_ERROR_SHARE = 0.05
DETECTION_SAMPLE_BYTES = 2_000_000
_NON_ASCII = re.compile(rb"[\x80-\xff]")
_REPLACEMENT_UTF8 = "\ufffd".encode()


def decode_text(data: bytes) -> str:
    """Decodes text in any encoding: BOMs, UTF-16/32 by their BOM or NUL pattern, UTF-8 (text nearly all
    valid UTF-8 too, the few bad bytes replaced), then a legacy 8-bit or CJK codec (`_legacy_codec`)."""
    if data.startswith(b"\xef\xbb\xbf"):
        return data[3:].decode("utf-8", errors="replace")
    wide = wide_text_codec(data)
    if wide is not None:  # UTF-32 or UTF-16, with or without a byte-order mark
        return data.decode(wide, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    as_utf8 = data.decode("utf-8", errors="replace")
    invalid = as_utf8.count("\ufffd") - data.count(_REPLACEMENT_UTF8)
    non_ascii = len(as_utf8) - len(as_utf8.encode("ascii", errors="ignore"))
    if invalid <= MAX_UTF8_ERROR_SHARE * non_ascii:
        return as_utf8
    del as_utf8
    return data.decode(_legacy_codec(data), errors="replace")


#: the non-ASCII characters of Western European text in Windows-1252: the letters of French, Spanish,
#: Portuguese, German, Italian, Catalan, Dutch and the Nordic languages, and the usual typography
_WESTERN = frozenset(
    "àáâãäåæçèéêëìíîïñòóôõöøùúûüÿßœÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜŸŒ"  # letters
    "“”‘’–—€…«»°§©®™•·¡¿£¥¢½¼¾µ±×÷ªº²³\u00a0"  # typography
)
#: under this many non-ASCII bytes a detector's guess is a coin toss ("Café" read as UTF-16): Windows-1252
SHORT_NON_ASCII = 16
#: how much more mess (charset-normalizer's `mess_ratio`) Windows-1252's reading may show than the
#: detector's Latin-script choice and still be preferred to it
CP1252_MESS_SLACK = 0.05
_MESS_SAMPLE_CHARS = 100_000


def _western_share(text: str) -> float:
    """The share of the text's non-ASCII characters that are common in Western European text (1.0: all)."""
    others = [ch for ch in text if ord(ch) > 127]
    return sum(ch in _WESTERN for ch in others) / len(others) if others else 1.0


def _latin_letters_only(text: str) -> bool:
    """Whether every non-ASCII letter of the text is a Latin one (the detector chose a cousin of cp1252)."""
    import unicodedata

    return all(
        unicodedata.name(ch, "").startswith("LATIN") for ch in set(text) if ord(ch) > 127 and ch.isalpha()
    )


def _as_cp1252(data: bytes) -> str | None:
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:  # one of its five unassigned bytes: not Windows-1252
        return None


def _legacy_codec(data: bytes) -> str:
    """The codec of text that is not UTF-8/16/32. charset-normalizer ranks its equally plausible readings
    in no useful order (Spanish in cp1250: "ańo"), so among Latin-script readings Windows-1252, the most
    common legacy encoding, wins unless its reading is clearly worse; text with only a few non-ASCII bytes
    is read as Windows-1252 when its reading is plausible Western text. UTF-16/32 are never guessed here:
    without a BOM or NULs (`wide_text_codec`) they are not told from 8-bit text."""
    from charset_normalizer import from_bytes
    from charset_normalizer.md import mess_ratio
    from charset_normalizer.utils import is_multi_byte_encoding

    sample = data[:DETECTION_SAMPLE_BYTES]
    if sample.isascii():  # the detector would say ascii: it must see the bytes that are not
        first = _NON_ASCII.search(data)
        assert first is not None  # the data is not valid UTF-8, so not all ASCII
        sample = data[first.start() : first.start() + DETECTION_SAMPLE_BYTES]
    western = _as_cp1252(sample)
    short = western is not None and len(_NON_ASCII.findall(sample[:65536])) < SHORT_NON_ASCII
    if short and western is not None and _western_share(western) == 1.0:
        return "cp1252"
    matches = [
        m
        for m in from_bytes(sample)
        if m.encoding != "ascii" and not m.encoding.startswith(("utf_16", "utf_32"))
    ]
    if not matches:
        return "cp1252" if western is not None else "latin-1"
    best = matches[0]
    if western is None or best.encoding == "cp1252" or is_multi_byte_encoding(best.encoding):
        return best.encoding
    chosen = sample.decode(best.encoding, errors="replace")[:_MESS_SAMPLE_CHARS]
    western = western[:_MESS_SAMPLE_CHARS]
    if (
        _latin_letters_only(chosen)
        and _western_share(western) >= _western_share(chosen)
        and mess_ratio(western, 1.0) <= mess_ratio(chosen, 1.0) + CP1252_MESS_SLACK
    ):
        return "cp1252"
    return best.encoding


def _text(data: bytes) -> str:
    text = decode_text(data).replace("\r\n", "\n").replace("\r", "\n")
    if "\x00" in text:
        raise unsupported("The text file contains binary data; it does not look like text.")
    return text


def csv_to_markdown(text: str, max_cells: int) -> str:
    """The CSV as one Markdown table."""
    return csv_document(text, max_cells)[0]


#: the text csv.Sniffer guesses a dialect from: its quote-guessing regexes are quadratic in it (`,"a` repeated,
#: no quote closed before a delimiter: 64 KB took 100 s, 8 KB under a second); the corpus CSVs read the same
SNIFF_SAMPLE_CHARS = 8192


def csv_document(text: str, max_cells: int) -> tuple[str, dict[str, Any]]:
    """The CSV as one Markdown table, and what the metadata says about it (a quote never closed)."""
    text, dialect = excel_sep_line(text)
    if dialect is None:
        try:
            dialect = csv.Sniffer().sniff(text[:SNIFF_SAMPLE_CHARS], delimiters=",;\t|")
        except csv.Error:
            dialect = csv.excel
    try:
        read = read_csv_rows(text, dialect, max_cells)
    except TooManyCells as exc:
        raise parse_failed(
            f"The CSV file has more than {max_cells:,} cells, which is over the limit."
        ) from exc
    except csv.Error as exc:
        raise parse_failed(f"The CSV file is malformed: {exc}") from exc
    metadata: dict[str, Any] = {}
    if read.unclosed_quote_line is not None:  # its rows are kept, read with that quote as a character
        metadata["csv_unclosed_quote_line"] = read.unclosed_quote_line
    return markdown_table([row for row in read.rows if any(c.strip() for c in row)], max_cells), metadata


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _is_scalar(value: Any) -> bool:
    return not isinstance(value, dict | list)


#: a list of objects is a table only when at least this share of its cells has a value: objects with keys of
#: their own would make a column each, rows × keys cells (quadratic), nearly all empty
MIN_TABLE_FILL = 0.5


def _table_keys(value: list[Any]) -> list[str] | None:
    """The columns of a list of flat objects shown as one table (their keys, in order of appearance); None
    for a list that is none, or whose table would be mostly empty or over the cell limit (then bullets)."""
    if not value or not all(isinstance(v, dict) and all(map(_is_scalar, v.values())) for v in value):
        return None
    keys = list(dict.fromkeys(k for v in value for k in v))
    cells = len(keys) * len(value)
    filled = sum(map(len, value))
    if cells > DEFAULT_MAX_CELLS or filled < MIN_TABLE_FILL * cells:
        return None
    return keys


def json_to_markdown(value: Any, depth: int = 0, level: int = 1) -> list[str]:
    """Objects become headings (complex values) or `- **key**: value` bullets; lists of flat objects become
    tables; other lists become bullet lists."""
    if depth > MAX_JSON_DEPTH:
        raise parse_failed("The JSON document is nested too deeply.")
    out: list[str] = []
    indent = "  " * max(0, depth - level + 1) if level > 6 else ""
    if isinstance(value, dict):
        for raw_key, item in value.items():
            key = str(raw_key).replace("*", "\\*").replace("\n", " ")
            if _is_scalar(item):
                out.append(f"{indent}- **{key}**: {_scalar(item)}")
            elif level <= 6:
                out.append(f"\n{'#' * level} {key}\n")
                out.extend(json_to_markdown(item, depth + 1, level + 1))
            else:
                out.append(f"{indent}- **{key}**:")
                out.extend(json_to_markdown(item, depth + 1, level + 1))
    elif isinstance(value, list):
        keys = _table_keys(value)
        if keys is not None:
            rows = [keys] + [[_scalar(v.get(k, "")) for k in keys] for v in value]
            out.append("\n" + markdown_table(rows) + "\n")
        else:
            for i, item in enumerate(value):
                if _is_scalar(item):
                    out.append(f"{indent}- {md_escape_cell(_scalar(item))}")
                else:
                    if level <= 6:
                        out.append(f"\n{'#' * level} Item {i + 1}\n")
                    out.extend(json_to_markdown(item, depth + 1, level + 1))
    else:
        out.append(_scalar(value))
    return out


def _json_value(text: str) -> Any:
    """The JSON document, or the list of a JSON Lines file's values (named .json, as exports often are):
    one JSON value on each non-blank line."""
    try:
        return json.loads(text)
    except RecursionError as exc:
        raise parse_failed(f"The JSON file is not valid JSON: {exc}") from exc
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise parse_failed(f"The JSON file is not valid JSON: {exc}") from exc
        error = exc
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except (json.JSONDecodeError, RecursionError):
        raise parse_failed(f"The JSON file is not valid JSON (nor JSON Lines): {error}") from error


class SimpleEngine:
    name = "simple"
    description = "In-process reader: text verbatim, CSV/JSON to Markdown, image and audio placeholders"
    file_types = SIMPLE_TYPES

    def availability(self) -> tuple[bool, str]:
        return True, ""

    def parse(self, request: ReadRequest, ctx: ParseContext) -> ReadResult:
        ft = request.file_type
        data = request.data
        if ft in TEXT_TYPES:
            return ReadResult(markdown=_text(data))
        if ft == "csv":
            if len(data) > ctx.limits.max_csv_bytes:
                raise parse_failed("The CSV file is larger than the allowed size.")
            markdown, metadata = csv_document(_text(data), ctx.limits.max_sheet_cells)
            return ReadResult(markdown=markdown, metadata=metadata)
        if ft == "json":
            value = _json_value(_text(data))
            try:
                lines = json_to_markdown(value, level=2)
            except RecursionError as exc:
                raise parse_failed("The JSON document is nested too deeply.") from exc
            return ReadResult(markdown="\n".join(lines).strip() + "\n")
        if ft in IMAGE_EXTENSIONS:
            kind = image_kind(data)
            if kind is None:
                raise unsupported(f"The file is named .{ft} but is not a PNG, JPEG or GIF image.")
            name = md_image_alt(request.file_name or "") or f"image.{kind[0]}"
            ref = f"images/original.{kind[0]}"  # ours, not the name's: a link the name cannot break
            image = ParsedImage(ref=ref, data=data, mime_type=kind[1], page=1, is_original=True)
            return ReadResult(markdown=f"![{name}]({ref})\n", images=[image])
        if ft in AUDIO_EXTENSIONS:
            name = request.file_name or f"audio.{ft}"
            return ReadResult(
                markdown=AUDIO_PLACEHOLDER.format(name=name) + "\n",
                is_audio=True,
                audio=data,
                metadata={"audio_type": ft},
            )
        raise unsupported(f"The simple engine cannot read .{ft} files.")
