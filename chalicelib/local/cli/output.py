"""What every command shares: its common options, `--json`, tables, and the handler signature."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.segment import Segments
from rich.table import Table
from rich.text import Text

from chalicelib.domain.clock import from_iso
from chalicelib.local.cli.client import (
    READS,
    ApiClient,
    CliError,
    KbScope,
    default_api,
    default_key,
    default_operator_key,
    operator_client,
)

Handler = Callable[[argparse.Namespace, Console], int]


def add_common(sp: argparse.ArgumentParser, operator: bool = False) -> argparse.ArgumentParser:
    """--api, the key (a tenant's or the operator's) and --json, each naming its environment variable."""
    sp.add_argument(
        "--api", default=default_api(), help="API base URL (env WEKNORA_API; default %(default)s)"
    )
    if operator:
        sp.add_argument(
            "--operator-key", default=default_operator_key(), help="operator key (env WEKNORA_OPERATOR_KEY)"
        )
    else:
        sp.add_argument("--key", default=default_key(), help="tenant API key (env WEKNORA_API_KEY)")
    sp.add_argument("--json", action="store_true", help="print the API's data as JSON (machine-readable)")
    return sp


def command(
    sub: Any,
    name: str,
    help_text: str,
    handler: Handler,
    operator: bool = False,
    kb_scope: KbScope = READS,
    **kw: Any,
) -> argparse.ArgumentParser:
    """A leaf command with the common options; `handler` runs it. `kb_scope`: where a knowledge base it is
    given by name is looked for (client.KB_SCOPES): MINE for a command that writes into it."""
    sp: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text, **kw)
    add_common(sp, operator)
    sp.set_defaults(handler=handler, kb_scope=kb_scope)
    return sp


def client(args: argparse.Namespace) -> ApiClient:
    if getattr(args, "operator_key", None) is not None and getattr(args, "key", None) is None:
        return operator_client(args.api, args.operator_key)
    return ApiClient(args.api, args.key, kb_scope=getattr(args, "kb_scope", READS))


def emit(args: argparse.Namespace, console: Console, data: Any, render: Callable[[], None]) -> int:
    """`--json`: the data as JSON on one document; otherwise the human rendering."""
    if getattr(args, "json", False):
        print_json(console, data)
    else:
        render()
    return 0


#: C0 controls, DEL and C1 controls: a terminal acts on them (ESC and CSI start sequences that clear the
#: screen, move the cursor, retitle the window or write the clipboard). Names, titles, chunks and errors come
#: from the API, and a knowledge base shared by another tenant carries that tenant's text: none of these
#: characters is ever written, each is shown as its escape (`\x1b`)
_CONTROL_CHARACTERS = (*range(0x20), 0x7F, *range(0x80, 0xA0))
_SHOWN = {c: f"\\x{c:02x}" for c in _CONTROL_CHARACTERS} | {0x09: "\\t", 0x0A: "\\n", 0x0D: "\\r"}
#: a multi-line field (a chunk, a description) keeps its line breaks and tabs
_SHOWN_MULTILINE = {c: shown for c, shown in _SHOWN.items() if c not in (0x09, 0x0A)}
#: JSON escapes C0 itself; DEL and C1 pass through json.dumps, so they are escaped the JSON way (`\u009b`)
_JSON_ESCAPED = {c: f"\\u{c:04x}" for c in _CONTROL_CHARACTERS if c >= 0x7F}


def visible(text: Any, multiline: bool = False) -> str:
    """Text from the API made safe for a terminal: every control character shown as its escape, none
    written; `multiline` keeps line breaks (CRLF as one) and tabs. Everything the CLI prints of the API's
    answers goes through it (the functions below do it themselves)."""
    shown = str(text)
    if multiline:
        return shown.replace("\r\n", "\n").translate(_SHOWN_MULTILINE)
    return shown.translate(_SHOWN)


def markup_safe(text: Any) -> str:
    """Text from the API inside a Rich markup string: its control characters shown, its `[` escaped."""
    return escape(visible(text))


def print_json(console: Console, data: Any, lines: bool = False) -> None:
    """Indented JSON, or with `lines` one compact document a line (JSON Lines, for a stream of looks)."""
    indent = None if lines else 2
    document = json.dumps(data, indent=indent, ensure_ascii=False, default=str)
    console.out(document.translate(_JSON_ESCAPED), highlight=False)


def plain(console: Console, text: str, style: str = "") -> None:
    """A line as written: no markup, no highlighting, no emoji codes, control characters shown (names and
    errors are printed through it)."""
    console.print(Text(visible(text), style=style), soft_wrap=True)


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


#: column headers narrower than their field names, so a listing fits a terminal (`--json` keeps the names)
SHORT_HEADERS = {
    "file_name": "file",
    "file_type": "type",
    "parse_status": "status",
    "enable_status": "search",
    "chunk_count": "chunks",
}


#: the narrowest a column of names gets: a narrow terminal folds ids and times before it squeezes names away
NAME_MIN_WIDTH = 16
NAME_COLUMNS = ("name", "file_name", "title")
#: the width a table is measured in: wide enough for any row on one line
UNBOUNDED_WIDTH = 100_000


def _shown(column: str, row: dict[str, Any]) -> str:
    """A cell on one line: a listing is a row an item, so a line break in a name is shown, not made."""
    return visible(_time(row.get(column)) if column.endswith("_at") else cell(row.get(column)))


def _least_width(column: str, compact: bool) -> int:
    if compact and column.endswith("_at"):
        return len("2026-12-04")  # the date on a line, the time under it
    return NAME_MIN_WIDTH if column in NAME_COLUMNS else len(SHORT_HEADERS.get(column, column))


def _kept_whole(column: str, compact: bool) -> bool:
    return not compact and (column == "id" or column.endswith("_at"))


def rows_table(
    columns: Sequence[str], rows: Sequence[dict[str, Any]], title: str | None = None, compact: bool = False
) -> Table:
    """Rows as a table; ids are kept on one line (they are copied) and times are shown to the second. A
    `compact` table (a narrow terminal) has no borders and folds ids and times, so every column keeps room.
    Cells are plain text: no markup and no emoji codes (a name may hold `[b]` or `:fire:`)."""
    table = Table(
        expand=False,
        title=Text(visible(title)) if title else None,
        box=None if compact else box.HEAVY_HEAD,
        pad_edge=not compact,
    )
    for column in columns:
        table.add_column(
            SHORT_HEADERS.get(column, column),
            overflow="fold",
            no_wrap=_kept_whole(column, compact),
            min_width=_least_width(column, compact),
        )
    for row in rows:
        table.add_row(*(Text(_shown(c, row)) for c in columns))
    return table


def _bordered_width(columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> int:
    """The narrowest the bordered table can be: its whole ids and times, every other column at its least."""
    widths = [
        max([cell_len(SHORT_HEADERS.get(c, c)), *(cell_len(_shown(c, row)) for row in rows)])
        if _kept_whole(c, compact=False)
        else _least_width(c, compact=False)
        for c in columns
    ]
    return sum(widths) + 3 * len(columns) + 1  # a border and two spaces of padding a column, and the edge


def _time(value: Any) -> str:
    """`2026-12-04T07:23:43.526000+00:00` as `2026-12-04 07:23:43Z`; anything else as it is."""
    moment = _parsed(cell(value))
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ") if moment else cell(value)


def _parsed(iso: str) -> datetime | None:
    """An API time (UTC when it names no zone), or None for what is not one."""
    try:
        moment = from_iso(iso)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def print_rows(console: Console, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """A pipe or a file gets the table at its full width (nothing folded or cut); a terminal too narrow
    for the table with whole ids gets the compact one."""
    if not console.is_terminal:
        table = rows_table(columns, rows)
        full = Measurement.get(console, console.options.update_width(UNBOUNDED_WIDTH), table).maximum
        laid_out = console.render(table, console.options.update_width(max(full, console.width)))
        console.print(Segments(laid_out), crop=False)  # print() would fit it to the console's width
    elif _bordered_width(columns, rows) > console.width:
        console.print(rows_table(columns, rows, compact=True))
    else:
        console.print(rows_table(columns, rows))


def print_fields(console: Console, data: dict[str, Any], title: str | None = None) -> None:
    """One object as a two-column grid of its fields (a value keeps its line breaks: a chunk's text)."""
    table = Table(expand=False, title=Text(visible(title)) if title else None, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        table.add_row(Text(visible(key)), Text(visible(cell(value), multiline=True)))
    console.print(table)


def seconds(value: float) -> str:
    value = max(0.0, value)
    if value < 60:
        return f"{value:.0f}s"
    if value < 3600:
        return f"{int(value // 60)}m{int(value % 60):02d}s"
    return f"{int(value // 3600)}h{int(value % 3600 // 60):02d}m"


def since(iso: str, now: datetime | None = None) -> float:
    """Seconds from an ISO time to now (negative when it is still ahead)."""
    then = _parsed(iso)
    return ((now or datetime.now(UTC)) - then).total_seconds() if then else 0.0


def json_object_arg(text: str) -> dict[str, Any]:
    """An argument holding a JSON object (argparse type): fields merged into a request's body."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f"expected a JSON object {{...}}, got {type(value).__name__}: {text}"
        )
    return value


def name_value_arg(text: str) -> tuple[str, str]:
    """`NAME=VALUE` (argparse type)."""
    name, sep, value = text.partition("=")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name.strip(), value


def read_text(path: str) -> str:
    """A UTF-8 text file named on the command line (`-`: stdin); what stops it as a CliError."""
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError("file_unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CliError("file_not_utf8", f"{path} is not UTF-8 text (byte {exc.start})") from exc


def write_bytes(path: Path, data: bytes, overwrite: bool = True) -> None:
    """Writes a file named on the command line; what stops it as a CliError. Without `overwrite` a file (or
    a link) already there is refused: created exclusively, so nothing is followed or replaced."""
    try:
        with path.open("wb" if overwrite else "xb") as out:
            out.write(data)
    except FileExistsError as exc:
        raise CliError("file_exists", f"{path} exists: --force overwrites it") from exc
    except OSError as exc:
        raise CliError("file_unwritable", f"cannot write {path}: {exc.strerror or exc}") from exc
