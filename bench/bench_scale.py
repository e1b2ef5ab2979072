"""Issue 27, item 2 (a, b): big documents through the local stack, and the same plan priced on AWS.

Generates a product sheet of eight text columns (the held-out 3 MB, 60,000-row CSV's shape: ~55 bytes a row)
as a `--csv-rows` CSV and as an `--xlsx-rows` XLSX (openpyxl write-only mode), uploads each in turn to a
local stack as `make run` starts it (moto in its own process, every stage's pollers, the embedding worker
processes), waits until it is searchable and reports:

- per stage (docreader, chunking, embedding): wall time from the document's spans, chunks/s, and the
  metered Lambda GB-s of its invocations (usage entries, as the cost route sums them; locally the work:
  CPU time, README "Cost");
- the embedding stage's texts/s against the raw model's on the same chunks' index texts in the same run,
  through the same worker pool with as many callers as the stage runs invocations (the raw MiniLM int8
  throughput x every worker), measured right before the upload (on the document chunked in-process) and
  right after the stage; goal: the stage >= 0.8 of the mean of the two;
- the spread: each embedding worker process's CPU seconds while the document went through (/proc), the
  slices and embedding invocations;
- the AWS plan: the slices, how many run at once (the fan-out's `embed_fanout_parallel`, at most the
  stage's MaximumConcurrency in infra/stack.py), the wall time that gives (each stage's measured work at
  its configured memory, slices in waves) and the cost route's price of the document.

    .venv/bin/python bench/bench_scale.py [--csv-rows 60000] [--xlsx-rows 200000] [--raw-sample 1500]

`--csv-rows 0` or `--xlsx-rows 0` leaves that document out. This machine's load moves every absolute
figure: read the ratios, and the load averages printed beside them.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from local_stack import new_tenant_kb, start_local_stack, warmed_embedding_model  # noqa: E402

STAGES = ("docreader", "chunking", "embedding")
#: the Lambda functions behind the stages (memory from .chalice/config.json; the docreader is the image)
FUNCTIONS = {"chunking": "chunking_stage", "embedding": "embedding_stage"}
HEADER = ["id", "name", "category", "price", "stock", "warehouse", "updated", "note"]
WORDS = [
    "red",
    "blue",
    "sturdy",
    "light",
    "compact",
    "spare",
    "steel",
    "oak",
    "linen",
    "quiet",
    "fast",
    "bright",
]


def sheet_rows(rows: int) -> Any:
    for r in range(rows):
        note = " ".join(WORDS[(r * k) % len(WORDS)] for k in (1, 3, 5, 7))
        yield [
            str(r),
            f"item {r}",
            f"cat {r % 37}",
            f"{r % 997}.50",
            str(r % 53),
            f"W{r % 9}",
            f"2026-11-{1 + r % 28:02d}",
            note,
        ]


def make_csv(rows: int) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(HEADER)
    writer.writerows(sheet_rows(rows))
    return out.getvalue().encode()


def make_xlsx(rows: int) -> bytes:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("products")
    sheet.append(HEADER)
    for row in sheet_rows(rows):
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def stage_memory_mb() -> dict[str, int]:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text())
    template = json.loads((ROOT / "infra" / "template.json").read_text())
    default = int(config.get("lambda_memory_size", 128))
    functions = config.get("lambda_functions", {})
    memory = {
        stage: int(functions.get(function, {}).get("lambda_memory_size", default))
        for stage, function in FUNCTIONS.items()
    }
    memory["docreader"] = int(template["Resources"]["DocreaderStage"]["Properties"]["MemorySize"])
    return memory


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def worker_pids(model: Any) -> list[int]:
    pool = getattr(model, "_pool", None)  # the PooledMiniLm's ProcessPoolExecutor (bench-only peek)
    return sorted(getattr(pool, "_processes", {}) or {})


def index_texts_of(
    data: bytes, file_name: str, file_type: str, sample: int
) -> tuple[list[str], dict[str, Any]]:
    """The document chunked in-process as the pipeline chunks it (default settings): its first index texts,
    and the in-process parse and chunking's CPU seconds and chunk count (no emulator in the way)."""
    from chalicelib.chunker import index_text, normalise_markdown
    from chalicelib.domain.types import ChunkingConfig, Knowledge, KnowledgeType
    from chalicelib.parsers import build_docreader
    from chalicelib.ports.parsing import ReadRequest
    from chalicelib.stages.chunking import build_chunks

    started = time.process_time()
    markdown = build_docreader().read(ReadRequest(data, file_name, file_type)).markdown
    parsed = time.process_time()
    knowledge = Knowledge("k" * 32, "t", "kb", next(iter(KnowledgeType)), title=file_name)
    chunks, _ = build_chunks(knowledge, normalise_markdown(markdown), ChunkingConfig())
    figures = {
        "parse_cpu_s": round(parsed - started, 2),
        "chunk_cpu_s": round(time.process_time() - parsed, 2),
        "markdown_chars": len(markdown),
        "chunks": len(chunks),
    }
    return [index_text(file_name, c.context_header, c.content) for c in chunks[:sample]], figures


def raw_rate(model: Any, texts: list[str], batch: int, callers: int) -> float:
    """The raw model's texts/s over the whole worker pool, `callers` batches in flight."""
    batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=callers) as pool:
        list(pool.map(model.embed, batches))
    return len(texts) / (time.monotonic() - started)


def upload(client: Any, headers: dict[str, str], kb_id: str, doc: dict[str, Any], body_limit: int) -> str:
    """The file as a user sends it: a multipart POST, or over the API's body limit a presigned PUT."""
    import requests
    from e2e.conftest import multipart

    if len(doc["data"]) < body_limit - 64 * 1024:
        body, content_type = multipart({"file": (doc["name"], doc["data"])}, {})
        response = client.http.post(
            f"/api/v1/knowledge-bases/{kb_id}/knowledge/file",
            headers={**headers, "Content-Type": content_type},
            body=body,
        )
        return str(response.json_body["data"]["id"])
    grant = client.http.post(
        f"/api/v1/knowledge-bases/{kb_id}/knowledge/upload-url",
        headers={**headers, "Content-Type": "application/json"},
        body=json.dumps({"file_name": doc["name"], "file_size": len(doc["data"])}),
    ).json_body["data"]
    put = requests.put(grant["upload_url"], data=doc["data"], headers=grant.get("headers") or {}, timeout=600)
    put.raise_for_status()
    return str(grant["knowledge_id"])


def one_document(
    runtime: Any, client: Any, deps: Any, kb_id: str, headers: dict[str, str], doc: dict[str, Any]
) -> dict[str, Any]:
    from chalicelib.chunker import index_text
    from chalicelib.domain.metering import LAMBDA_GB_SECONDS
    from chalicelib.domain.types import ChunkType, EnableStatus, ParseStatus

    model = deps.embedding_model("")
    batch = deps.settings.embed_batch_size
    callers = 2 * runtime.embed_workers  # the embedding queue's invocations at once (runtime.py)
    texts, in_process = index_texts_of(doc["data"], doc["name"], doc["type"], doc["raw_sample"])
    load_before = os.getloadavg()[0]
    raw_before = raw_rate(model, texts, batch, callers)
    pids = worker_pids(model)
    cpu_start = {pid: cpu_seconds(pid) for pid in pids}

    started = time.monotonic()
    knowledge_id = upload(client, headers, kb_id, doc, deps.settings.api_max_body)
    loads = []
    while True:
        row = deps.knowledge.get(knowledge_id)
        if row is None:  # a presigned upload's row is made when S3's event reaches the uploads queue
            if time.monotonic() - started > 300:
                raise TimeoutError("the presigned upload never became a document")
            time.sleep(1.0)
            continue
        if row.enable_status == EnableStatus.ENABLED or row.parse_status in (
            ParseStatus.FAILED,
            ParseStatus.CANCELLED,
        ):
            break
        if time.monotonic() - started > 4 * 3600:
            raise TimeoutError("not searchable after four hours")
        loads.append(os.getloadavg()[0])
        time.sleep(2.0)
    searchable_s = time.monotonic() - started
    worker_cpu = {pid: round(cpu_seconds(pid) - cpu_start[pid], 1) for pid in pids}
    load_after = os.getloadavg()[0]
    raw_after = raw_rate(model, texts, batch, callers)

    spans = {s.span_id: s for s in deps.spans.list(row.id, row.attempt)}
    entries = deps.usage.for_knowledge(row.id)
    gb_seconds: dict[str, float] = {}
    invocations: dict[str, int] = {}
    for entry in entries:
        gb_seconds[entry.stage] = gb_seconds.get(entry.stage, 0.0) + float(
            entry.counts.get(LAMBDA_GB_SECONDS, 0.0)
        )
        invocations[entry.stage] = invocations.get(entry.stage, 0) + 1
    chunks = [c for c in deps.chunks.list(row.id) if c.chunk_type == ChunkType.TEXT]
    memory = stage_memory_mb()
    stages: dict[str, dict[str, Any]] = {}
    for name in STAGES:
        span = spans.get(name)
        if span is None or span.started_at is None or span.ended_at is None:
            continue
        wall = (span.ended_at - span.started_at).total_seconds()
        stages[name] = {
            "wall_s": round(wall, 1),
            "chunks_per_s": round(len(chunks) / wall, 1) if wall > 0 else None,
            "gb_s": round(gb_seconds.get(name, 0.0), 2),
            "work_s": round(gb_seconds.get(name, 0.0) / (memory[name] / 1024), 1),
            "invocations": invocations.get(name, 0),
        }
    embedding = spans["embedding"].outputs if "embedding" in spans else {}
    cost = client.http.get(f"/api/v1/knowledge/{row.id}/cost", headers=headers).json_body["data"]

    # the sample's texts as the stage indexed them (the in-process chunking must agree with the stage's)
    stored = [index_text(row.title, c.context_header, c.content) for c in chunks[: len(texts)]]
    raw = (raw_before + raw_after) / 2
    stage_rate = len(chunks) / stages["embedding"]["wall_s"] if "embedding" in stages else 0.0
    total_cpu = sum(worker_cpu.values()) or 1.0
    return {
        "document": doc["name"],
        "rows": doc["rows"],
        "bytes": len(doc["data"]),
        "status": row.parse_status.value,
        "chunks": len(chunks),
        "searchable_s": round(searchable_s, 1),
        "in_process": in_process,
        "load_average": {
            "before": round(load_before, 1),
            "during_median": round(sorted(loads)[len(loads) // 2], 1) if loads else None,
            "after": round(load_after, 1),
        },
        "stages": stages,
        "embed_workers": runtime.embed_workers,
        "embedding_invocations_at_once": callers,
        "slices_total": embedding.get("slices_total"),
        "slices_done": embedding.get("slices_done"),
        "span_bytes": len(json.dumps(embedding)),
        "worker_cpu_s": worker_cpu,
        "worker_cpu_shares": [round(v / total_cpu, 2) for v in worker_cpu.values()],
        "raw_sample_matches_stage_chunks": stored == texts,
        "raw_model_texts_per_s": {
            "before": round(raw_before, 1),
            "after": round(raw_after, 1),
            "mean": round(raw, 1),
        },
        "embedding_stage_texts_per_s": round(stage_rate, 1),
        "stage_vs_raw": round(stage_rate / raw, 2) if raw else None,
        "cost": {
            "aws_dollars": cost["aws_dollars"],
            "lines": {line["unit"]: round(line["dollars"], 5) for line in cost["lines"]},
            "lambda_seconds_counted": cost["lambda_seconds_counted"],
        },
        "memory_mb": memory,
    }


def aws_plan(result: dict[str, Any], fanout_parallel: int, fanout_texts: int) -> dict[str, Any]:
    """The same document on AWS: the docreader and chunking each one invocation of their measured work,
    then the embedding slices in waves of `parallel` (one document's slices in flight: the fan-out's
    `embed_fanout_parallel`, at most the stage's MaximumConcurrency). A slice's Lambda time is taken as its
    measured work (CPU time at the configured memory); Lambda also bills the waits on DynamoDB/S3 that the
    local figure leaves out, so read the wall time and the price as lower bounds."""
    stages = result["stages"]
    slices = int(result.get("slices_total") or 1)
    parallel = min(fanout_parallel, MAXIMUM_CONCURRENCY["embedding"], slices)
    slice_s = stages["embedding"]["work_s"] / slices if "embedding" in stages else 0.0
    waves = math.ceil(slices / parallel)
    embedding_wall = waves * slice_s
    wall = stages.get("docreader", {}).get("work_s", 0.0) + stages.get("chunking", {}).get("work_s", 0.0)
    return {
        "slices": slices,
        "slice_texts": fanout_texts,
        "stage_maximum_concurrency": MAXIMUM_CONCURRENCY["embedding"],
        "slices_at_once": parallel,
        "slice_work_s": round(slice_s, 1),
        "embedding_wall_s": round(embedding_wall, 1),
        "upload_to_searchable_s": round(wall + embedding_wall, 1),
        "as_one_chain_s": round(wall + slices * slice_s, 1),
        "at_full_stage_concurrency_s": round(
            wall + math.ceil(slices / min(slices, MAXIMUM_CONCURRENCY["embedding"])) * slice_s, 1
        ),
        "aws_dollars": result["cost"]["aws_dollars"],
    }


def stage_concurrency() -> dict[str, int]:
    """infra/stack.py's MAXIMUM_CONCURRENCY (loaded by path: tests/infra shadows the name `infra`)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("infra_stack", ROOT / "infra" / "stack.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.MAXIMUM_CONCURRENCY)


MAXIMUM_CONCURRENCY = stage_concurrency()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--csv-rows", type=int, default=60_000)
    parser.add_argument("--xlsx-rows", type=int, default=200_000)
    parser.add_argument(
        "--workers", type=int, default=None, help="embedding workers (default: the runtime's)"
    )
    parser.add_argument("--raw-sample", type=int, default=1500, help="texts the raw model embeds, each time")
    parser.add_argument("--out", type=Path, default=None, help="also write the results here (JSON)")
    args = parser.parse_args()

    from chalice.test import Client

    from chalicelib.bootstrap import get_deps

    docs = []
    if args.csv_rows:
        docs.append(
            {"name": "sheet.csv", "type": "csv", "rows": args.csv_rows, "data": make_csv(args.csv_rows)}
        )
    if args.xlsx_rows:
        docs.append(
            {"name": "sheet.xlsx", "type": "xlsx", "rows": args.xlsx_rows, "data": make_xlsx(args.xlsx_rows)}
        )
    runtime = start_local_stack(Path(tempfile.mkdtemp(prefix="bench-scale-")), embed_workers=args.workers)
    results = []
    try:
        deps = get_deps()
        warmed_embedding_model(deps)  # the worker processes start and load the model
        with Client(runtime.app, stage_name="local", project_dir=str(ROOT)) as client:
            headers, kb = new_tenant_kb(client, "bench-scale")
            runtime.start_workers()
            for doc in docs:
                doc["raw_sample"] = args.raw_sample
                result = one_document(runtime, client, deps, kb["id"], headers, doc)
                result["aws"] = aws_plan(
                    result, deps.settings.embed_fanout_parallel, deps.settings.embed_fanout_texts
                )
                results.append(result)
                print(json.dumps(result, indent=2), flush=True)
                if args.out:
                    args.out.write_text(json.dumps(results, indent=2))
        runtime.stop_workers()
    finally:
        runtime.stop()


if __name__ == "__main__":
    main()
