"""Issue 27 (2c): a soak through the local stack exactly as `make run` starts it.

Starts `weknora-ingest up --fresh` (moto in its own process, the embedding workers, the periodic snapshot)
in a subprocess with a state dir of its own, and feeds it `--docs` documents over its HTTP API: the dev
corpus's files named in `--files` (default `SOAK_FILES`), round after round, each round into a knowledge
base of its own. Every document is distinct: copy N of a file carries a fixed-width tag in its text every
few words (`distinct_copies.py`), so no chunk of it is in the embedding cache and each copy of a file does
the same work as the first; the hundreds compared are the same files (a hundred is a whole number of
rounds with the default 20 files). Uploads are paced: at most `--in-flight` documents unfinished at once.
`--warmup` documents go through first and are not counted (the models load, the first KB is made): the
clock and the CPU counts start when they are done.

It reports, per group of documents (in the order they finished): documents/minute, the CPU seconds of each
process of the stack (moto's server, the `up` process, the embedding workers) spent on them and their sum
per document (wall speed follows the shared machine's load; CPU per document follows the work), the texts
embedded and cache hits (from each document's spans), and the resident memory of every process at the
group's end; RSS over time (every 30 s) and peak RSS per process; and at the end checks that nothing is
stuck (every document finished, no message in a dead-letter queue, no execution RUNNING), failed, or
duplicated (no chunk id twice, and every copy of one file has the same number of chunks).

Goal (issue 27): the last hundred within 20% of the first hundred's speed, memory flat.

    .venv/bin/python bench/bench_soak.py [--docs 1000] [--in-flight 6] [--snapshot-interval 60]

Kinds left out, and why: PDF, legacy .doc/.xls/.ppt and MHTML (no honest way to make a distinct copy by
editing text), audio and images (Whisper, OCR: seconds to minutes each, which would measure those engines,
not how the stack holds up as its state grows). The default files are the corpus's small ones (a parse of
under 13,000 characters each, 10 types) so that 1,000 documents fit in well under an hour of a shared
2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from distinct_copies import EDITABLE, distinct_copy

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path("/work/shared/corpus")
#: 20 small files of 10 types: a hundred documents is five whole rounds
SOAK_FILES = [
    "axios-package.json",
    "beamer-README.md",
    "debian-faq-basic-defs.ko.docx",
    "debian-faq-getting-debian.md",
    "debian-faq-software.ko.html",
    "korean-bill-1809890.ko.txt",
    "latex-base-README.markdown",
    "lshort-korean-README.md",
    "schema-639-3.json",
    "statsmodels-statecrime.csv",
    "statsmodels-statecrime.xlsx",
    "vega-datasets-index.json",
    "python-pptx-placeholders.pptx",
    "python-docx-tbl-styled.docx",
    "debian-faq-basic-defs.pptx",
    "python-howto-sorting.docx",
    "python-howto-sorting.epub",
    "man-regex.7.txt",
    "python-howto-sorting.htm",
    "debian-faq-ftparchives.ko.html",
]
MAX_BYTES = 1_000_000
TERMINAL = {"completed", "failed", "cancelled"}
PAGE = 100  # documents per reported group (`--group`)
MOTO_TRACEMALLOC = "WEKNORA_MOTO_TRACEMALLOC"  # chalicelib.local.moto_tracing.ENV


def pick_files(corpus: Path, names: list[str], max_bytes: int = MAX_BYTES) -> list[Path]:
    """The named files (`*`: every editable one up to `max_bytes`) whose distinct copies differ."""
    if names == ["*"]:
        candidates = [
            p
            for p in sorted(corpus.iterdir())
            if ".truth." not in p.name and 0 < p.stat().st_size <= max_bytes
        ]
    else:
        candidates = [corpus / name for name in names]
    files = []
    for path in candidates:
        if path.suffix.lower() not in EDITABLE:
            continue
        data = path.read_bytes()
        if distinct_copy(path, data, 1) == data:  # no text to tag (a picture-only docx, inline strings)
            print(f"left out: {path.name} (its copies would not differ)", flush=True)
            continue
        files.append(path)
    return files


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------- processes


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def process_tree(root: int) -> list[int]:
    pids, todo = [], [root]
    while todo:
        pid = todo.pop()
        pids.append(pid)
        todo += _children(pid)
    return pids


def _status(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) // 1024  # MB
    return fields


def _cpu_seconds(pid: int) -> float:
    parts = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def role(pid: int, root: int) -> str:
    if pid == root:
        return "up"
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    if "moto_server" in cmdline:
        return "moto"
    if "multiprocessing" in cmdline or "spawn_main" in cmdline or "forkserver" in cmdline:
        return "worker"
    return "other"


def sample(root: int) -> dict[str, dict[str, Any]]:
    """pid -> role, RSS and peak RSS (MB), CPU seconds."""
    seen = {}
    for pid in process_tree(root):
        try:
            status = _status(pid)
            seen[str(pid)] = {
                "role": role(pid, root),
                "rss_mb": status.get("VmRSS", 0),
                "hwm_mb": status.get("VmHWM", 0),
                "cpu_s": round(_cpu_seconds(pid), 1),
            }
        except (OSError, IndexError, ValueError):
            continue
    return seen


# ---------------------------------------------------------------- the stack over HTTP


class Api:
    def __init__(self, base: str, key: str) -> None:
        self.base = base
        self.session = requests.Session()
        self.session.headers["X-API-Key"] = key

    def data(self, method: str, path: str, **kw: Any) -> Any:
        for attempt in range(5):
            try:
                response = self.session.request(method, self.base + path, timeout=120, **kw)
            except requests.ConnectionError:
                if attempt == 4:
                    raise
                time.sleep(2)
                continue
            if response.status_code in (429, 502, 503) and attempt < 4:
                time.sleep(2)
                continue
            response.raise_for_status()
            return response.json()["data"]
        raise RuntimeError("unreachable")

    def chunk_ids(self, knowledge_id: str) -> list[str]:
        ids, cursor = [], ""
        while True:
            page = self.data(
                "GET", f"/knowledge/{knowledge_id}/chunks", params={"limit": 200, "cursor": cursor}
            )
            ids += [c["id"] for c in page["items"]]
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return ids


def start_up(
    state_dir: Path, port: int, moto_port: int, key: str, interval: float, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "WEKNORA_STATE_DIR": str(state_dir),
        "WEKNORA_API_KEY": key,
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    command = [
        sys.executable, "-m", "chalicelib.local.cli", "up", "--fresh", "--port", str(port),
        "--moto-port", str(moto_port), "--snapshot-interval", str(interval),
    ]  # fmt: skip
    out = log.open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_ready(api: Api, process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"`up` exited with {process.returncode}")
        try:
            api.data("GET", "/knowledge-bases")
            return
        except (requests.ConnectionError, requests.HTTPError):
            time.sleep(1)
    raise TimeoutError("`up` did not answer")


def leftovers(moto_url: str) -> dict[str, Any]:
    """Messages in dead-letter queues and executions still RUNNING (moto asked directly)."""
    import boto3

    session = boto3.Session(
        region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    sqs = session.client("sqs", endpoint_url=moto_url)
    dead: dict[str, int] = {}
    queued: dict[str, int] = {}
    for url in sqs.list_queues().get("QueueUrls", []):
        attrs = sqs.get_queue_attributes(
            QueueUrl=url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        count = int(attrs["ApproximateNumberOfMessages"]) + int(
            attrs["ApproximateNumberOfMessagesNotVisible"]
        )
        name = url.rsplit("/", 1)[-1]
        if count:
            (dead if name.endswith("-dlq") else queued)[name] = count
    sfn = session.client("stepfunctions", endpoint_url=moto_url)
    running = 0
    for machine in sfn.list_state_machines()["stateMachines"]:
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=machine["stateMachineArn"], statusFilter="RUNNING"
        ):
            running += len(page["executions"])
    return {"dead_letters": dead, "queued": queued, "running_executions": running}


# ---------------------------------------------------------------- the soak


def run(
    docs: int,
    in_flight: int,
    interval: float,
    per_doc_timeout: float,
    corpus: Path,
    until: float | None,
    names: list[str],
    max_bytes: int = MAX_BYTES,
    warmup: int = 20,
) -> dict[str, Any]:
    """`until` (epoch seconds): no upload after it; the run ends with the documents already uploaded.
    `warmup` documents go through first (the models load, the tables are made) and are not counted."""
    files = pick_files(corpus, names, max_bytes)
    contents = {f.name: f.read_bytes() for f in files}
    work = Path(tempfile.mkdtemp(prefix="bench-soak-"))
    port, moto_port = free_port(), free_port()
    key = f"soak-{uuid.uuid4().hex[:8]}"
    log = work / "up.log"
    load_before = os.getloadavg()
    process = start_up(work / "state", port, moto_port, key, interval, log)
    api = Api(f"http://127.0.0.1:{port}/api/v1", key)
    try:
        wait_ready(api, process)
        kbs: dict[int, str] = {}
        pending: dict[str, dict[str, Any]] = {}
        finished: list[dict[str, Any]] = []
        samples: list[dict[str, Any]] = []
        group_ends: list[dict[str, Any]] = []
        started = time.monotonic()
        next_sample = started
        heap_dumps = 0
        uploaded = 0
        total = warmup + docs
        while len(finished) < total:
            if until is not None and time.time() > until and uploaded < total:
                print(f"time is up: {uploaded} uploaded, the run ends with them", flush=True)
                total = uploaded
                docs = max(0, total - warmup)
                if len(finished) >= total:
                    break
            while (
                uploaded < total
                and len(pending) < in_flight
                and (uploaded < warmup or len(finished) >= warmup)
            ):
                round_no, index = divmod(uploaded, len(files))
                if round_no not in kbs:
                    kbs[round_no] = api.data("POST", "/knowledge-bases", json={"name": f"soak-{round_no}"})[
                        "id"
                    ]
                path = files[index]
                body = distinct_copy(path, contents[path.name], uploaded + 1)
                row = api.data(
                    "POST",
                    f"/knowledge-bases/{kbs[round_no]}/knowledge/file",
                    files={"file": (path.name, body)},
                )
                pending[row["id"]] = {
                    "id": row["id"],
                    "file": path.name,
                    "copy": uploaded + 1,
                    "uploaded": time.monotonic() - started,
                }
                uploaded += 1
            time.sleep(1.0)
            for knowledge_id in list(pending):
                row = api.data("GET", f"/knowledge/{knowledge_id}")
                now = time.monotonic() - started
                if row["parse_status"] in TERMINAL:
                    doc = pending.pop(knowledge_id)
                    doc.update(status=row["parse_status"], finished=now, error=row.get("error_message") or "")
                    doc.update(embedding_figures(api, knowledge_id))
                    finished.append(doc)
                    measured = len(finished) - warmup
                    if measured >= 0 and (measured % PAGE == 0 or measured == docs):
                        snap = sample(process.pid)
                        if os.environ.get(MOTO_TRACEMALLOC):  # moto dumps its heap (moto_tracing)
                            heap_dumps += 1
                            for pid, seen in snap.items():
                                if seen["role"] == "moto":
                                    os.kill(int(pid), signal.SIGUSR1)
                        group_ends.append({"finished": measured, "t": now, "cpu": cpu_by_role(snap)})
                        samples.append({"finished": measured, "t": round(now, 1), "processes": snap})
                        print(f"{measured} finished at {now:.0f} s; {_rss_line(snap)}; "
                              f"load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
                elif now - doc_uploaded(pending[knowledge_id]) > per_doc_timeout:
                    raise TimeoutError(f"{knowledge_id} ({pending[knowledge_id]['file']}) stuck: {row}")
            if time.monotonic() >= next_sample:
                snap = sample(process.pid)
                samples.append(
                    {
                        "finished": len(finished) - warmup,
                        "t": round(time.monotonic() - started, 1),
                        "load1": round(os.getloadavg()[0], 1),
                        "processes": snap,
                    }
                )
                next_sample = time.monotonic() + 30
        elapsed = time.monotonic() - started
        if heap_dumps:  # moto writes them one after the other: the last one before the stack stops
            folder = Path(os.environ[MOTO_TRACEMALLOC])
            while len(list(folder.glob("moto-heap-*.snapshot"))) < heap_dumps:
                time.sleep(2)
        # Nothing stuck: the queues drain, no dead letters, no execution left RUNNING.
        deadline = time.monotonic() + 120
        left = leftovers(f"http://127.0.0.1:{moto_port}")
        while (left["queued"] or left["running_executions"]) and time.monotonic() < deadline:
            time.sleep(5)
            left = leftovers(f"http://127.0.0.1:{moto_port}")
        # Nothing duplicated.
        chunk_counts: dict[str, set[int]] = defaultdict(set)
        duplicate_ids = 0
        seen_ids: set[str] = set()
        for doc in finished:
            if doc["status"] != "completed":
                continue
            ids = api.chunk_ids(doc["id"])
            duplicate_ids += len(ids) - len(set(ids)) + len(seen_ids & set(ids))
            seen_ids |= set(ids)
            chunk_counts[doc["file"]].add(len(ids))
        uneven = {name: sorted(counts) for name, counts in chunk_counts.items() if len(counts) > 1}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=300)
        except subprocess.TimeoutExpired:
            process.kill()
    return report(docs, in_flight, interval, files, finished[warmup:], samples, group_ends, elapsed, left,
                  duplicate_ids, uneven, load_before, log)  # fmt: skip


def embedding_figures(api: Api, knowledge_id: str) -> dict[str, int]:
    """Texts the document's embedding stage embedded and found in the cache (its span's outputs)."""
    view = api.data("GET", f"/knowledge/{knowledge_id}/spans")
    for node in view.get("trace", []):
        if node.get("span_id") == "embedding":
            outputs = node.get("outputs") or {}
            return {k: int(outputs.get(k, 0)) for k in ("texts_embedded", "cache_hits")}
    return {"texts_embedded": 0, "cache_hits": 0}


def cpu_by_role(snap: dict[str, dict[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for p in snap.values():
        totals[p["role"]] += p["cpu_s"]
    return dict(totals)


def doc_uploaded(doc: dict[str, Any]) -> float:
    return float(doc["uploaded"])


def _rss_line(snap: dict[str, dict[str, Any]]) -> str:
    by_role: dict[str, list[int]] = defaultdict(list)
    for p in snap.values():
        by_role[p["role"]].append(p["rss_mb"])
    return ", ".join(f"{r} {'+'.join(map(str, v))} MB" for r, v in sorted(by_role.items()))


def report(
    docs: int,
    in_flight: int,
    interval: float,
    files: list[Path],
    finished: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    group_ends: list[dict[str, Any]],
    elapsed: float,
    left: dict[str, Any],
    duplicate_ids: int,
    uneven: dict[str, list[int]],
    load_before: tuple[float, float, float],
    log: Path,
) -> dict[str, Any]:
    groups = []
    base, *ends = group_ends  # the warm-up's end: where the clock and the CPU counts start
    previous_t, previous_cpu, start = base["t"], base["cpu"], 0
    for end in ends:
        size = end["finished"] - start
        cpu = {
            role: end["cpu"].get(role, 0.0) - previous_cpu.get(role, 0.0) for role in ("moto", "up", "worker")
        }
        docs_in = finished[start : end["finished"]]
        snap = next(s for s in samples if s["finished"] == end["finished"] and "load1" not in s)["processes"]
        groups.append(
            {
                "documents": f"{start + 1}-{end['finished']}",
                "docs_per_min": round(size / (end["t"] - previous_t) * 60, 1),
                "cpu_s": {role: round(v, 1) for role, v in cpu.items()},
                # the stack's CPU per document: moto + the embedding workers (and with the `up` process)
                "cpu_per_doc_s": round((cpu["moto"] + cpu["worker"]) / size, 2),
                "cpu_per_doc_with_up_s": round(sum(cpu.values()) / size, 2),
                "texts_embedded": sum(d.get("texts_embedded", 0) for d in docs_in),
                "cache_hits": sum(d.get("cache_hits", 0) for d in docs_in),
                "rss_mb": {p["role"]: p["rss_mb"] for p in snap.values() if p["role"] != "worker"}
                | {"workers": [p["rss_mb"] for p in snap.values() if p["role"] == "worker"]},
            }
        )
        previous_t, previous_cpu, start = end["t"], end["cpu"], end["finished"]
    peaks: dict[str, int] = {}
    for s in samples:
        for pid, p in s["processes"].items():
            label = f"{p['role']} {pid}"
            peaks[label] = max(peaks.get(label, 0), p["hwm_mb"])
    statuses: dict[str, int] = defaultdict(int)
    for d in finished:
        statuses[d["status"]] += 1
    first, last = (groups[0], groups[-1]) if groups else (None, None)
    snapshot_lines = [line for line in log.read_text(errors="replace").splitlines() if "snapshot" in line]
    rss_over_time = [
        {
            "t": s["t"],
            "finished": s["finished"],
            "load1": s.get("load1"),
            **{
                role: sorted(p["rss_mb"] for p in s["processes"].values() if p["role"] == role)
                for role in ("up", "moto", "worker")
            },
        }
        for s in samples
        if "load1" in s
    ]
    return {
        "docs": docs,
        "in_flight": in_flight,
        "snapshot_interval_s": interval,
        "files": [f.name for f in files],
        "kinds": sorted({f.suffix.lower() for f in files}),
        "elapsed_s": round(elapsed - base["t"], 1),
        "docs_per_min_overall": round(len(finished) / (elapsed - base["t"]) * 60, 1),
        "statuses": dict(statuses),
        "failed": [(d["file"], d["error"][:120]) for d in finished if d["status"] != "completed"],
        "groups": groups,
        "last_vs_first_docs_per_min": round(last["docs_per_min"] / first["docs_per_min"], 2)
        if first and last
        else None,
        # above 1: the last group cost more CPU a document than the first
        "last_vs_first_cpu_per_doc": round(last["cpu_per_doc_s"] / first["cpu_per_doc_s"], 2)
        if first and last and first["cpu_per_doc_s"]
        else None,
        "peak_rss_mb": peaks,
        "rss_over_time_mb": rss_over_time,
        "leftovers": left,
        "duplicate_chunk_ids": duplicate_ids,
        "uneven_chunk_counts": uneven,
        "load_before": [round(x, 1) for x in load_before],
        "load_after": [round(x, 1) for x in os.getloadavg()],
        "snapshot_warnings": snapshot_lines[-5:],
        "log": str(log),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--docs", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=6, help="documents unfinished at once (the pacing)")
    parser.add_argument("--snapshot-interval", type=float, default=60.0, help="`up --snapshot-interval`")
    parser.add_argument(
        "--doc-timeout", type=float, default=1800.0, help="seconds before a document is stuck"
    )
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument(
        "--files", nargs="+", default=SOAK_FILES, help="corpus file names (`*`: every editable one)"
    )
    parser.add_argument("--warmup", type=int, default=20, help="documents first, not counted")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here (JSON)")
    parser.add_argument("--group", type=int, default=PAGE, help="documents per reported group")
    parser.add_argument("--max-bytes", type=int, default=MAX_BYTES, help="with `--files '*'`: the size limit")
    parser.add_argument(
        "--until", default=None, help="UTC HH:MM after which nothing more is uploaded (a run that must end)"
    )
    parser.add_argument(
        "--moto-tracemalloc",
        type=Path,
        default=None,
        help="debugging: moto traces its heap and dumps it into this folder at each group's end (slow)",
    )
    args = parser.parse_args()
    globals()["PAGE"] = args.group
    if args.moto_tracemalloc:
        os.environ[MOTO_TRACEMALLOC] = str(args.moto_tracemalloc.resolve())  # `up` passes it to moto
    until = None
    if args.until:
        import datetime as dt

        now = dt.datetime.now(dt.UTC)
        hour, minute = map(int, args.until.split(":"))
        end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        until = (end if end > now else end + dt.timedelta(days=1)).timestamp()
    result = run(
        args.docs,
        args.in_flight,
        args.snapshot_interval,
        args.doc_timeout,
        args.corpus,
        until,
        args.files,
        args.max_bytes,
        args.warmup,
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
