"""`ingest` (files, directories, globs and URLs, followed live) and `status` (a document's stage tree).

While a document waits, both show its queue, how long it has waited and how many documents of the same
knowledge base were queued for that stage before it (`ahead`: in-flight rows of the KB whose message went
to the same queue earlier; it counts rows that the stage may already be running, and nothing of other
knowledge bases or tenants, which the API does not show a tenant).
"""

from __future__ import annotations

import argparse
import glob
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.tree import Tree

from chalicelib.domain.progress import bar
from chalicelib.local.cli.client import ApiClient, ApiError, CliError
from chalicelib.local.cli.output import client as make_client
from chalicelib.local.cli.output import command, emit, markup_safe, plain, seconds, since

TERMINAL = {"completed", "failed", "cancelled"}
IN_FLIGHT = ("pending", "processing", "finalizing")
#: what `ingest` calls a followed row that was there and is gone (deleted meanwhile: the API answers 404)
DELETED = "deleted"
#: the ends of a followed row that are not the row's own parse status
GAVE_UP = ("upload failed", DELETED)
#: the 404 codes of GET /knowledge/{id} for a presigned upload with no row yet that are not its end
#: (services/ownership.py, missing_knowledge_error): the file has not arrived, or (`knowledge_not_found`,
#: also answered while the accept creates the row) nothing is known yet. Every other code of such a 404 is
#: the API's final word on the upload (duplicate_file, a quota, file_too_large, upload_expired, …)
NOT_ARRIVED = ("upload_pending", "knowledge_not_found")
#: rows refreshed per look (two requests each, and each request several table reads): the others wait their
#: turn, so following a hundred files does not put hundreds of requests a second on the stack it watches
REFRESH_PER_LOOK = 4
#: seconds between two listings of the KB's in-flight rows (for the number ahead of a waiting row)
AHEAD_EVERY = 2.0
#: stable column widths of the live table
WIDTHS = {"file": 28, "knowledge": 36, "stage": 22, "status": 11}
_STYLE = {
    "completed": "green",
    "failed": "red",
    "upload failed": "red",
    "cancelled": "yellow",
    DELETED: "yellow",
}


@dataclass
class Tracked:
    file: str
    knowledge_id: str = ""
    note: str = ""
    parse_status: str = "uploading"
    stage: str = ""
    stage_status: str = ""
    error: str = ""
    spans: list[dict[str, Any]] = field(default_factory=list)
    #: the current stage's progress bar (done of total, rate, ETA)
    progress: str = ""
    #: the queue its message waits in, and since when (the row's queued_stage / queued_at)
    queued_stage: str = ""
    queued_at: str = ""
    waiting: bool = False
    ahead: int | None = None
    refreshed_at: float = 0.0
    #: the API has shown the row (a presigned upload's row appears only when its storage event is handled,
    #: so a 404 before that is not a delete)
    seen: bool = False

    @property
    def done(self) -> bool:
        return self.parse_status in TERMINAL or self.parse_status in GAVE_UP

    def wait_text(self) -> str:
        if not self.waiting:
            return ""
        waited = since(self.queued_at)
        text = (
            f"waiting in {self.queued_stage} {seconds(waited)}"
            if waited >= 0
            else f"{self.queued_stage} retry in {seconds(-waited)}"
        )
        return text + (f", {self.ahead} ahead" if self.ahead is not None else "")

    def detail(self) -> str:
        return self.error or " ".join(p for p in (self.wait_text(), self.progress, self.note) if p)


def is_waiting(row: dict[str, Any], trace: list[dict[str, Any]]) -> bool:
    """In flight with a message in a queue whose stage has not started on it (no span, or a pending one)."""
    stage = str(row.get("queued_stage") or "")
    if row.get("parse_status") not in IN_FLIGHT or not stage or not row.get("queued_at"):
        return False
    span = next((s for s in trace if s.get("span_id") == stage), None)
    return span is None or span.get("status") in ("pending", None, "")


def running_progress(trace: list[dict[str, Any]], current: str) -> str:
    """The progress bar of the current stage, else of the last running span that reports one (a page of
    OCR inside the docreader, say)."""
    measured = [s for s in trace if isinstance(s.get("progress"), dict) and s.get("status") == "running"]
    chosen = next((s for s in measured if s.get("span_id") == current), measured[-1] if measured else None)
    if chosen is None:
        return ""
    text = bar(chosen["progress"])
    return text if chosen.get("span_id") == current else f"{chosen.get('span_id')} {text}"


def count_ahead(row: Tracked, in_flight: list[dict[str, Any]]) -> int:
    return sum(
        1
        for other in in_flight
        if other.get("id") != row.knowledge_id
        and other.get("queued_stage") == row.queued_stage
        and str(other.get("queued_at") or "") < row.queued_at
    )


def kb_in_flight(client: ApiClient, kb_id: str, limit: int = 500) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for status in ("pending", "processing"):
        path = f"/knowledge-bases/{kb_id}/knowledge"
        rows += list(client.pages(path, {"page_size": 100, "parse_status": status}, limit=limit))
    return rows


def from_listing(rows: list[Tracked], in_flight: list[dict[str, Any]]) -> None:
    """What the KB's in-flight listing (one or two requests, whatever the number of files) tells of every
    followed row: its state and queue, how many are ahead of a waiting one; a row missing from it has
    moved on (finalizing or done) and is read first at the next look."""
    listed = {str(k.get("id")): k for k in in_flight}
    for r in rows:
        k = listed.get(r.knowledge_id)
        if k is None:
            r.waiting, r.ahead = False, None
            r.refreshed_at = 0.0
            continue
        r.parse_status = str(k.get("parse_status") or r.parse_status)
        r.queued_stage, r.queued_at = str(k.get("queued_stage") or ""), str(k.get("queued_at") or "")
        # a processing row whose spans were never read may be running its queued stage: not claimed
        known = bool(r.spans) or k.get("parse_status") == "pending"
        r.waiting = known and is_waiting(k, r.spans)
        r.ahead = count_ahead(r, in_flight) if r.waiting else None


def progress_table(rows: list[Tracked], started: float) -> Group:
    table = Table(expand=False)
    for col in ("file", "knowledge", "stage", "status", "detail"):
        width = WIDTHS.get(col)
        table.add_column(col, width=width, no_wrap=True, overflow="ellipsis")  # one line a row
    for r in rows:
        style = _STYLE.get(r.parse_status, "cyan")
        stage = f"{r.stage} ({r.stage_status})" if r.stage and r.stage_status else r.stage
        table.add_row(
            markup_safe(r.file),
            markup_safe(r.knowledge_id),
            markup_safe(stage),
            f"[{style}]{markup_safe(r.parse_status)}[/]",
            markup_safe(r.detail()),
        )
    return Group(table, overall(rows, started))


def overall(rows: list[Tracked], started: float) -> str:
    done = sum(r.parse_status == "completed" for r in rows)
    failed = sum(r.parse_status in ("failed", "cancelled", *GAVE_UP) for r in rows)
    waiting = sum(r.waiting or r.parse_status == "pending" for r in rows)  # pending: not started yet
    running = len(rows) - done - failed - waiting
    return (
        f"{len(rows)} file(s): {done} done, {failed} failed, {waiting} waiting, {running} running; "
        f"elapsed {seconds(time.monotonic() - started)}"
    )


def refresh(client: ApiClient, row: Tracked) -> None:
    k = client.knowledge(row.knowledge_id)
    row.seen = True
    row.parse_status = str(k.get("parse_status") or row.parse_status)
    row.error = str(k.get("error_message") or "")
    row.queued_stage, row.queued_at = str(k.get("queued_stage") or ""), str(k.get("queued_at") or "")
    try:
        spans = client.spans(row.knowledge_id)
    except ApiError:
        row.waiting = is_waiting(k, row.spans)
        return  # the row is the source of truth for completion; spans only add detail
    row.stage = str(spans.get("current_stage") or row.stage)
    row.spans = list(spans.get("trace") or [])
    current = next((s for s in row.spans if s.get("span_id") == row.stage), None)
    row.stage_status = str(current.get("status", "")) if current else ""
    row.progress = running_progress(row.spans, row.stage) if not row.done else ""
    row.waiting = is_waiting(k, row.spans)
    if not row.error and spans.get("last_error"):
        row.error = str(spans["last_error"])


def follow(
    client: ApiClient,
    rows: list[Tracked],
    console: Console,
    timeout: float,
    interval: float,
    kb_id: str = "",
    quiet: bool = False,
) -> None:
    """Poll until every row is terminal: a live table on a terminal, one line per change otherwise."""
    started = time.monotonic()
    deadline = started + timeout
    live = None
    if console.is_terminal and not quiet:
        live = Live(progress_table(rows, started), console=console, refresh_per_second=4)
    last: dict[int, tuple[str, ...]] = {}
    last_overall = ""
    ahead_at = 0.0
    if live is not None:
        live.start()
    try:
        while True:
            waiting = sorted((r for r in rows if r.knowledge_id and not r.done), key=lambda r: r.refreshed_at)
            for row in waiting[:REFRESH_PER_LOOK]:  # the least recently refreshed first
                row.refreshed_at = time.monotonic()
                try:
                    refresh(client, row)
                except ApiError as exc:
                    row.error = exc.message
                    if exc.status == 404 and row.seen:  # deleted meanwhile: it will never settle
                        row.parse_status, row.waiting, row.progress = DELETED, False, ""
                    elif exc.status == 404 and exc.code not in NOT_ARRIVED:  # rejected when it arrived
                        row.parse_status, row.waiting, row.progress = "upload failed", False, ""
                        row.error = f"{exc.code}: {exc.message}"
            unfinished = [r for r in rows if r.knowledge_id and not r.done]
            if kb_id and unfinished and time.monotonic() - ahead_at >= AHEAD_EVERY:
                ahead_at = time.monotonic()
                try:
                    in_flight: list[dict[str, Any]] | None = kb_in_flight(client, kb_id)
                except ApiError:
                    in_flight = None
                if in_flight is not None:
                    from_listing(unfinished, in_flight)
            if live is not None:
                live.update(progress_table(rows, started))
            elif not quiet:
                for i, r in enumerate(rows):
                    state = (
                        r.parse_status,
                        r.stage,
                        r.stage_status,
                        r.note,
                        r.progress,
                        r.error,
                        str(r.waiting),
                    )
                    if last.get(i) != state:
                        last[i] = state
                        stage = f" {r.stage}({r.stage_status})" if r.stage else ""
                        extra = " ".join(p for p in (r.wait_text(), r.progress, r.error) if p)
                        note = f" [{r.note}]" if r.note else ""
                        plain(
                            console,
                            f"{r.file} {r.knowledge_id}: {r.parse_status}{stage}{note}"
                            + (f" {extra}" if extra else ""),
                        )
                line = overall(rows, started).split("; elapsed")[0]
                if line != last_overall:
                    last_overall = line
                    plain(console, overall(rows, started))
            if all(r.done for r in rows):
                return
            if time.monotonic() > deadline:
                for r in rows:
                    if not r.done:
                        r.error = r.error or f"still {r.parse_status} after {timeout:.0f}s"
                return
            time.sleep(interval)
    finally:
        if live is not None:
            live.stop()


# ---- ingest -------------------------------------------------------------------------------------------------


def expand(sources: list[str]) -> tuple[list[Path], list[str], list[str]]:
    """Files, URLs and what matched nothing: directories are walked recursively (hidden entries skipped),
    globs expanded (`**` too), http(s) arguments kept as URLs."""
    files: list[Path] = []
    urls: list[str] = []
    missing: list[str] = []

    def walk(path: Path) -> list[Path]:
        found = [
            p
            for p in sorted(path.rglob("*"))
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        ]
        return found

    for source in sources:
        if source.startswith(("http://", "https://")):
            urls.append(source)
            continue
        candidates = (
            [Path(p) for p in sorted(glob.glob(source, recursive=True))]
            if glob.has_magic(source) and not Path(source).exists()  # "[x].txt" may be a file's name
            else [Path(source)]
        )
        matched = False
        for path in candidates:
            if path.is_dir():
                found = walk(path)
                files += found
                matched = matched or bool(found)
            elif path.is_file():
                files.append(path)
                matched = True
        if not matched:
            missing.append(source)
    unique = list(dict.fromkeys(p.resolve() for p in files))
    return [Path(p) for p in unique], list(dict.fromkeys(urls)), missing


def cmd_ingest(args: argparse.Namespace, console: Console) -> int:
    client = make_client(args)
    files, urls, missing = expand(list(args.files))
    if missing:
        raise CliError("file_not_found", f"no such file: {', '.join(missing)}")
    kb, created = client.ensure_kb(args.kb)
    kb_id = str(kb["id"])
    if not args.json:
        name = markup_safe(kb.get("name") or args.kb)
        console.print(f"knowledge base [bold]{name}[/] ({markup_safe(kb_id)}){' created' if created else ''}")
    rows = [Tracked(file=f.name) for f in files] + [Tracked(file=u) for u in urls]
    for path, row in zip(files, rows, strict=False):
        try:
            _created(row, client.upload_row(kb_id, path))
        except ApiError as exc:
            _rejected(row, exc)
        except OSError as exc:  # unreadable (permissions, gone since the walk): the others go on
            row.parse_status = "upload failed"
            row.error = f"cannot read {path}: {exc.strerror or exc}"
    for url, row in zip(urls, rows[len(files) :], strict=True):
        try:
            _created(row, client.call("POST", f"/knowledge-bases/{kb_id}/knowledge/url", json={"url": url}))
        except ApiError as exc:
            _rejected(row, exc)
    follow(client, rows, console, args.timeout, args.interval, kb_id=kb_id, quiet=args.json)
    bad = [r for r in rows if r.parse_status != "completed"]
    if args.json:
        emit(args, console, [_row_json(r) for r in rows], lambda: None)
        return 1 if bad else 0
    for r in bad:
        reason = markup_safe(r.error or "no reason given")
        console.print(f"[red]✗ {markup_safe(r.file)}[/] {markup_safe(r.parse_status)}: {reason}")
    if not bad:
        console.print(f"[green]✓ all {len(rows)} file(s) completed[/]")
    return 1 if bad else 0


def _created(row: Tracked, created: dict[str, Any]) -> None:
    """The row the upload answered: waiting in its first queue until the first look says more."""
    row.knowledge_id, row.parse_status = str(created["id"]), "pending"
    row.seen = "parse_status" in created  # a presigned upload answers with its id only
    row.queued_stage, row.queued_at = (
        str(created.get("queued_stage") or ""),
        str(created.get("queued_at") or ""),
    )
    row.waiting = is_waiting({**created, "parse_status": "pending"}, [])


def _rejected(row: Tracked, exc: ApiError) -> None:
    if exc.status == 409 and isinstance(exc.data, dict) and exc.data.get("id"):
        row.knowledge_id, row.seen = str(exc.data["id"]), True
        row.note = f"duplicate of {row.knowledge_id}"
        row.parse_status = str(exc.data.get("parse_status") or "pending")
    else:
        row.parse_status = "upload failed"
        row.error = f"{exc.code}: {exc.message}"


def _row_json(r: Tracked) -> dict[str, Any]:
    return {
        "file": r.file,
        "knowledge_id": r.knowledge_id,
        "parse_status": r.parse_status,
        "error": r.error,
        "note": r.note,
    }


# ---- status -------------------------------------------------------------------------------------------------


def stage_tree(spans: dict[str, Any]) -> Tree:
    title = (
        f"[bold]{markup_safe(spans.get('knowledge_id', ''))}[/] attempt {markup_safe(spans.get('attempt', '?'))} "
        f"parse_status={markup_safe(spans.get('parse_status', '?'))} "
        f"current_stage={markup_safe(spans.get('current_stage') or '-')}"
    )
    tree = Tree(title)
    trace = list(spans.get("trace") or [])
    ids = {s.get("span_id") for s in trace}
    children: dict[str, list[dict[str, Any]]] = {}
    for s in trace:
        parent = s.get("parent_id") or ""
        children.setdefault(parent if parent in ids else "", []).append(s)

    def label(s: dict[str, Any]) -> str:
        status = str(s.get("status", ""))
        style = {"done": "green", "failed": "red", "running": "cyan", "skipped": "dim"}.get(status, "white")
        text = f"{markup_safe(str(s.get('span_id')))} [{style}]{markup_safe(status)}[/]"
        if s.get("error_message"):
            text += (
                f" [red]{markup_safe(str(s.get('error_code', '')))} {markup_safe(str(s['error_message']))}[/]"
            )
        outputs = s.get("outputs") or {}
        if outputs:
            text += " " + markup_safe(", ".join(f"{k}={v}" for k, v in list(outputs.items())[:4]))
        if isinstance(s.get("progress"), dict):
            text += " " + markup_safe(bar(s["progress"]))
        return text

    def add(node: Tree, parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            sid = str(s.get("span_id"))
            child = node.add(label(s))
            if depth < 10 and sid != parent:
                add(child, sid, depth + 1)

    add(tree, "", 0)
    if spans.get("last_error"):
        tree.add(f"[red]last error: {markup_safe(str(spans['last_error']))}[/]")
    return tree


def _status_view(client: ApiClient, knowledge_id: str) -> tuple[dict[str, Any], Any]:
    # the row first: the spans' header says the status as of their read, so read after the row it is never
    # older than the row that ends the follow (a view saying 'finalizing' was printed as the last one)
    row = client.knowledge(knowledge_id)
    spans = client.spans(knowledge_id)
    tracked = Tracked(file=str(row.get("file_name") or row.get("title") or ""), knowledge_id=knowledge_id)
    tracked.parse_status = str(row.get("parse_status") or "")
    tracked.queued_stage, tracked.queued_at = (
        str(row.get("queued_stage") or ""),
        str(row.get("queued_at") or ""),
    )
    tracked.waiting = is_waiting(row, list(spans.get("trace") or []))
    parts: list[Any] = [stage_tree(spans)]
    if tracked.waiting:
        try:
            tracked.ahead = count_ahead(tracked, kb_in_flight(client, str(row.get("kb_id") or "")))
        except ApiError:
            tracked.ahead = None
        parts.append(
            f"[yellow]{markup_safe(tracked.wait_text())}[/] (ahead: queued earlier in this knowledge base)"
        )
    return {"knowledge": row, "spans": spans, "waiting": tracked.waiting, "ahead": tracked.ahead}, Group(
        *parts
    )


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    from chalicelib.local.cli.kb import cost_table

    client = make_client(args)
    data, view = _status_view(client, args.knowledge_id)
    if args.follow and not args.json:
        live = Live(view, console=console, refresh_per_second=4) if console.is_terminal else None
        if live is not None:
            live.start()
        try:
            shown = ""
            while True:
                if live is not None:
                    live.update(view)
                else:
                    # the row's status too: it may settle (completed) after the spans' last change
                    fingerprint = str(data["spans"].get("trace")) + str(data["waiting"])
                    fingerprint += str(data["knowledge"].get("parse_status"))
                    if fingerprint != shown:
                        shown = fingerprint
                        console.print(view)
                # only these move on by themselves: a draft stays one, a deleting row just disappears
                if data["knowledge"].get("parse_status") not in IN_FLIGHT:
                    break
                time.sleep(args.interval)
                data, view = _status_view(client, args.knowledge_id)
        finally:
            if live is not None:
                live.stop()
        console.print(cost_table(client.cost(args.knowledge_id)))
        return 0
    data["cost"] = client.cost(args.knowledge_id)

    def render() -> None:
        console.print(view)
        console.print(cost_table(data["cost"]))

    return emit(args, console, data, render)


def register(sub: Any) -> None:
    ing = command(
        sub,
        "ingest",
        "upload files, directories (recursively), globs and URLs into a knowledge base and follow them",
        cmd_ingest,
    )
    ing.add_argument("files", nargs="+", metavar="PATH|GLOB|URL")
    ing.add_argument(
        "--kb", required=True, help="knowledge base id or name (created if you own none of that name)"
    )
    ing.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    ing.add_argument("--interval", type=float, default=0.5, help=argparse.SUPPRESS)

    st = command(sub, "status", "a document's stage tree, progress, queue wait and cost", cmd_status)
    st.add_argument("knowledge_id")
    st.add_argument("--follow", "-f", action="store_true", help="refresh until the document settles")
    st.add_argument("--interval", type=float, default=1.0, help=argparse.SUPPRESS)
