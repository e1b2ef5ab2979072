"""``weknora-ingest``: run the whole pipeline locally (``up``) and drive every tenant and operator route of
its API (one module per command group; `routes.ROUTE_COMMANDS` names the command of each route).

Every command takes ``--api`` (env WEKNORA_API), a key (``--key``, env WEKNORA_API_KEY; operators
``--operator-key``, env WEKNORA_OPERATOR_KEY) and ``--json`` (the API's ``data`` as JSON). An API error
prints its status, stable code and message and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import time  # noqa: F401 - tests slow the follow loop through `cli.time.sleep`
from collections.abc import Sequence

from rich.console import Console

from chalicelib.local.cli import corpus, faq, follow, kb, knowledge, operator, service, up, webhooks
from chalicelib.local.cli.client import (
    DEFAULT_KEY,
    DEFAULT_OPERATOR_KEY,
    DIRECT_UPLOAD_MAX_BYTES,
    ENVIRONMENT,
    ApiClient,
    ApiError,
    CliError,
    default_api,
    default_key,
    default_operator_key,
)
from chalicelib.local.cli.corpus import CORPUS_EXPECTED_FAILURES, cmd_check_corpus
from chalicelib.local.cli.follow import REFRESH_PER_LOOK, cmd_ingest, cmd_status, stage_tree
from chalicelib.local.cli.kb import console_url, cost_table
from chalicelib.local.cli.operator import _key_access
from chalicelib.local.cli.output import plain, print_json
from chalicelib.local.cli.up import LOCAL_CONCURRENCY, SNAPSHOT_DIR, cmd_up

__all__ = [
    "CORPUS_EXPECTED_FAILURES",
    "DEFAULT_KEY",
    "DEFAULT_OPERATOR_KEY",
    "DIRECT_UPLOAD_MAX_BYTES",
    "LOCAL_CONCURRENCY",
    "REFRESH_PER_LOOK",
    "SNAPSHOT_DIR",
    "ApiClient",
    "ApiError",
    "CliError",
    "_key_access",
    "build_parser",
    "cmd_check_corpus",
    "cmd_ingest",
    "cmd_status",
    "cmd_up",
    "console_url",
    "cost_table",
    "default_api",
    "default_key",
    "default_operator_key",
    "main",
    "stage_tree",
]


def build_parser() -> argparse.ArgumentParser:
    epilog = "environment:\n" + "\n".join(f"  {name:22} {text}" for name, text in ENVIRONMENT.items())
    p = argparse.ArgumentParser(
        prog="weknora-ingest",
        description="WeKnora-style ingestion: run the stack locally and drive its API",
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for group in (up, follow, kb, knowledge, faq, service, operator, corpus, webhooks):
        group.register(sub)
    return p


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = console or Console(emoji=False)  # ":fire:" in a name is printed as written
    try:
        code = int(args.handler(args, console))
        if getattr(args, "handlers_still_running", False) and argv is None:
            # A handler thread still inside native code (ONNX Runtime) aborts the interpreter's shutdown
            # ("terminate called without an active exception"); leave without waiting for it.
            console.print("a handler was still running; exiting without waiting for it")
            sys.stdout.flush()
            os._exit(code)
        return code
    except ApiError as exc:
        if getattr(args, "json", False):
            print_json(console, {"error": {"status": exc.status, "code": exc.code, "message": exc.message}})
        else:
            plain(console, f"API error {exc.status} {exc.code}: {exc.message}", style="red")
        return 1
    except CliError as exc:
        if getattr(args, "json", False):
            print_json(console, {"error": {"status": 0, "code": exc.code, "message": exc.message}})
        else:
            plain(console, exc.message, style="red")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
