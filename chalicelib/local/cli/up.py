"""`up`: moto, the pipeline and the HTTP API in the foreground, with a console a person can read: a panel at
start, one line per document that completes or fails, access lines only with `--verbose`."""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from chalicelib.local.cli.client import CliError, default_key, default_operator_key
from chalicelib.local.cli.output import name_value_arg, plain
from chalicelib.services.offered import enrichment_overview

#: where `up` keeps moto's state between runs, inside the state dir
SNAPSHOT_DIR = "moto-snapshot"
#: the file `up` writes into a state dir it made: such a directory is its to empty
STATE_MARKER = ".weknora-state"
#: what `up` keeps in a state dir (the files, the embedded index, moto's snapshot): all it ever deletes
STATE_ENTRIES = ("files", "index", SNAPSHOT_DIR)
#: invocations each stage queue runs at once under `up` (and the benches): on AWS a queue's Lambda runs
#: several; here two let one document's stage work while another's waits on the tables
LOCAL_CONCURRENCY = 2


def _load_project_app() -> Any:
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    return importlib.import_module("app").app


def start_fresh(state_dir: Path) -> None:
    """Empties a state dir for a fresh stack: only what `up` keeps there, and only in a directory `up`
    made (its marker, or nothing but its own entries); anything else is refused with a CliError, so a
    WEKNORA_STATE_DIR pointed at a directory of one's own is never wiped."""
    if state_dir.exists() and not state_dir.is_dir():
        raise CliError("state_dir_not_a_directory", f"WEKNORA_STATE_DIR {state_dir} is not a directory")
    if state_dir.is_dir():
        foreign = sorted(p.name for p in state_dir.iterdir() if p.name not in (*STATE_ENTRIES, STATE_MARKER))
        if foreign and not (state_dir / STATE_MARKER).is_file():
            raise CliError(
                "state_dir_not_ours",
                f"WEKNORA_STATE_DIR {state_dir} holds files `up` did not make ({', '.join(foreign[:3])}"
                f"{', …' if len(foreign) > 3 else ''}): not emptying it; point WEKNORA_STATE_DIR at a new or "
                "empty directory",
            )
        for name in STATE_ENTRIES:
            if (state_dir / name).is_dir():
                shutil.rmtree(state_dir / name)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / STATE_MARKER).write_text(
        "made by `weknora-ingest up`; `up --fresh` empties this directory\n"
    )


def check_port(port: int, host: str = "127.0.0.1") -> None:
    """A CliError unless the API can listen on the port (bound as the HTTP server binds: SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise _port_error(port, exc) from exc


def _port_error(port: int, exc: OSError) -> CliError:
    if exc.errno == errno.EADDRINUSE:
        return CliError("port_in_use", f"port {port} is in use (another `up`?): choose one with --port")
    return CliError("port_unusable", f"cannot listen on port {port}: {exc.strerror or exc}")


def cmd_up(args: argparse.Namespace, console: Console, stop: threading.Event | None = None) -> int:
    from chalicelib.local.runtime import LocalRuntime
    from chalicelib.local.snapshot import MotoSnapshot, snapshot_exists

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    state_dir = Path(os.environ.get("WEKNORA_STATE_DIR", ".weknora")).resolve()
    os.environ["WEKNORA_STATE_DIR"] = str(state_dir)  # before the app is imported
    snapshot_dir = state_dir / SNAPSHOT_DIR
    check_port(args.port)  # before the state is touched, and not after moto and the app started
    if args.fresh or not snapshot_exists(snapshot_dir):
        # Files and index entries without the tables that point at them (an old or --fresh state) would be
        # orphans: a fresh stack starts from an empty state dir.
        existed = state_dir.exists()
        start_fresh(state_dir)
        if existed:
            console.print(f"started a fresh local state in {state_dir}", style="dim", markup=False)
    key = default_key()
    params = dict(args.param)
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
        try:
            base = runtime.serve_http("127.0.0.1", args.port, access_log=args.verbose)
        except OSError as exc:  # taken since the check at the start
            raise _port_error(args.port, exc) from exc
        events = None
        if bootstrap is not None and hasattr(bootstrap, "get_deps"):
            from chalicelib.local.doc_events import DocumentEvents

            get_deps = bootstrap.get_deps
            events = DocumentEvents(
                lambda: get_deps().knowledge,
                lambda line: plain(console, f"{time.strftime('%H:%M:%S')} {line}"),
            )
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
        if events is not None:
            events.observe(get_deps())  # rows created here are followed from their first moment
            events.start()
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
        if events is not None:
            events.stop()
        runtime.stop_workers()
        counts = snapshot.save()
        console.print(f"saved {counts.line()} to {snapshot_dir}", markup=False, highlight=False)
    finally:
        runtime.stop()
    console.print("stopped (the local state is kept; `weknora-ingest up --fresh` starts clean)")
    args.handlers_still_running = any(p.running for p in runtime.pollers)
    return 0


def register(sub: Any) -> None:
    up = sub.add_parser(
        "up",
        help="run moto + the pipeline + the HTTP API in the foreground",
        description="run moto + the pipeline + the HTTP API in the foreground (env WEKNORA_PORT, "
        "WEKNORA_API_KEY, WEKNORA_OPERATOR_KEY, WEKNORA_STATE_DIR)",
    )
    up.set_defaults(handler=cmd_up)
    up.add_argument(
        "--port", type=int, default=int(os.environ.get("WEKNORA_PORT", "8000")), help="env WEKNORA_PORT"
    )
    up.add_argument("--template", default="infra/template.json")
    up.add_argument(
        "--verbose",
        "-v",
        "--access-log",
        dest="verbose",
        action="store_true",
        help="log every HTTP request too (without it: errors and one line per finished document)",
    )
    up.add_argument(
        "--stage", default="local", help="chalice stage in .chalice/config.json (default %(default)s)"
    )
    up.add_argument(
        "--param",
        action="append",
        default=[],
        type=name_value_arg,
        metavar="NAME=VALUE",
        help="template parameter",
    )
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
