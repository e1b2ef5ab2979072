"""Issue 5 benchmark: pipeline embedding throughput as a fraction of the raw model's, and indexing
throughput of both retrieval engines, measured in the same run. Issue 12: the raw model before and
after quantisation for int8 arithmetic, in one and in two worker processes, and the recall check.

    .venv/bin/python bench/bench_embedding.py [--chunks 600] [--rounds 3] [--no-pipeline]

Quantisation (interleaved rounds, same texts): the shipped file (`local/all-MiniLM-L6-v2-int8`: int8
weights, fp32 arithmetic, batches of 16) against its int8-arithmetic build (`-qint8`, one text per run),
and the latter in PooledMiniLm with 2 single-threaded worker processes. Recall: cosine of each chunk's
new vector to its current one; top-5 neighbour agreement (each chunk's 5 nearest other chunks under both
models); and retrieval recall@1/@5 of a self-supervised query set (12 words from the middle of each chunk
must find their chunk among all chunks) under both models.

Raw = MiniLM int8 ONNX `embed()` over the chunk texts in batches. Pipeline = the embedding stage's
EmbeddingRun over the same texts: content hashing, the DynamoDB cache lookup (on moto), the model, and the
per-batch cache checkpoint writes. Indexing = `batch_index` of the embedded entries into the embedded
engine (SQLite FTS5 + numpy) and into the OpenSearch adapter against the osmem-server wheel.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    from chalicelib.ports import EmbeddingModel, IndexSpace, Vectors

for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(name, "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from chalicelib.settings import default_corpus  # noqa: E402  (WEKNORA_CORPUS, else the nearest shared/corpus)

CORPUS = default_corpus(ROOT)


def corpus_chunks(limit: int) -> list[str]:
    from chalicelib.chunker import normalise_markdown, split
    from chalicelib.domain.types import ChunkingConfig

    texts: list[str] = []
    for path in sorted(CORPUS.glob("*.md")) + sorted(CORPUS.glob("*.txt")):
        if path.name.endswith(".truth.txt"):
            continue
        markdown = normalise_markdown(path.read_text(errors="replace"))
        texts += [piece.content for piece in split(markdown, ChunkingConfig())]
        if len(texts) >= limit:
            break
    return texts[:limit]


def load_app() -> object:
    import app

    return app.app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=600)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-pipeline", action="store_true", help="only the quantisation section")
    parser.add_argument("--spaces", action="store_true", help="only the per-space comparison")
    args = parser.parse_args()
    texts = corpus_chunks(args.chunks)
    chars = sum(len(t) for t in texts)
    print(f"texts: {len(texts)} chunks, {chars / 1e6:.2f} M chars (dev corpus .md/.txt, 512/80 chunking)")
    if args.spaces:
        spaces(texts, args.rounds)
        return

    from chalicelib.adapters.models.local_onnx import MiniLmEmbedding

    quantisation(texts, args.rounds)
    if args.no_pipeline:
        return
    model = MiniLmEmbedding()
    model.embed(["warm up"])

    from chalicelib.local.runtime import LocalRuntime

    state = Path(tempfile.mkdtemp(prefix="bench-embedding-"))
    runtime = LocalRuntime(
        load_app, ROOT / "infra" / "template.json", state_dir=state, stage="local", project_dir=ROOT
    )
    runtime.start(background=False)
    try:
        from chalicelib.bootstrap import build_services
        from chalicelib.ports import IndexSpace
        from chalicelib.services.embedding_runs import EmbeddingRun

        svc = build_services()
        svc.replace_embedding_model(model)
        raws, pipes = [], []
        # Interleaved rounds on this shared 2-core machine; each round uses a cold cache space.
        for round_no in range(args.rounds):
            start = time.perf_counter()
            for i in range(0, len(texts), 16):
                model.embed(texts[i : i + 16])
            raws.append(len(texts) / (time.perf_counter() - start))
            space = IndexSpace(f"{model.model_id}-round{round_no}", model.dimensions)
            start = time.perf_counter()
            vectors = EmbeddingRun(svc, "bench", model, space=space).embed(texts)
            pipes.append(len(texts) / (time.perf_counter() - start))
        raw, pipeline = statistics.median(raws), statistics.median(pipes)
        start = time.perf_counter()
        EmbeddingRun(svc, "bench", model, space=space).embed(texts)
        cached = len(texts) / (time.perf_counter() - start)

        print(
            f"raw model          {raw:8.1f} chunks/s  (median of {args.rounds}: {[round(r, 1) for r in raws]})"
        )
        print(
            f"pipeline embedding {pipeline:8.1f} chunks/s  = {pipeline / raw:.3f} of raw (goal >= 0.9); "
            f"rounds {[round(p, 1) for p in pipes]}"
        )
        print(f"pipeline, all hits {cached:8.1f} chunks/s  (a reparse of unchanged text; 0 model calls)")
        index_throughput(texts, vectors, space, state)
    finally:
        runtime.stop()


def _embed_in_calls(model: EmbeddingModel, texts: list[str], per_call: int = 64) -> Vectors:
    import numpy as np

    # As the embedding stage calls it: windows of 64 texts.
    parts = [model.embed(texts[i : i + per_call]) for i in range(0, len(texts), per_call)]
    return np.vstack(parts)


def _queries(texts: list[str]) -> list[str]:
    """12 words from the middle of each chunk (deterministic): the query that should find that chunk."""
    out = []
    for text in texts:
        words = text.split()
        start = max(0, len(words) // 3)
        out.append(" ".join(words[start : start + 12]) or text[:80])
    return out


def _top(vectors: Vectors, queries: Vectors, k: int, exclude_self: bool) -> npt.NDArray[np.intp]:
    import numpy as np

    sims = np.asarray(queries) @ np.asarray(vectors).T
    if exclude_self:
        np.fill_diagonal(sims, -np.inf)
    return np.argsort(-sims, axis=1, kind="stable")[:, :k]


def quantisation(texts: list[str], rounds: int) -> None:
    import numpy as np

    from chalicelib.adapters.models.embed_pool import PooledMiniLm
    from chalicelib.adapters.models.local_onnx import MINILM_MODEL_ID, MINILM_QINT8_MODEL_ID, MiniLmEmbedding

    shipped = MiniLmEmbedding(model_id=MINILM_MODEL_ID)
    qint8 = MiniLmEmbedding(model_id=MINILM_QINT8_MODEL_ID)
    start = time.perf_counter()
    qint8.warm_up()  # builds the quantised file if this machine has none cached yet
    print(f"int8-arithmetic model ready in {time.perf_counter() - start:.1f} s: {qint8.model_file()}")
    pooled = PooledMiniLm(MINILM_QINT8_MODEL_ID, workers=2)
    pooled.warm_up()
    shipped.warm_up()
    models: dict[str, EmbeddingModel] = {
        "shipped int8 file (fp32 arithmetic)": shipped,
        "int8 arithmetic, 1 process": qint8,
    }
    models["int8 arithmetic, 2 worker processes"] = pooled
    rates: dict[str, list[float]] = {name: [] for name in models}
    vectors: dict[str, Vectors] = {}
    try:
        for round_no in range(rounds):
            names = list(models) if round_no % 2 == 0 else list(models)[::-1]
            for name in names:
                start = time.perf_counter()
                vectors[name] = _embed_in_calls(models[name], texts)
                rates[name].append(len(texts) / (time.perf_counter() - start))
        queries = _queries(texts)
        q_old = _embed_in_calls(shipped, queries)
        q_new = _embed_in_calls(qint8, queries)
    finally:
        pooled.close()
    base = next(iter(models))
    base_rate = statistics.median(rates[base])
    print(f"\nraw model, {len(texts)} chunks in calls of 64, median of {rounds} interleaved rounds:")
    for name in models:
        rate = statistics.median(rates[name])
        print(
            f"  {name:38} {rate:7.1f} chunks/s  {rate / base_rate:5.2f}x  {[round(r, 1) for r in rates[name]]}"
        )
    old = np.asarray(vectors[base])
    new = np.asarray(vectors["int8 arithmetic, 1 process"])
    pooled_new = np.asarray(vectors["int8 arithmetic, 2 worker processes"])
    cos = (old * new).sum(axis=1)
    print(
        f"cosine new vs current vectors: median {np.median(cos):.4f}, p5 {np.percentile(cos, 5):.4f}, "
        f"min {cos.min():.4f}; 2 workers vs 1 process: min {(pooled_new * new).sum(axis=1).min():.6f}"
    )
    top_old, top_new = _top(old, old, 5, True), _top(new, new, 5, True)
    agree = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(top_old, top_new, strict=True)])
    print(f"top-5 neighbour agreement (each chunk's 5 nearest chunks): {agree:.1%}")
    truth = np.arange(len(texts))[:, None]
    for label, docs, qs in (("current", old, q_old), ("int8 arithmetic", new, q_new)):
        top = np.asarray(_top(docs, qs, 5, False))
        r1 = float(np.mean(top[:, :1] == truth))
        r5 = float(np.mean((top == truth).any(axis=1)))
        print(
            f"retrieval, {len(texts)} self-supervised queries, {label:16}: recall@1 {r1:.3f}  recall@5 {r5:.3f}"
        )


def spaces(texts: list[str], rounds: int) -> None:
    """Every local model space on the same chunks, one process each: speed (median of interleaved
    rounds, CPU time), cosine to the shipped file's vectors, recall@1/@5 of the self-supervised queries."""
    import numpy as np

    from chalicelib.adapters.models.local_onnx import MINILM_MODEL_ID, MiniLmEmbedding
    from chalicelib.settings import LOCAL_MINILM_MODEL_IDS

    models = {model_id: MiniLmEmbedding(model_id=model_id) for model_id in LOCAL_MINILM_MODEL_IDS}
    for model in models.values():
        model.warm_up()
    cpu: dict[str, list[float]] = {model_id: [] for model_id in models}
    vectors: dict[str, Vectors] = {}
    for round_no in range(rounds):
        for model_id in list(models) if round_no % 2 == 0 else list(models)[::-1]:
            start = time.process_time()
            vectors[model_id] = np.asarray(_embed_in_calls(models[model_id], texts))
            cpu[model_id].append(time.process_time() - start)
    queries = _queries(texts)
    truth = np.arange(len(texts))[:, None]
    print(f"\nlocal model spaces, {len(texts)} chunks, 1 process, median of {rounds} interleaved rounds:")
    for model_id, model in models.items():
        top = np.asarray(_top(vectors[model_id], _embed_in_calls(model, queries), 5, False))
        cos = (vectors[model_id] * vectors[MINILM_MODEL_ID]).sum(axis=1)
        print(
            f"  {model_id:34} {len(texts) / statistics.median(cpu[model_id]):6.1f} chunks per CPU-s  "
            f"cosine to the shipped file: median {np.median(cos):.4f}, min {cos.min():.4f}  "
            f"recall@1 {np.mean(top[:, :1] == truth):.3f}  recall@5 {np.mean((top == truth).any(axis=1)):.3f}"
        )


def index_throughput(texts: list[str], vectors: Vectors, space: IndexSpace, state: Path) -> None:
    from chalicelib.adapters.index.embedded import EmbeddedEngine
    from chalicelib.ports import IndexEntry

    entries = [
        IndexEntry(
            id=f"c{i}",
            kb_id="kb",
            knowledge_id=f"k{i // 50}",
            chunk_id=f"c{i}",
            content=text,
            vector=vectors[i],
        )
        for i, text in enumerate(texts)
    ]
    engine = EmbeddedEngine(state / "index")
    start = time.perf_counter()
    for i in range(0, len(entries), 100):
        engine.batch_index(space, entries[i : i + 100])
    print(f"index, embedded    {len(entries) / (time.perf_counter() - start):8.1f} entries/s")
    try:
        import osmem_server
    except ImportError:
        print("index, opensearch  (osmem-server not installed; skipped)")
        return
    from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client

    server = osmem_server.OsmemServer.start(addr="127.0.0.1:0")
    try:
        engine_os = OpenSearchEngine(build_opensearch_client(server.url), refresh=False)
        start = time.perf_counter()
        for i in range(0, len(entries), 100):
            engine_os.batch_index(space, entries[i : i + 100])
        rate = len(entries) / (time.perf_counter() - start)
        print(f"index, opensearch  {rate:8.1f} entries/s (adapter + osmem-server, in-memory stand-in)")
    finally:
        server.close()


if __name__ == "__main__":
    main()
