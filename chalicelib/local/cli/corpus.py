"""`check-corpus`: every MANIFEST file of the dev corpus through the running stack, one line per file."""

from __future__ import annotations

import argparse
import csv
import fnmatch
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from chalicelib.local.cli.client import ApiClient, ApiError, CliError
from chalicelib.local.cli.output import client as make_client
from chalicelib.local.cli.output import command, plain, print_json
from chalicelib.settings import default_corpus

TERMINAL = {"completed", "failed", "cancelled"}

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
    except OSError as exc:  # there, but unreadable
        outcome.status, outcome.detail = "missing", f"cannot read {path}: {exc.strerror or exc}"


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
        raise CliError("corpus_not_found", f"no MANIFEST.tsv in {corpus} (use --corpus or WEKNORA_CORPUS)")
    with manifest.open(encoding="utf-8", newline="") as fh:
        entries = list(csv.DictReader(fh, delimiter="\t"))
    if args.only:
        entries = [e for e in entries if fnmatch.fnmatch(e["file"], args.only)]
    if not entries:
        raise CliError("corpus_empty", f"no MANIFEST.tsv file matches --only {args.only}")
    client = make_client(args)
    kb_name = args.kb or f"corpus-check-{time.strftime('%Y%m%d-%H%M%S')}"
    kb, _ = client.ensure_kb(kb_name)
    header = f"{len(entries)} file(s) into knowledge base {kb_name} ({kb['id']})"
    if not args.json:
        plain(console, header)
    outcomes = [CorpusOutcome(e["file"], e["type"]) for e in entries]
    for outcome in outcomes:
        _upload_corpus_file(client, str(kb["id"]), corpus / outcome.file, outcome)
    deadline = time.monotonic() + args.timeout
    status = console.status("following") if console.is_terminal and not args.json else None
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
        if not args.json:
            plain(console, outcome.line())
    bad = sum(not o.as_expected for o in outcomes)
    if args.json:
        print_json(console, [{**asdict(o), "as_expected": o.as_expected} for o in outcomes])
        return 1 if bad else 0
    console.print(f"{len(outcomes) - bad} passed, {bad} failed", highlight=False)
    return 1 if bad else 0


def register(sub: Any) -> None:
    cc = command(
        sub,
        "check-corpus",
        "run every MANIFEST file of the dev corpus through the running stack, one line per file",
        cmd_check_corpus,
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
