"""``weknora-ingest``: run the whole pipeline locally (``up``) and talk to its API (ingest/status/search,
check-corpus).

Every API reply uses the envelope ``{success, data}`` / ``{success: false, error: {code, message}}``.

Over 600 lines: `up` (start, snapshot, print) is most of it; the client commands are a few lines each over
one request helper. Splitting `up` out is the next step when the CLI grows (issue 25).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import importlib
import logging
import mimetypes
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from chalicelib.domain.progress import bar
from chalicelib.services.offered import enrichment_overview
from chalicelib.settings import default_corpus

DIRECT_UPLOAD_MAX_BYTES = (
    4 * 1024 * 1024
)  # API Gateway/Lambda payload limits: bigger files go via presigned PUT
TERMINAL = {"completed", "failed", "cancelled"}
DEFAULT_KEY = "local-dev-key"
DEFAULT_OPERATOR_KEY = "local-operator-key"
#: where `up` keeps moto's state between runs, inside the state dir
SNAPSHOT_DIR = "moto-snapshot"
#: invocations each stage queue runs at once under `up` (and the benches): on AWS a queue's Lambda runs
#: several; here two let one document's stage work while another's waits on the tables
LOCAL_CONCURRENCY = 2


def default_api() -> str:
    return (
        os.environ.get("WEKNORA_API_URL")
        or f"http://127.0.0.1:{os.environ.get('WEKNORA_PORT', '8000')}/api/v1"
    )


def default_key() -> str:
    return os.environ.get("WEKNORA_API_KEY", DEFAULT_KEY)


def default_operator_key() -> str:
    return os.environ.get("WEKNORA_OPERATOR_KEY") or DEFAULT_OPERATOR_KEY


# ---- API client -----------------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, data: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.data = data


class ApiClient:
    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["X-API-Key"] = api_key

    def call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self.session.request(method, f"{self.base}{path}", timeout=self.timeout, **kw)
        except requests.ConnectionError as exc:
            raise ApiError(
                0, "unreachable", f"cannot reach {self.base} (is `weknora-ingest up` running?)"
            ) from exc
        try:
            body = resp.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("success") is True and resp.ok:
            return body.get("data")
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        top = body if isinstance(body, dict) else {}
        code = str(err.get("code") or top.get("code") or resp.status_code)
        message = str(err.get("message") or top.get("message") or resp.text[:200] or resp.reason)
        raise ApiError(resp.status_code, code, message, top.get("data"))

    def find_kb(self, name: str) -> dict[str, Any] | None:
        kbs = self.call("GET", "/knowledge-bases") or []
        return next((kb for kb in kbs if kb.get("name") == name), None)

    def ensure_kb(self, name: str) -> tuple[dict[str, Any], bool]:
        kb = self.find_kb(name)
        if kb is not None:
            return kb, False
        return self.call("POST", "/knowledge-bases", json={"name": name}), True

    def upload(self, kb_id: str, path: Path) -> str:
        """Upload one file; returns its knowledge id. A duplicate raises ApiError(409) carrying the row."""
        size = path.stat().st_size
        if size <= DIRECT_UPLOAD_MAX_BYTES:
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            with path.open("rb") as fh:
                data = self.call(
                    "POST", f"/knowledge-bases/{kb_id}/knowledge/file", files={"file": (path.name, fh, mime)}
                )
            return str(data["id"])
        grant = self.call(
            "POST",
            f"/knowledge-bases/{kb_id}/knowledge/upload-url",
            json={"file_name": path.name, "file_size": size},
        )
        with path.open("rb") as fh:
            # A presigned URL: plain requests, not the API session (no API key sent to storage).
            put = requests.put(grant["upload_url"], data=fh, headers=grant.get("headers") or {}, timeout=600)
        if not put.ok:
            raise ApiError(put.status_code, "upload_failed", f"PUT to storage failed: {put.text[:200]}")
        return str(grant["knowledge_id"])

    def knowledge(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}"))

    def list_knowledge(self, kb_id: str) -> list[dict[str, Any]]:
        """Every row of a knowledge base, 100 to a request."""
        rows: list[dict[str, Any]] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"page_size": 100, **({"cursor": cursor} if cursor else {})}
            data = self.call("GET", f"/knowledge-bases/{kb_id}/knowledge", params=params)
            rows += data["items"]
            cursor = data.get("next_cursor")
            if not cursor:
                return rows

    def cost(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}/cost"))

    def spans(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}/spans"))

    def search(self, kb_id: str, query: str, n: int) -> list[dict[str, Any]]:
        data = self.call(
            "POST", f"/knowledge-bases/{kb_id}/hybrid-search", json={"query_text": query, "match_count": n}
        )
        return list(data or [])


# ---- ingest -----------------------------------------------------------------------------------------------


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
    refreshed_at: float = 0.0

    @property
    def done(self) -> bool:
        return self.parse_status in TERMINAL or self.parse_status == "upload failed"


_STYLE = {"completed": "green", "failed": "red", "upload failed": "red", "cancelled": "yellow"}


def _progress_table(rows: list[Tracked]) -> Table:
    table = Table(expand=False)
    for col in ("file", "knowledge", "stage", "status", "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        style = _STYLE.get(r.parse_status, "cyan")
        stage = f"{r.stage} ({r.stage_status})" if r.stage and r.stage_status else r.stage
        detail = r.error or " ".join(part for part in (r.progress, r.note) if part)
        table.add_row(
            escape(r.file), r.knowledge_id, escape(stage), f"[{style}]{r.parse_status}[/]", escape(detail)
        )
    return table


def _refresh(client: ApiClient, row: Tracked) -> None:
    k = client.knowledge(row.knowledge_id)
    row.parse_status = str(k.get("parse_status") or row.parse_status)
    row.error = str(k.get("error_message") or "")
    try:
        spans = client.spans(row.knowledge_id)
    except ApiError:
        return  # the row is the source of truth for completion; spans only add detail
    row.stage = str(spans.get("current_stage") or row.stage)
    row.spans = list(spans.get("trace") or [])
    current = next((s for s in row.spans if s.get("span_id") == row.stage), None)
    row.stage_status = str(current.get("status", "")) if current else ""
    measured = current.get("progress") if current else None
    row.progress = bar(measured) if isinstance(measured, dict) and not row.done else ""
    if not row.error and spans.get("last_error"):
        row.error = str(spans["last_error"])


#: rows refreshed per look (two requests each, and each request several table reads): the others wait their
#: turn, so following a hundred files does not put hundreds of requests a second on the stack it watches
REFRESH_PER_LOOK = 4


def _follow(
    client: ApiClient, rows: list[Tracked], console: Console, timeout: float, interval: float
) -> None:
    """Poll until every row is terminal: a live table on a terminal, one line per change otherwise."""
    deadline = time.monotonic() + timeout
    live = Live(_progress_table(rows), console=console, refresh_per_second=4) if console.is_terminal else None
    last: dict[int, tuple[str, str, str, str]] = {}
    if live is not None:
        live.start()
    try:
        while True:
            waiting = sorted((r for r in rows if r.knowledge_id and not r.done), key=lambda r: r.refreshed_at)
            for row in waiting[:REFRESH_PER_LOOK]:  # the least recently refreshed first
                row.refreshed_at = time.monotonic()
                try:
                    _refresh(client, row)
                except ApiError as exc:
                    row.error = exc.message
            if live is not None:
                live.update(_progress_table(rows))
            else:
                for i, r in enumerate(rows):
                    state = (r.parse_status, r.stage, r.stage_status, r.note + r.progress)
                    if last.get(i) != state:
                        last[i] = state
                        stage = f" {r.stage}({r.stage_status})" if r.stage else ""
                        note = f" [{r.note}]" if r.note else ""
                        note += f" {r.progress}" if r.progress else ""
                        console.print(
                            f"{r.file} {r.knowledge_id}: {r.parse_status}{stage}{note}",
                            markup=False,
                            highlight=False,
                        )
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


def cmd_ingest(args: argparse.Namespace, console: Console) -> int:
    client = ApiClient(args.api, args.key)
    files = [Path(f) for f in args.files]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        console.print(f"[red]no such file: {escape(', '.join(missing))}[/]")
        return 1
    kb, created = client.ensure_kb(args.kb)
    console.print(f"knowledge base [bold]{escape(args.kb)}[/] ({kb['id']}){' created' if created else ''}")
    rows = [Tracked(file=f.name) for f in files]
    for path, row in zip(files, rows, strict=True):
        try:
            row.knowledge_id = client.upload(str(kb["id"]), path)
            row.parse_status = "pending"
        except ApiError as exc:
            if exc.status == 409 and isinstance(exc.data, dict) and exc.data.get("id"):
                row.knowledge_id = str(exc.data["id"])
                row.note = f"duplicate of {row.knowledge_id}"
                row.parse_status = str(exc.data.get("parse_status") or "pending")
            else:
                row.parse_status = "upload failed"
                row.error = exc.message
    _follow(client, rows, console, args.timeout, args.interval)
    bad = [r for r in rows if r.parse_status != "completed"]
    for r in bad:
        console.print(f"[red]✗ {escape(r.file)}[/] {r.parse_status}: {escape(r.error or 'no reason given')}")
    if not bad:
        console.print(f"[green]✓ all {len(rows)} file(s) completed[/]")
    return 1 if bad else 0


# ---- status / search ------------------------------------------------------------------------------------


def stage_tree(spans: dict[str, Any]) -> Tree:
    title = (
        f"[bold]{spans.get('knowledge_id', '')}[/] attempt {spans.get('attempt', '?')} "
        f"parse_status={spans.get('parse_status', '?')} current_stage={spans.get('current_stage') or '-'}"
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
        text = f"{escape(str(s.get('span_id')))} [{style}]{escape(status)}[/]"
        if s.get("error_message"):
            text += f" [red]{escape(str(s.get('error_code', '')))} {escape(str(s['error_message']))}[/]"
        outputs = s.get("outputs") or {}
        if outputs:
            text += " " + escape(", ".join(f"{k}={v}" for k, v in list(outputs.items())[:4]))
        if isinstance(s.get("progress"), dict):
            text += " " + escape(bar(s["progress"]))
        return text

    def add(node: Tree, parent: str, depth: int) -> None:
        for s in children.get(parent, []):
            sid = str(s.get("span_id"))
            child = node.add(label(s))
            if depth < 10 and sid != parent:
                add(child, sid, depth + 1)

    add(tree, "", 0)
    if spans.get("last_error"):
        tree.add(f"[red]last error: {escape(str(spans['last_error']))}[/]")
    return tree


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    client = ApiClient(args.api, args.key)
    spans = client.spans(args.knowledge_id)
    console.print(stage_tree(spans))
    console.print(cost_table(client.cost(args.knowledge_id)))
    return 0


def cost_table(report: dict[str, Any]) -> Table:
    """What the document cost so far, priced with the server's dated price table."""
    title = (
        f"cost: ${report.get('aws_dollars', 0):.6f} AWS + ${report.get('model_dollars', 0):.6f} models "
        f"(prices as of {report.get('prices_as_of', '?')})"
    )
    table = Table(title=title, expand=False)
    for col in ("unit", "quantity", "dollars"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for line in list(report.get("lines") or []) + list(report.get("model_tokens") or []):
        table.add_row(escape(str(line["unit"])), f"{line['quantity']:g}", f"{line['dollars']:.6f}")
    if report.get("workflow_pending"):
        table.caption = "the execution is still running: its state transitions are counted when it ends"
    return table


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    client = ApiClient(args.api, args.key)
    kb = client.find_kb(args.kb)
    if kb is None:
        console.print(f"[red]no knowledge base named {escape(repr(args.kb))}[/]")
        return 1
    hits = client.search(str(kb["id"]), args.query, args.n)
    if not hits:
        console.print("no results")
        return 0
    for i, h in enumerate(hits[: args.n], 1):
        head = f"#{i} score={float(h.get('score', 0)):.4f} {h.get('knowledge_title', '')} chunk={h.get('chunk_id', '')}"
        console.print(Panel(Text(str(h.get("content", ""))), title=escape(head), title_align="left"))
    return 0


# ---- check-corpus -----------------------------------------------------------------------------------------

#: broken on purpose (the MANIFEST's `exercises` column says so): the expected outcome is a clear failure
CORPUS_EXPECTED_FAILURES = frozenset({"amsmath.truncated.pdf", "empty.txt"})


@dataclass
class CorpusOutcome:
    file: str
    file_type: str
    knowledge_id: str = ""
    status: str = "uploading"
    detail: str = ""
    chunks: int = 0
    started: float = 0.0
    seconds: float = 0.0

    @property
    def done(self) -> bool:
        return self.status in TERMINAL or self.status in ("rejected", "missing")

    @property
    def as_expected(self) -> bool:
        if self.file in CORPUS_EXPECTED_FAILURES:
            return self.status in ("failed", "rejected") and bool(self.detail)
        return self.status == "completed"

    def line(self) -> str:
        mark = "ok  " if self.as_expected else "FAIL"
        return (
            f"{mark} {self.file:40} {self.file_type:8} {self.status:10} chunks={self.chunks:<6} "
            f"{self.seconds:6.1f}s {self.detail[:100]}"
        )


def _upload_corpus_file(client: ApiClient, kb_id: str, path: Path, outcome: CorpusOutcome) -> None:
    outcome.started = time.perf_counter()
    if not path.is_file():
        outcome.status, outcome.detail = "missing", f"listed in MANIFEST.tsv but not in {path.parent}"
        return
    try:
        outcome.knowledge_id = client.upload(kb_id, path)
        outcome.status = "pending"
    except ApiError as exc:
        if exc.status == 409 and isinstance(exc.data, dict) and exc.data.get("id"):
            outcome.knowledge_id = str(exc.data["id"])  # already in this knowledge base: follow that row
            outcome.status = "pending"
        else:
            outcome.status, outcome.detail = "rejected", exc.message


def _refresh_outcome(outcome: CorpusOutcome, k: dict[str, Any] | None) -> None:
    """`k`: the file's row as the knowledge base's listing has it; None when the listing lacks it."""
    if k is None:
        outcome.status, outcome.detail = "missing", f"knowledge {outcome.knowledge_id} is not in the listing"
    else:
        outcome.status = str(k.get("parse_status") or outcome.status)
        outcome.detail = str(k.get("error_message") or "")
        outcome.chunks = int(k.get("chunk_count") or 0)
    if outcome.done:
        outcome.seconds = time.perf_counter() - outcome.started


def cmd_check_corpus(args: argparse.Namespace, console: Console) -> int:
    """Every MANIFEST file of the corpus through the running stack, one line per file. Files broken on
    purpose must end `failed` (or be rejected) with a reason, every other file `completed`; exit status 1
    when any file does otherwise."""
    corpus = Path(args.corpus)
    manifest = corpus / "MANIFEST.tsv"
    if not manifest.is_file():
        console.print(f"[red]no MANIFEST.tsv in {escape(str(corpus))} (use --corpus or WEKNORA_CORPUS)[/]")
        return 1
    with manifest.open(encoding="utf-8", newline="") as fh:
        entries = list(csv.DictReader(fh, delimiter="\t"))
    if args.only:
        entries = [e for e in entries if fnmatch.fnmatch(e["file"], args.only)]
    if not entries:
        console.print(f"no MANIFEST.tsv file matches --only {args.only}", markup=False, highlight=False)
        return 1
    client = ApiClient(args.api, args.key)
    kb_name = args.kb or f"corpus-check-{time.strftime('%Y%m%d-%H%M%S')}"
    kb, _ = client.ensure_kb(kb_name)
    header = f"{len(entries)} file(s) into knowledge base {kb_name} ({kb['id']})"
    console.print(header, markup=False, highlight=False, soft_wrap=True)
    outcomes = [CorpusOutcome(e["file"], e["type"]) for e in entries]
    for outcome in outcomes:
        _upload_corpus_file(client, str(kb["id"]), corpus / outcome.file, outcome)
    deadline = time.monotonic() + args.timeout
    status = console.status("following") if console.is_terminal else None
    if status is not None:
        status.start()
    try:
        while True:
            # One listing of the knowledge base a look (a request per 100 rows), not a request per file
            listed = {str(k["id"]): k for k in client.list_knowledge(str(kb["id"]))}
            for outcome in outcomes:
                if not outcome.done:
                    _refresh_outcome(outcome, listed.get(outcome.knowledge_id))
            finished = sum(o.done for o in outcomes)
            if status is not None:
                status.update(f"{finished}/{len(outcomes)} file(s) finished")
            if finished == len(outcomes) or time.monotonic() > deadline:
                break
            time.sleep(args.interval)
    finally:
        if status is not None:
            status.stop()
    for outcome in outcomes:
        if not outcome.done:
            outcome.detail = outcome.detail or f"still {outcome.status} after {args.timeout:.0f}s"
        console.print(outcome.line(), markup=False, highlight=False, soft_wrap=True)
    bad = sum(not o.as_expected for o in outcomes)
    console.print(f"{len(outcomes) - bad} passed, {bad} failed", highlight=False)
    return 1 if bad else 0


# ---- up ---------------------------------------------------------------------------------------------------


def _load_project_app() -> Any:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module("app").app


def cmd_up(args: argparse.Namespace, console: Console, stop: threading.Event | None = None) -> int:
    from chalicelib.local.runtime import LocalRuntime
    from chalicelib.local.snapshot import MotoSnapshot

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    state_dir = Path(os.environ.get("WEKNORA_STATE_DIR", ".weknora")).resolve()
    os.environ["WEKNORA_STATE_DIR"] = str(state_dir)  # before the app is imported
    snapshot_dir = state_dir / SNAPSHOT_DIR
    if state_dir.exists() and (args.fresh or not (snapshot_dir / "state.json").is_file()):
        # Files and index entries without the tables that point at them (an old or --fresh state) would be
        # orphans: a fresh stack starts from an empty state dir.
        shutil.rmtree(state_dir)
        console.print(f"[dim]started a fresh local state in {state_dir}[/]")
    key = default_key()
    params = dict(p.split("=", 1) for p in args.param)
    # The local stack's operator key (the admin routes, `weknora-ingest tenant|key|dlq`): a plain
    # environment variable here, where on AWS the API function reads an SSM SecureString. `--param
    # OperatorKey=...` (the template parameter it used to be) still sets it.
    operator_key = params.pop("OperatorKey", "") or default_operator_key()
    runtime = LocalRuntime(
        _load_project_app,
        args.template,
        params,
        retry_delay_seconds=args.retry_delay,
        state_dir=state_dir,
        port=args.moto_port,
        separate_moto_process=True,  # moto's request handling off the stages' GIL (see moto_server.py)
        concurrency=args.concurrency,
        project_dir=Path.cwd(),
        stage=args.stage,  # default "local": .chalice/config.json's stage for local:// storage
        env={"WEKNORA_OPERATOR_KEY": operator_key},
    )
    with console.status("starting moto, provisioning, loading app.py ..."):
        runtime.start(background=False)
        # moto's backends are process-wide: start from an empty server (and the template), so what the
        # stack holds is exactly the snapshot (a no-op in a fresh process; not so for a second `up` in one).
        runtime.reset()
    snapshot = MotoSnapshot(snapshot_dir, runtime.server.url, runtime.region)
    try:
        try:
            bootstrap = importlib.import_module("chalicelib.bootstrap")
        except ImportError:
            bootstrap = None
        if bootstrap is not None and hasattr(bootstrap, "set_deps"):
            bootstrap.set_deps(None)  # adapters built for an earlier server in this process point elsewhere
        restored = ""
        if snapshot.exists():
            counts = snapshot.restore()
            restored = f"restored {counts.line()} from {snapshot_dir}"
            if bootstrap is not None and hasattr(bootstrap, "get_deps"):
                from chalicelib.operations.recovery import recover_after_restart

                recovered = recover_after_restart(bootstrap.get_deps())
                restored += (
                    f"; {len(recovered.restarted)} in-flight document(s) started over, "
                    f"{len(recovered.deletes_redriven)} delete(s) resumed"
                )
            console.print(restored, markup=False, highlight=False)
        if bootstrap is not None and hasattr(bootstrap, "get_deps"):
            from chalicelib.operations.tenants import ensure_local_tenant

            ensure_local_tenant(bootstrap.get_deps(), key)
        runtime.start_workers()
        base = runtime.serve_http("127.0.0.1", args.port, access_log=args.access_log)
        info = Table.grid(padding=(0, 2))
        info.add_row("API", f"[bold]{base}/api/v1[/]")
        info.add_row("API key", f"[bold]{key}[/]  (header X-API-Key)")
        info.add_row("operator key", f"{operator_key}  (header X-Operator-Key)")
        info.add_row("AWS (moto)", runtime.server.url)
        info.add_row("state", f"{state_dir} (kept across restarts; `up --fresh` starts clean)")
        info.add_row("SQS handlers", ", ".join(p.function_name for p in runtime.pollers) or "-")
        info.add_row(
            "schedules", ", ".join(f"{r.name} {r.expression.text}" for r in runtime.scheduler.rules) or "-"
        )
        if bootstrap is not None and hasattr(bootstrap, "get_deps"):
            deps = bootstrap.get_deps()
            overview = enrichment_overview(
                deps.settings, ocr_available=deps.ocr() is not None, asr_available=deps.asr() is not None
            )
            info.add_row("enrichment", "\n".join(overview))
        console.print(Panel(info, title="weknora-ingest up", subtitle="Ctrl-C to stop"))
        stop = stop or threading.Event()
        if threading.current_thread() is threading.main_thread():
            # Explicit SIGINT too: a shell that backgrounds the process sets SIGINT to "ignore".
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            signal.signal(signal.SIGINT, lambda *_: stop.set())
        next_save = time.monotonic() + args.snapshot_interval
        try:
            while not stop.wait(0.5):
                if args.snapshot_interval > 0 and time.monotonic() >= next_save:
                    snapshot.save_while_running()  # a crash (kill -9) loses at most one interval
                    next_save = time.monotonic() + args.snapshot_interval
        except KeyboardInterrupt:
            pass
        runtime.stop_workers()
        counts = snapshot.save()
        console.print(f"saved {counts.line()} to {snapshot_dir}", markup=False, highlight=False)
    finally:
        runtime.stop()
    console.print("stopped (the local state is kept; `weknora-ingest up --fresh` starts clean)")
    args.handlers_still_running = any(p.running for p in runtime.pollers)
    return 0


# ---- operators: tenants, keys, dead letters ---------------------------------------------------------------


def operator_client(args: argparse.Namespace) -> ApiClient:
    client = ApiClient(args.api, "")
    client.session.headers.pop("X-API-Key", None)
    client.session.headers["X-Operator-Key"] = args.operator_key
    return client


def _print_rows(console: Console, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    table = Table(expand=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(escape(str(row.get(c, "") if row.get(c) is not None else "")) for c in columns))
    console.print(table)


def cmd_tenant(args: argparse.Namespace, console: Console) -> int:
    client = operator_client(args)
    if args.action == "list":
        _print_rows(
            console, ("id", "name", "created_at", "storage_used"), client.call("GET", "/admin/tenants")
        )
        return 0
    body = {"name": args.name, "key_name": args.key_name, **_key_access(args)}
    data = client.call("POST", "/admin/tenants", json=body)
    console.print(f"tenant {data['tenant']['id']} ({data['tenant']['name']})", markup=False, highlight=False)
    console.print(f"API key {data['key']['id']}: {data['api_key']}", markup=False, highlight=False)
    console.print("the key is shown only now: keep it (only its hash is stored)")
    return 0


def _key_access(args: argparse.Namespace) -> dict[str, Any]:
    """A key's scope and, when given, the only knowledge bases it may touch."""
    return {"scope": args.scope, **({"kb_ids": args.kb} if args.kb else {})}


def cmd_key(args: argparse.Namespace, console: Console) -> int:
    client = operator_client(args)
    base = f"/admin/tenants/{args.tenant_id}/api-keys"
    if args.action == "list":
        rows = client.call("GET", base)
        _print_rows(console, ("id", "name", "scope", "kb_ids", "status", "created_at", "revoked_at"), rows)
    elif args.action == "issue":
        data = client.call("POST", base, json={"name": args.name, **_key_access(args)})
        console.print(f"API key {data['key']['id']}: {data['api_key']}", markup=False, highlight=False)
        console.print("the key is shown only now: keep it (only its hash is stored)")
    else:
        data = client.call("DELETE", f"{base}/{args.key_id}")
        console.print(f"API key {data['id']} {data['status']}", markup=False, highlight=False)
    return 0


def cmd_dlq(args: argparse.Namespace, console: Console) -> int:
    client = operator_client(args)
    if args.action == "list":
        params: dict[str, Any] = {"limit": args.limit}
        if args.queue:
            params["queue"] = args.queue
        letters = client.call("GET", "/admin/dlq", params=params)
        rows = [
            {
                **letter,
                "status": (letter.get("row") or {}).get(
                    "parse_status", "gone" if letter.get("knowledge_id") else ""
                ),
            }
            for letter in letters
        ]
        _print_rows(console, ("queue", "knowledge_id", "attempt", "status", "reason", "message_id"), rows)
        console.print(f"{len(letters)} dead letter(s)", highlight=False)
        return 0
    body: dict[str, Any] = {"limit": args.limit}
    if args.queue:
        body["queue"] = args.queue
    report = client.call("POST", "/admin/dlq/redrive", json=body)
    _print_rows(console, ("queue", "message_id", "outcome", "knowledge_id", "attempt"), report["messages"])
    counts = ", ".join(f"{k}={v}" for k, v in sorted(report["counts"].items())) or "nothing to redrive"
    console.print(counts, markup=False, highlight=False)
    return 0


# ---- entry point ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="weknora-ingest", description="Local WeKnora-style ingestion pipeline")
    sub = p.add_subparsers(dest="command", required=True)

    def api_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--api", default=default_api(), help="API base URL (default %(default)s)")
        sp.add_argument("--key", default=default_key(), help="tenant API key (env WEKNORA_API_KEY)")

    up = sub.add_parser("up", help="run moto + the pipeline + the HTTP API in the foreground")
    up.add_argument("--port", type=int, default=int(os.environ.get("WEKNORA_PORT", "8000")))
    up.add_argument("--template", default="infra/template.json")
    up.add_argument("--access-log", action="store_true", help="log every HTTP request, not only errors")
    up.add_argument(
        "--stage", default="local", help="chalice stage in .chalice/config.json (default %(default)s)"
    )
    up.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="template parameter")
    up.add_argument("--moto-port", type=int, default=0, help="moto server port (default: any free port)")
    up.add_argument(
        "--concurrency",
        type=int,
        default=LOCAL_CONCURRENCY,
        help="invocations each stage queue runs at once, as Lambda runs several (default %(default)s)",
    )
    up.add_argument("--fresh", action="store_true", help="start from an empty state (deletes the state dir)")
    up.add_argument(
        "--snapshot-interval",
        type=float,
        default=60.0,
        help="seconds between snapshots of the local state while running (0: only at stop)",
    )
    up.add_argument(
        "--retry-delay",
        type=int,
        default=None,
        help="seconds before a failed SQS message is retried (default: queue)",
    )

    ing = sub.add_parser("ingest", help="upload files into a knowledge base and follow them to the end")
    ing.add_argument("files", nargs="+")
    ing.add_argument("--kb", required=True, help="knowledge base name (created if missing)")
    ing.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    ing.add_argument("--interval", type=float, default=0.5, help=argparse.SUPPRESS)
    api_opts(ing)

    st = sub.add_parser("status", help="show the stage tree of one knowledge item")
    st.add_argument("knowledge_id")
    api_opts(st)

    se = sub.add_parser("search", help="hybrid search in a knowledge base")
    se.add_argument("--kb", required=True)
    se.add_argument("query")
    se.add_argument("-n", type=int, default=5, help="number of chunks")
    api_opts(se)

    def operator_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--api", default=default_api(), help="API base URL (default %(default)s)")
        sp.add_argument(
            "--operator-key", default=default_operator_key(), help="operator key (env WEKNORA_OPERATOR_KEY)"
        )

    def access_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--scope", choices=("read", "write", "admin"), default="admin", help="the key's scope"
        )
        sp.add_argument(
            "--kb", action="append", default=[], help="limit the key to this knowledge base (repeat)"
        )

    te = sub.add_parser("tenant", help="operators: create or list tenants")
    te_sub = te.add_subparsers(dest="action", required=True)
    te_new = te_sub.add_parser("create", help="a new tenant and its first API key (shown once)")
    te_new.add_argument("name")
    te_new.add_argument("--key-name", default="", help="a label for the first key")
    access_opts(te_new)
    operator_opts(te_new)
    operator_opts(te_sub.add_parser("list", help="every tenant"))

    ke = sub.add_parser("key", help="operators: a tenant's API keys")
    ke_sub = ke.add_subparsers(dest="action", required=True)
    ke_issue = ke_sub.add_parser("issue", help="another key for a tenant (shown once)")
    ke_issue.add_argument("tenant_id")
    ke_issue.add_argument("--name", default="", help="a label for the key")
    access_opts(ke_issue)
    operator_opts(ke_issue)
    ke_list = ke_sub.add_parser("list", help="a tenant's keys (never the keys themselves)")
    ke_list.add_argument("tenant_id")
    operator_opts(ke_list)
    ke_revoke = ke_sub.add_parser("revoke", help="revoke a key (refused at once)")
    ke_revoke.add_argument("tenant_id")
    ke_revoke.add_argument("key_id")
    operator_opts(ke_revoke)

    dl = sub.add_parser("dlq", help="operators: dead-letter queues")
    dl_sub = dl.add_subparsers(dest="action", required=True)
    for action, text in (
        ("list", "what the DLQs hold, with each row's state"),
        ("redrive", "failed rows start over at a new attempt; letters of deleted rows are dropped"),
    ):
        sp = dl_sub.add_parser(action, help=text)
        sp.add_argument("--queue", help="one stage queue (default: every queue)")
        sp.add_argument("--limit", type=int, default=100, help="at most this many messages")
        operator_opts(sp)

    cc = sub.add_parser(
        "check-corpus",
        help="run every MANIFEST file of the dev corpus through the running stack, one line per file",
    )
    cc.add_argument(
        "--corpus",
        type=Path,
        default=default_corpus(Path.cwd()),
        help="corpus directory with MANIFEST.tsv (default %(default)s; env WEKNORA_CORPUS)",
    )
    cc.add_argument("--only", help="a glob over file names")
    cc.add_argument("--kb", help="knowledge base name (default: a new corpus-check-<time>)")
    cc.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds")
    cc.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    api_opts(cc)
    return p


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = console or Console()
    commands = {
        "up": cmd_up,
        "ingest": cmd_ingest,
        "status": cmd_status,
        "search": cmd_search,
        "check-corpus": cmd_check_corpus,
        "tenant": cmd_tenant,
        "key": cmd_key,
        "dlq": cmd_dlq,
    }
    try:
        code = int(commands[args.command](args, console))
        if getattr(args, "handlers_still_running", False) and argv is None:
            # A handler thread still inside native code (ONNX Runtime) aborts the interpreter's shutdown
            # ("terminate called without an active exception"); leave without waiting for it.
            console.print("a handler was still running; exiting without waiting for it")
            sys.stdout.flush()
            os._exit(code)
        return code
    except ApiError as exc:
        console.print(f"[red]API error {exc.status} {escape(exc.code)}: {escape(exc.message)}[/]")
        return 1


if __name__ == "__main__":
    sys.exit(main())
