"""Issue 27: one big document's embedding fanned out over every embedding worker, through the local stack.

Generates a CSV of `--rows` rows (default 60,000, the held-out sheet's size), uploads it to a local stack
as `make run` has it (moto in its own process, the embedding workers), waits until it is searchable, and
reports per stage: wall time, chunks/s and metered Lambda GB-s; then the raw model's speed on the same
chunks' index texts, measured in the same run through the same worker pool (as many concurrent callers as
the embedding queue runs invocations, batches of `embed_batch_size`), and the ratio

    embedding stage texts/s  /  raw model texts/s over every worker       (goal: >= 0.8)

The embedding stage's wall time runs from its span's start (the plan) to its end (the last slice's
hand-over); its texts/s counts every text chunk.

    .venv/bin/python bench/bench_fanout.py [--rows 60000] [--workers 2] [--raw-sample 4000]
"""

from __future__ import annotations

import argparse
import json
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
from bench_scale import make_csv  # noqa: E402  # the same generated product sheet as the scale bench
from local_stack import new_tenant_kb, start_local_stack, warmed_embedding_model  # noqa: E402

STAGES = ("docreader", "chunking", "embedding")


def run(rows: int, workers: int | None, raw_sample: int) -> dict[str, Any]:
    from chalice.test import Client
    from e2e.conftest import multipart

    from chalicelib.bootstrap import get_deps
    from chalicelib.chunker import index_text
    from chalicelib.domain.metering import LAMBDA_GB_SECONDS
    from chalicelib.domain.types import ChunkType, EnableStatus, ParseStatus

    runtime = start_local_stack(Path(tempfile.mkdtemp(prefix="bench-fanout-")), embed_workers=workers)
    try:
        deps = get_deps()
        model = warmed_embedding_model(deps)  # the worker processes start and load the model
        data = make_csv(rows)
        with Client(runtime.app, stage_name="local", project_dir=str(ROOT)) as client:
            headers, kb = new_tenant_kb(client, "bench-fanout")
            runtime.start_workers()
            started = time.monotonic()
            body, content_type = multipart({"file": ("sheet.csv", data)}, {})
            response = client.http.post(
                f"/api/v1/knowledge-bases/{kb['id']}/knowledge/file",
                headers={**headers, "Content-Type": content_type},
                body=body,
            )
            knowledge_id = response.json_body["data"]["id"]
            while True:
                row = deps.knowledge.get(knowledge_id)
                assert row is not None
                if row.enable_status == EnableStatus.ENABLED or row.parse_status in (
                    ParseStatus.FAILED,
                    ParseStatus.CANCELLED,
                ):
                    break
                if time.monotonic() - started > 7200:
                    raise TimeoutError("not searchable after two hours")
                time.sleep(1.0)
            searchable_s = time.monotonic() - started
        runtime.stop_workers()
        spans = {s.span_id: s for s in deps.spans.list(row.id, row.attempt)}
        gb_seconds: dict[str, float] = {}
        for entry in deps.usage.for_knowledge(row.id):
            gb_seconds[entry.stage] = gb_seconds.get(entry.stage, 0.0) + float(
                entry.counts.get(LAMBDA_GB_SECONDS, 0.0)
            )
        chunks = [c for c in deps.chunks.list(row.id) if c.chunk_type == ChunkType.TEXT]
        stages: dict[str, dict[str, Any]] = {}
        for name in STAGES:
            span = spans.get(name)
            if span is None or span.started_at is None or span.ended_at is None:
                continue
            wall = (span.ended_at - span.started_at).total_seconds()
            stages[name] = {
                "wall_s": round(wall, 1),
                "chunks_per_s": round(len(chunks) / wall, 1) if wall > 0 else None,
                "gb_s": round(gb_seconds.get(name, 0.0), 1),
            }
        embedding = spans["embedding"].outputs if "embedding" in spans else {}

        # The raw model on the same index texts, through the same pool, as many callers as the stage runs.
        texts = [index_text(row.title, c.context_header, c.content) for c in chunks[:raw_sample]]
        batch = deps.settings.embed_batch_size
        batches = [texts[i : i + batch] for i in range(0, len(texts), batch)]
        callers = 2 * runtime.embed_workers
        raw_started = time.monotonic()
        with ThreadPoolExecutor(max_workers=callers) as pool:
            list(pool.map(model.embed, batches))
        raw_s = time.monotonic() - raw_started
        raw_rate = len(texts) / raw_s
        stage_rate = len(chunks) / stages["embedding"]["wall_s"] if "embedding" in stages else 0.0
        return {
            "rows": rows,
            "csv_bytes": len(data),
            "status": row.parse_status.value,
            "chunks": len(chunks),
            "searchable_s": round(searchable_s, 1),
            "embed_workers": runtime.embed_workers,
            "embedding_invocations_at_once": callers,
            "slices_total": embedding.get("slices_total"),
            "slices_done": embedding.get("slices_done"),
            "entries_indexed": embedding.get("entries_indexed"),
            "span_bytes": len(json.dumps(embedding)),
            "stages": stages,
            "raw_model_texts_per_s": round(raw_rate, 1),
            "embedding_stage_texts_per_s": round(stage_rate, 1),
            "stage_vs_raw": round(stage_rate / raw_rate, 2) if raw_rate else None,
        }
    finally:
        runtime.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=60_000)
    parser.add_argument(
        "--workers", type=int, default=None, help="embedding workers (default: the runtime's)"
    )
    parser.add_argument("--raw-sample", type=int, default=4000, help="texts the raw model embeds")
    args = parser.parse_args()
    print(json.dumps(run(args.rows, args.workers, args.raw_sample), indent=2))


if __name__ == "__main__":
    main()
