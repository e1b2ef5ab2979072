"""A big knowledge base's report refresh (operations/kb_report_refresh.py) measured: `--documents` completed
documents of one knowledge base, their rows and four usage entries each (docreader, chunking, embedding,
workflow: no execution's transitions left to fill) written straight through the repos (not the pipeline), in
a local stack as `make run` starts it (moto in a process of its own); then each `--kinds` report refreshed
to its end through the real path: the `kb_report` task sent on the lifecycle queue and the lifecycle
function's poller driven a delivery at a time (each re-send of RetryTaskLater is the next slice), with the
real SLICE_SECONDS and page sizes. Reported:

- the write rate (documents/s through the repos: the row's conditional put and four usage puts);
- per slice: wall, this process's CPU (the walk: the client's parsing and sums) and moto's CPU, the
  entries and rows it read, its checkpoint (the S3 object, gzip and raw JSON), this process's RSS;
- in all: slices, wall, CPU, entries/s and rows/s, the peak RSS (getrusage), the walk state's memory
  (tracemalloc: what a checkpoint's state holds once loaded, and the peak of a slice boundary: the load
  of the last checkpoint and the save of the next, as a delivery does them);
- the same report computed in one go (`whole_report`): its wall and CPU, and whether its body is the
  stored one's (it must be);
- the extrapolation: at the measured bytes per document, how many documents a 512 MB lifecycle function
  holds, and how long a refresh takes on AWS at an assumed DynamoDB latency per request (`--aws-ms`).

    .venv/bin/python bench/bench_report_refresh.py [--documents 20000] [--kinds cost,stats] [--aws-ms 10,30]

The machine's load moves every wall figure: read the CPU figures, and the load averages printed beside them.
"""

from __future__ import annotations

import argparse
import gc
import gzip
import json
import math
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from local_stack import start_local_stack  # noqa: E402

STAGES = ("chunking", "docreader", "embedding", "workflow")
#: the lifecycle function's memory (.chalice/config.json: the default) and Lambda's one full vCPU
LAMBDA_MB = 512
FULL_VCPU_MB = 1769
#: DynamoDB's BatchGetItem reads at most this many keys a request (a page's new documents' rows)
BATCH_GET = 100


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def rss_mb() -> float:
    """This process's resident memory now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def moto_pid(runtime: Any) -> int | None:
    process = getattr(runtime.server, "_process", None)
    return process.pid if process is not None else None


def function_baseline_mb() -> float:
    """The resident memory of a new process that imported the app and built its adapters, in this stack's
    environment: what a lifecycle function holds before its first walk."""
    code = (
        "import app; from chalicelib.bootstrap import get_deps; get_deps(); import gc; gc.collect(); "
        "print([l for l in open('/proc/self/status') if l.startswith('VmRSS:')][0].split()[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(out.stdout.strip().splitlines()[-1]) / 1024


# ------------------------------------------------------------------------------------------------ writing


def document_id(n: int) -> str:
    """Document `n`'s id: a uuid4 as the API makes them (random: a checkpoint of them compresses as a real
    one does), the same for the same `n`."""
    return str(uuid.UUID(int=random.Random(n).getrandbits(128), version=4))


def _document(kb: Any, n: int) -> tuple[Any, list[Any]]:
    """Document `n`: a completed row and its four usage entries (tests/service/test_kb_report_refresh_duplicates
    `doc()`, with its chunks and bytes varied)."""
    from service.repo_contract import row

    from chalicelib.domain import metering
    from chalicelib.domain.clock import now_iso
    from chalicelib.domain.types import ParseStatus
    from chalicelib.ports import UsageEntry

    knowledge_id = document_id(n)
    knowledge = row(
        id=knowledge_id,
        tenant_id=kb.tenant_id,
        kb_id=kb.id,
        parse_status=ParseStatus.COMPLETED,
        attempt=1,
        chunk_count=1 + n % 40,
        file_size=1000 + n,
    )
    counts = {metering.LAMBDA_REQUESTS: 1.0, metering.LAMBDA_GB_SECONDS: 1.0 + n % 7}
    entries = [
        UsageEntry(knowledge_id, f"000001#{stage}#m-{n}", kb.id, kb.tenant_id, counts, now_iso())
        for stage in STAGES
    ]
    return knowledge, entries


def write_through_repos(deps: Any, kb: Any, start: int, end: int) -> None:
    """The repos' own writes: the row's conditional put (`insert`), each entry's put (`put`)."""
    for n in range(start, end):
        knowledge, entries = _document(kb, n)
        deps.knowledge.insert(knowledge)
        for entry in entries:
            deps.usage.put(entry)


def write_in_batches(deps: Any, kb: Any, start: int, end: int) -> None:
    """The same items, 25 a BatchWriteItem (PynamoDB's batch_write on the repos' own models and item
    builders): the repos have no batch write, and a put a request is ~100 items/s on a loaded moto."""
    rows, usage = deps.knowledge.model, deps.usage.model
    with rows.batch_write() as row_batch, usage.batch_write() as usage_batch:
        for n in range(start, end):
            knowledge, entries = _document(kb, n)
            row_batch.save(deps.knowledge._to_item(knowledge))
            for e in entries:
                usage_batch.save(
                    usage(
                        e.knowledge_id,
                        e.entry,
                        kb_id=e.kb_id,
                        tenant_id=e.tenant_id,
                        counts=dict(e.counts),
                        created_at=e.created_at,
                    )
                )


def write_documents(deps: Any, kb: Any, documents: int, repo_documents: int) -> dict[str, float]:
    """The first `repo_documents` through the repos' puts, the rest in batches: each one's seconds."""
    through_repos = min(repo_documents, documents)
    started = time.perf_counter()
    write_through_repos(deps, kb, 0, through_repos)
    repo_seconds = time.perf_counter() - started
    started = time.perf_counter()
    step = max(1000, documents // 10)
    for start in range(through_repos, documents, step):
        end = min(documents, start + step)
        write_in_batches(deps, kb, start, end)
        elapsed = time.perf_counter() - started
        print(
            f"  written {end:>8,} documents  {elapsed:7.1f} s  {(end - through_repos) / elapsed:6.0f} docs/s "
            f"(batches)  load {loadavg()}",
            flush=True,
        )
    return {
        "repo_docs": through_repos,
        "repo_s": repo_seconds,
        "batch_docs": documents - through_repos,
        "batch_s": time.perf_counter() - started,
    }


# ------------------------------------------------------------------------------------------------ the refresh


@dataclass
class Slice:
    wall: float
    cpu: float
    moto_cpu: float
    entries: int
    rows: int
    gz_bytes: int
    raw_bytes: int
    rss_mb: float


@dataclass
class Refresh:
    kind: str
    slices: list[Slice] = field(default_factory=list)
    wall: float = 0.0
    cpu: float = 0.0
    moto_cpu: float = 0.0
    entries: int = 0
    rows: int = 0
    last_checkpoint: bytes = b""
    body: dict[str, Any] = field(default_factory=dict)


def _walk_counts(state: dict[str, Any], kind: str) -> tuple[int, int]:
    """(usage entries read, rows read) of a checkpoint's walk."""
    walk = state["walk"]
    if kind == "stats":
        return int(walk["cost"]["entries"]), int(walk["rows"])
    return int(walk["entries"]), 0


def refresh(runtime: Any, deps: Any, kb: Any, kind: str, max_slices: int, totals: tuple[int, int]) -> Refresh:
    """The kind's refresh task sent on the lifecycle queue, then delivered a message at a time by the
    lifecycle function's poller until the task ends."""
    from chalicelib.domain.types import OPEN_TASK_STATUSES, Task, TaskKind
    from chalicelib.operations import kb_report_refresh, kb_reports
    from chalicelib.tasks import deliver_again

    task = Task(
        id=kb_reports.report_task_id(kb.id, kind, 0),
        tenant_id=kb.tenant_id,
        kind=TaskKind.KB_REPORT,
        kb_id=kb.id,
        items=[kb.id],
        params={kb_reports.REPORT: kind, kb_reports.GENERATION: 0},
    )
    deps.tasks.put(task)
    deliver_again(deps, task.id)  # its first delivery, as a GET past the bound sends it
    poller = runtime.poller("lifecycle_task")
    prefix = kb_report_refresh.checkpoint_prefix(task)
    pid = moto_pid(runtime)
    result = Refresh(kind)
    seen = (0, 0)
    for number in range(max_slices):
        gc.collect()
        wall0, cpu0 = time.perf_counter(), time.process_time()
        moto0 = cpu_seconds(pid) if pid else 0.0
        outcome = poller.poll_once(wait_time_seconds=0)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        moto = (cpu_seconds(pid) - moto0) if pid else 0.0
        if outcome.error is not None:
            raise RuntimeError(f"slice {number} failed: {outcome.error!r}")
        if not outcome.received:
            raise RuntimeError(f"slice {number}: no message on the lifecycle queue and the task is open")
        keys = deps.files.list_keys(prefix, 10)
        current = deps.tasks.get(task.id)
        ended = current is not None and current.status not in OPEN_TASK_STATUSES
        if keys:
            if len(keys) != 1:
                raise RuntimeError(f"slice {number}: {len(keys)} checkpoints at once: {keys}")
            blob = deps.files.read(deps.files.url_for(keys[0]))
            raw = gzip.decompress(blob)
            counts = _walk_counts(json.loads(raw), kind)
            result.last_checkpoint = blob
            gz_bytes, raw_bytes = len(blob), len(raw)
        elif ended:
            gz_bytes = raw_bytes = 0
            counts = totals  # the last slice's reads are in the report, not in a checkpoint
        else:
            raise RuntimeError(f"slice {number}: the task is open and no checkpoint is kept")
        piece = Slice(
            wall, cpu, moto, counts[0] - seen[0], counts[1] - seen[1], gz_bytes, raw_bytes, rss_mb()
        )
        seen = counts
        result.slices.append(piece)
        print(
            f"  {kind} slice {number:>3}: wall {wall:6.1f} s  cpu {cpu:6.1f} s  moto cpu {moto:6.1f} s  "
            f"+{piece.entries:>7,} entries  +{piece.rows:>7,} rows  checkpoint {gz_bytes / 1e6:6.2f} MB gz "
            f"{raw_bytes / 1e6:7.2f} MB raw  rss {piece.rss_mb:6.0f} MB  load {loadavg()}",
            flush=True,
        )
        if ended:
            break
    else:
        raise RuntimeError(f"the {kind} refresh did not end in {max_slices} slices")
    assert current is not None
    if current.status.value != "completed":
        raise RuntimeError(f"the {kind} refresh ended {current.status.value}: {current.errors}")
    if deps.files.list_keys(prefix, 10):
        raise RuntimeError(f"the {kind} refresh left a checkpoint")
    result.wall = sum(s.wall for s in result.slices)
    result.cpu = sum(s.cpu for s in result.slices)
    result.moto_cpu = sum(s.moto_cpu for s in result.slices)
    stored = deps.usage.report(kb.id, kind)
    if stored is None:
        raise RuntimeError(f"the {kind} refresh ended without a report")
    result.body = dict(stored.body)
    return result


def walk_memory(kind: str, blob: bytes) -> dict[str, float]:
    """A checkpoint's walk in memory (tracemalloc): the state it holds once loaded, and the peak of a slice
    boundary, as a delivery has one: the checkpoint read and loaded, then the next one dumped and
    compressed (operations/kb_report_refresh.py `_resume`, `_walk_slice`); with the seconds of each."""
    from chalicelib.operations.cost import CostWalk
    from chalicelib.operations.stats import StatsWalk

    load: Callable[[dict[str, Any]], Any] = CostWalk.from_json if kind == "cost" else StatsWalk.from_json
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    state = json.loads(gzip.decompress(blob))
    walk = load(state["walk"])
    del state
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    saved = gzip.compress(json.dumps({"as_of": "", "kind": kind, "walk": walk.to_json()}).encode())
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    del saved
    # the same without tracemalloc: its time
    started = time.process_time()
    walk = load(json.loads(gzip.decompress(blob))["walk"])
    loaded = time.process_time() - started
    started = time.process_time()
    gzip.compress(json.dumps({"as_of": "", "kind": kind, "walk": walk.to_json()}).encode())
    dumped = time.process_time() - started
    docs = len(walk.docs if kind == "cost" else walk.cost.docs)
    return {"held": held, "peak": peak, "docs": docs, "load_s": loaded, "save_s": dumped}


def one_go(deps: Any, kb_id: str, kind: str) -> tuple[dict[str, Any], bytes, int, int, float, float]:
    """The report in one go: `whole_report`'s body (kb_cost_report, kb_stats_report: a new walk, advanced to
    its end with the refresh's fills and carries, then priced) inlined to keep its walk: (the body, the
    walk's checkpoint as a refresh's last boundary would keep it, entries read, rows read, wall, CPU)."""
    from chalicelib.operations.cost import (
        REFRESH_USAGE_CARRIES,
        REFRESH_WORKFLOW_FILLS,
        CostWalk,
        advance_cost,
        cost_of,
    )
    from chalicelib.operations.stats import StatsWalk, advance_stats, stats_of

    gc.collect()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    if kind == "cost":
        walk = CostWalk(kb_id)
        advance_cost(deps, walk, fills=REFRESH_WORKFLOW_FILLS, carries=REFRESH_USAGE_CARRIES)
        body = cost_of(deps, walk)
        entries, rows = walk.entries, 0
    else:
        stats = StatsWalk(kb_id)
        advance_stats(deps, stats, fills=REFRESH_WORKFLOW_FILLS, carries=REFRESH_USAGE_CARRIES)
        body = stats_of(deps, stats)
        entries, rows = stats.cost.entries, stats.rows
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    state = walk.to_json() if kind == "cost" else stats.to_json()
    blob = gzip.compress(json.dumps({"as_of": "", "kind": kind, "walk": state}).encode())
    return body, blob, entries, rows, wall, cpu


#: a child process's checkpoint of `n` documents' walk, as a refresh keeps it past its usage entries (every
#: document met, live, one attempt seen and its workflow entry counted), written to the file `path`
_BUILD = """
import gzip, json, random, sys, uuid
from chalicelib.operations.cost import CostWalk, Sums
from chalicelib.ports import UsageEntry
n, path = int(sys.argv[1]), sys.argv[2]
walk = CostWalk(str(uuid.uuid4()), cursor=json.dumps({"kb_id": {"S": "x"}, "entry": {"S": "000001#workflow#m"}}))
walk.tenants.append(str(uuid.uuid4()))
walk.walked, walk.entries = True, 4 * n
for i in range(n):
    walk.docs[str(uuid.UUID(int=random.Random(i).getrandbits(128), version=4))] = [0, 0, 2, 2]
for stage in ("chunking", "docreader", "embedding", "workflow"):
    walk.documents.add(UsageEntry("k", f"000001#{stage}#m", "", "", {"lambda_requests": n, "lambda_gb_seconds": 3.5 * n}, ""))
raw = json.dumps({"as_of": "", "kind": "cost", "walk": walk.to_json()}).encode()
open(path, "wb").write(gzip.compress(raw))
print(len(raw))
"""

#: a fresh process as a lifecycle function is (the app imported, its adapters built) going through one slice
#: boundary as a delivery does (kb_report_refresh `_resume` then `_walk_slice`): the checkpoint object
#: read and loaded into the walk, then the next one dumped and compressed; prints its memory and times
_DELIVER = """
import gc, gzip, json, resource, sys, time
import app
from chalicelib.bootstrap import get_deps
from chalicelib.operations.cost import CostWalk
get_deps(); gc.collect()
def rss():
    return [int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS:")][0] / 1024
floor = rss()
t0 = time.process_time()
blob = open(sys.argv[1], "rb").read()
state = json.loads(gzip.decompress(blob))
walk = CostWalk.from_json(state["walk"])
del state, blob
t1 = time.process_time()
held, load_peak = rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
state = {"as_of": "", "kind": "cost", "walk": walk.to_json()}
out = gzip.compress(json.dumps(state).encode())
t2 = time.process_time()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"floor": floor, "held": held, "load_peak": load_peak, "peak": peak, "load_s": t1 - t0, "save_s": t2 - t1, "gz": len(out)}))
"""


def synthetic_boundary(documents: int) -> dict[str, float]:
    """A checkpoint of `documents` documents built in one child process, then loaded and saved again by
    another as a delivery does: that one's resident memory (VmRSS, ru_maxrss) and CPU."""
    with tempfile.TemporaryDirectory(prefix="bench-report-checkpoint-") as tmp:
        path = Path(tmp) / "checkpoint.json.gz"
        env = dict(os.environ)
        subprocess.run(
            [sys.executable, "-c", _BUILD, str(documents), str(path)], cwd=ROOT, env=env, check=True
        )
        size = path.stat().st_size
        raw = len(gzip.decompress(path.read_bytes()))
        out = subprocess.run(
            [sys.executable, "-c", _DELIVER, str(path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    result.update(gz_bytes=size, raw_bytes=raw)
    return result


# ------------------------------------------------------------------------------------------------ report


def extrapolate(
    kind: str,
    run: Refresh,
    memory: dict[str, float],
    baseline_mb: float,
    walk_cpu: float,
    aws_ms: list[float],
) -> None:
    """What N fits the 512 MB function, and a refresh's time on AWS, at the measured rates per document."""
    from chalicelib.operations.cost import USAGE_PAGE
    from chalicelib.operations.kb_report_refresh import SLICE_SECONDS
    from chalicelib.services.kb_rows import PAGE

    docs = memory["docs"] or 1
    gz_per_doc = len(run.last_checkpoint) / docs
    raw_per_doc = len(gzip.decompress(run.last_checkpoint)) / docs
    held_per_doc = memory["held"] / docs
    peak_per_doc = memory["peak"] / docs
    room = (LAMBDA_MB - baseline_mb) * 2**20
    print(
        f"  {kind}: checkpoint {gz_per_doc:.1f} B/doc gz, {raw_per_doc:.1f} B/doc raw; walk state held "
        f"{held_per_doc:.0f} B/doc, slice-boundary peak {peak_per_doc:.0f} B/doc (tracemalloc)"
    )
    print(
        f"  {kind}: 512 MB - {baseline_mb:.0f} MB (the function's floor) = {room / 2**20:.0f} MB -> "
        f"~{room / peak_per_doc / 1e6:.2f} M documents at the boundary peak "
        f"(~{room / held_per_doc / 1e6:.2f} M at the state alone)"
    )
    entries_per_doc = run.entries / docs
    # the walk's CPU (this process: the client's parsing, the sums) per document, on a 512 MB Lambda's
    # share of a vCPU (512/1769 of one), plus each request's latency: a usage Query page, a BatchGetItem
    # of a page's new documents (100 keys each), a page of rows (stats)
    scale = FULL_VCPU_MB / LAMBDA_MB
    cpu_per_doc = walk_cpu / docs
    boundary_per_doc = (memory["load_s"] + memory["save_s"]) / docs
    print(
        f"  {kind}: walk cpu here {cpu_per_doc * 1e3:.3f} ms/doc, boundary (load+save) {boundary_per_doc * 1e6:.1f} "
        f"us/doc; on Lambda x{scale:.2f} (512 MB = {LAMBDA_MB / FULL_VCPU_MB:.2f} vCPU, same core speed assumed)"
    )
    for n in (docs, 100_000, 500_000, 1_000_000):
        entries = n * entries_per_doc
        requests = entries / USAGE_PAGE + n / BATCH_GET + (n / PAGE if kind == "stats" else 0)
        boundary = boundary_per_doc * n * scale
        for ms in aws_ms:
            walk = n * cpu_per_doc * scale + requests * ms / 1000
            slices = max(1, math.ceil(walk / SLICE_SECONDS))
            total = walk + (slices - 1) * boundary
            print(
                f"  {kind}: AWS {n:>9,} docs @ {ms:.0f} ms/request: {requests:>7,.0f} requests, walk "
                f"{walk:6.0f} s, {slices:>4} slices, boundary ~{boundary:5.1f} s each -> ~{total / 60:5.1f} min"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--documents", type=int, default=20_000)
    parser.add_argument(
        "--repo-documents", type=int, default=500, help="the first documents written through the repos' puts"
    )
    parser.add_argument(
        "--synthetic",
        default="250000,500000,1000000",
        help="document counts of checkpoints built directly, whose slice boundary a fresh process measures",
    )
    parser.add_argument("--kinds", default="cost,stats", help="reports to refresh, in turn")
    parser.add_argument("--aws-ms", default="10,30", help="assumed DynamoDB latency per request (ms)")
    parser.add_argument("--max-slices", type=int, default=500)
    parser.add_argument(
        "--no-whole-state",
        dest="whole_state",
        action="store_false",
        help="measure the memory on the refresh's last checkpoint (short of the last slice's documents), not the one-go walk's",
    )
    parser.add_argument("--state-dir", default="", help="the stack's state dir (default: a temporary one)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    synthetic = [int(x) for x in args.synthetic.split(",") if x]
    aws_ms = [float(x) for x in args.aws_ms.split(",") if x]
    print(f"load before: {loadavg()}  ({os.cpu_count()} cores)")

    state_dir = Path(args.state_dir or tempfile.mkdtemp(prefix="bench-report-refresh-"))
    runtime = start_local_stack(state_dir)
    from chalicelib.bootstrap import get_deps
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations import kb_report_refresh
    from chalicelib.operations.cost import USAGE_PAGE
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.tenants import create_tenant_with_key

    deps = get_deps()
    tenant, _ = create_tenant_with_key(deps, f"bench-report-{os.getpid()}")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="bench report refresh"))
    print(f"stack up; slice {kb_report_refresh.SLICE_SECONDS:.0f} s, usage page {USAGE_PAGE}")

    written = write_documents(deps, kb, args.documents, args.repo_documents)
    per_doc = 1 + len(STAGES)
    for how in ("repo", "batch"):
        docs, seconds = written[f"{how}_docs"], written[f"{how}_s"]
        if docs:
            print(
                f"wrote {docs:,.0f} documents ({docs * per_doc:,.0f} items) through {how} writes in {seconds:.0f} s: "
                f"{docs / seconds:.1f} docs/s, {docs * per_doc / seconds:.0f} items/s  load {loadavg()}"
            )
    gc.collect()
    lambda_baseline = function_baseline_mb()
    print(
        f"rss before the walks: {rss_mb():.0f} MB (peak so far {peak_rss_mb():.0f} MB); a fresh process with the "
        f"app imported and its adapters built (a warm lifecycle function's floor): {lambda_baseline:.0f} MB"
    )

    failures = []
    for kind in kinds:
        print(f"\n== {kind}")
        # first, so both read the same entries (each slice of the refresh meters itself: a usage entry of
        # the knowledge base's own work, written after the walk went past where it sorts)
        body, whole_state, entries, rows, go_wall, go_cpu = one_go(deps, kb.id, kind)
        print(
            f"  {kind}: one go (whole_report's walk): wall {go_wall:.0f} s, cpu {go_cpu:.0f} s; {entries:,} entries, "
            f"{rows:,} rows; peak rss {peak_rss_mb():.0f} MB; load {loadavg()}"
        )
        run = refresh(runtime, deps, kb, kind, args.max_slices, (entries, rows))
        run.entries, run.rows = entries, rows
        walls = [s.wall for s in run.slices]
        print(
            f"  {kind}: {len(run.slices)} slices, wall {run.wall:.0f} s (per slice min {min(walls):.1f} "
            f"max {max(walls):.1f}), cpu {run.cpu:.0f} s, moto cpu {run.moto_cpu:.0f} s; "
            f"{run.entries / run.wall:,.0f} entries/s, {run.rows / run.wall:,.0f} rows/s (wall); "
            f"peak rss {peak_rss_mb():.0f} MB; load {loadavg()}"
        )
        same = body == run.body
        print(f"  {kind}: stored body {'==' if same else '!='} one-go body")
        if not same:  # (what a refresh's slices meter is written after its as_of: left out)
            failures.append(kind)
            print(f"    stored: {json.dumps(run.body, sort_keys=True)[:3000]}")
            print(f"    one go: {json.dumps(body, sort_keys=True)[:3000]}")
        documents = body.get("documents")
        if documents != args.documents:
            failures.append(f"{kind} documents {documents}")
            print(f"    the report counts {documents} documents, not {args.documents}")
        if (
            args.whole_state or not run.last_checkpoint
        ):  # every document's state, as the last boundary holds it
            run.last_checkpoint = whole_state
        memory = walk_memory(kind, run.last_checkpoint)
        print(
            f"  {kind}: checkpoint of {memory['docs']:,.0f} docs: state held {memory['held'] / 2**20:.1f} MB, "
            f"boundary peak {memory['peak'] / 2**20:.1f} MB; load {memory['load_s']:.2f} s cpu, "
            f"save {memory['save_s']:.2f} s cpu"
        )
        extrapolate(kind, run, memory, lambda_baseline, go_cpu, aws_ms)
    if synthetic:
        print(
            "\n== a delivery's slice boundary, measured in a fresh process (checkpoints of uuid4 documents)"
        )
    for n in synthetic:
        m = synthetic_boundary(n)
        print(
            f"  {n:>9,} docs: checkpoint {m['gz_bytes'] / 1e6:6.1f} MB gz ({m['gz_bytes'] / n:.1f} B/doc), "
            f"{m['raw_bytes'] / 1e6:6.1f} MB raw ({m['raw_bytes'] / n:.1f} B/doc); function floor {m['floor']:.0f} MB, "
            f"walk loaded {m['held']:.0f} MB (peak while loading {m['load_peak']:.0f} MB), peak {m['peak']:.0f} MB "
            f"of {LAMBDA_MB} "
            f"({(m['peak'] - m['floor']) * 2**20 / n:.0f} B/doc over the floor); load {m['load_s']:.1f} s, "
            f"save {m['save_s']:.1f} s cpu  load avg {loadavg()}",
            flush=True,
        )
    print(f"\npeak rss {peak_rss_mb():.0f} MB; load after: {loadavg()}")
    runtime.stop()
    if failures:
        sys.exit(f"FAILED: {failures}")


if __name__ == "__main__":
    main()
