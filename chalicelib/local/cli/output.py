"""What every command shares: its common options, `--json`, tables, and the handler signature."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from chalicelib.domain.clock import from_iso
from chalicelib.local.cli.client import (
    ApiClient,
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
    sub: Any, name: str, help_text: str, handler: Handler, operator: bool = False, **kw: Any
) -> argparse.ArgumentParser:
    """A leaf command with the common options; `handler` runs it."""
    sp: argparse.ArgumentParser = sub.add_parser(name, help=help_text, description=help_text, **kw)
    add_common(sp, operator)
    sp.set_defaults(handler=handler)
    return sp


def client(args: argparse.Namespace) -> ApiClient:
    if getattr(args, "operator_key", None) is not None and getattr(args, "key", None) is None:
        return operator_client(args.api, args.operator_key)
    return ApiClient(args.api, args.key)


def emit(args: argparse.Namespace, console: Console, data: Any, render: Callable[[], None]) -> int:
    """`--json`: the data as JSON on one document; otherwise the human rendering."""
    if getattr(args, "json", False):
        print_json(console, data)
    else:
        render()
    return 0


def print_json(console: Console, data: Any, lines: bool = False) -> None:
    """Indented JSON, or with `lines` one compact document a line (JSON Lines, for a stream of looks)."""
    indent = None if lines else 2
    console.out(json.dumps(data, indent=indent, ensure_ascii=False, default=str), highlight=False)


def plain(console: Console, text: str) -> None:
    console.print(text, markup=False, highlight=False, soft_wrap=True)


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


def rows_table(columns: Sequence[str], rows: Sequence[dict[str, Any]], title: str | None = None) -> Table:
    """Rows as a table; ids are never broken over lines (they are copied), times are shown to the second."""
    table = Table(expand=False, title=title)
    for column in columns:
        header = SHORT_HEADERS.get(column, column)
        table.add_column(header, overflow="fold", no_wrap=column == "id" or column.endswith("_at"))
    for row in rows:
        table.add_row(
            *(escape(_time(row.get(c)) if c.endswith("_at") else cell(row.get(c))) for c in columns)
        )
    return table


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
    console.print(rows_table(columns, rows))


def print_fields(console: Console, data: dict[str, Any], title: str | None = None) -> None:
    """One object as a two-column grid of its fields."""
    table = Table(expand=False, title=title, show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key, value in data.items():
        table.add_row(escape(str(key)), escape(cell(value)))
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


def json_arg(text: str) -> Any:
    """An argument holding JSON (argparse type)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from exc
