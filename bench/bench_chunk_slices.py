"""Issue 12: what one embedding slice reads from the chunk table before it can start, on moto's DynamoDB.

Before: every slice listed all the document's chunks (`ChunkRepo.list`). After: a slice reads its own
pages after the cursor in its message (`ChunkRepo.list_page`, 64 chunks a Query). Writes N chunks shaped
like the 200,000-row XLSX's (one ~510-character block of `header: value` lines, a context header), then
times, interleaved over rounds: the full listing (before: every slice's first step) and a slice's read in the
middle of the document (after: `list_page` of the slice's 2,048 chunks, a few 1 MB Queries, before the
stage windows them by 64).

    .venv/bin/python bench/bench_chunk_slices.py --chunks 66667 --rounds 3

In-process moto (`mock_aws`), not the local runtime's moto server: no HTTP per request, so both figures
are lower than in the e2e run; the ratio is the point.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")

from moto import mock_aws

from chalicelib.adapters.dynamo import DynamoChunkRepo, build_models
from chalicelib.domain.ids import attempt_chunk_prefix, chunk_id, content_hash
from chalicelib.domain.types import Chunk
from chalicelib.settings import load_settings

SLICE = 2048


def make_chunks(knowledge_id: str, n: int) -> list[Chunk]:
    chunks = []
    for seq in range(n):
        row = seq * 3
        content = "\n".join(
            f"id: {r}; name: item {r}; sku: QX{r:05d}Z; colour: red; size: {r % 40}; price: {r % 997}.50; "
            f"stock: {r % 53}; warehouse: W{r % 9}; updated: 2026-11-{1 + r % 28:02d}; note: ok"
            for r in range(row, row + 3)
        )
        chunks.append(
            Chunk(
                id=chunk_id(knowledge_id, 1, seq),
                tenant_id="t",
                kb_id="kb",
                knowledge_id=knowledge_id,
                seq=seq,
                content=content,
                start_at=seq * 510,
                end_at=seq * 510 + len(content),
                context_header="Sheet1",
                content_hash=content_hash(content),
                metadata={"attempt": 1},
            )
        )
    return chunks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=66_667)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with mock_aws():
        settings = load_settings()
        models = build_models(settings)
        models.chunk.create_table(billing_mode="PAY_PER_REQUEST", wait=True)
        repo = DynamoChunkRepo(models)
        kid = "k-bench"
        started = time.perf_counter()
        chunks = make_chunks(kid, args.chunks)
        for i in range(0, len(chunks), 1000):
            repo.put_many(chunks[i : i + 1000])
        print(f"wrote {args.chunks} chunks in {time.perf_counter() - started:.1f} s")
        prefix = attempt_chunk_prefix(kid, 1)
        middle = sorted(c.id for c in chunks)[len(chunks) // 2]
        full: list[float] = []
        whole: list[float] = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            assert len(repo.list(kid)) == args.chunks
            full.append(time.perf_counter() - t)
            t = time.perf_counter()
            page, _ = repo.list_page(kid, prefix=prefix, after=middle, limit=SLICE)
            whole.append(time.perf_counter() - t)
            assert len(page) == min(SLICE, args.chunks - args.chunks // 2 - 1)
        print(f"full listing (before, every slice):   median {statistics.median(full):.3f} s  {full}")
        print(f"a slice's read, {SLICE} chunks (after):  median {statistics.median(whole):.3f} s  {whole}")
        slices = -(-args.chunks // SLICE)
        print(
            f"a document of {slices} slices reads: before {slices} x full = "
            f"{slices * statistics.median(full):.0f} s; after {slices} x slice = "
            f"{slices * statistics.median(whole):.1f} s"
        )


if __name__ == "__main__":
    main()
