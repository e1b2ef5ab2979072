"""The LlamaIndex side of bench_e2e_llamaindex.py; runs in the peer venv (/work/shared/peer-bench), never
imports chalicelib.

    PEER_VENV/bin/python bench/peer_llamaindex_e2e.py --model FILE --tokenizer FILE --chunk-size N \
        --chunk-overlap M FILE...
    PEER_VENV/bin/python bench/peer_llamaindex_e2e.py --probe TEXTS.json FILE...
    PEER_VENV/bin/python bench/peer_llamaindex_e2e.py --texts TEXTS.json --match-nodes N

`--probe` (untimed, before the bench) converts every file with MarkItDown and writes what it read to
TEXTS.json: the files it cannot read (an exception, or no text) are named there with the reason, and the
bench leaves them out of both sides. `--match-nodes` finds the SentenceSplitter chunk size (overlap a tenth)
whose node count on those texts is closest to N (our chunk count): matched granularity on any folder.

MarkItDown converts each file, an IngestionPipeline(SentenceSplitter(N, M), MiniLM) embeds the nodes, and a
VectorStoreIndex (in-memory) takes them; one retrieval proves the index answers. The embedding is the same
MiniLM ONNX file our stack runs, with the same tokenizer (256 tokens), mean pooling and L2 norm, batches of
16 texts as LlamaIndex sends them, one ONNX Runtime thread (two ran slower on these 2-core machines).
Prints one JSON line: times (parse, pipeline, index, total), nodes, files that failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)


def make_embedding(model_path: str, tokenizer_path: str) -> Any:
    import numpy as np
    import onnxruntime as ort
    from llama_index.core.embeddings import BaseEmbedding
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    tokenizer = Tokenizer.from_file(tokenizer_path)
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=256)

    def encode(texts: list[str]) -> list[list[float]]:
        encodings = tokenizer.encode_batch(texts)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        (hidden,) = session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return pooled.tolist()

    class MiniLmOnnx(BaseEmbedding):
        def _get_text_embedding(self, text: str) -> list[float]:
            return encode([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return encode(texts)

        def _get_query_embedding(self, query: str) -> list[float]:
            return encode([query])[0]

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return encode([query])[0]

    return MiniLmOnnx(model_name="all-MiniLM-L6-v2-onnx", embed_batch_size=16)


def probe(out: Path, files: list[str]) -> None:
    """MarkItDown on every file: the texts it reads, and the files it cannot read with the reason."""
    from markitdown import MarkItDown

    md = MarkItDown()
    texts: dict[str, str] = {}
    unreadable: dict[str, str] = {}
    for name in files:
        try:
            text = md.convert(name).markdown
        except Exception as error:  # any failure of the peer's reader excludes the file from both sides
            unreadable[name] = f"{type(error).__name__}: {str(error)[:160]}"
            continue
        if text and text.strip():
            texts[name] = text
        else:
            unreadable[name] = "no text"
    out.write_text(json.dumps({"texts": texts, "unreadable": unreadable}))
    print(json.dumps({"readable": sorted(texts), "unreadable": unreadable}))


def match_nodes(texts_file: Path, target: int) -> None:
    """The chunk size (tokens; overlap a tenth) whose SentenceSplitter node count is closest to `target`."""
    from llama_index.core import Document
    from llama_index.core.node_parser import SentenceSplitter

    docs = [Document(text=t) for t in json.loads(texts_file.read_text())["texts"].values()]

    def nodes(size: int) -> int:
        splitter = SentenceSplitter(chunk_size=size, chunk_overlap=max(10, size // 10))
        return len(splitter.get_nodes_from_documents(docs))

    low, high = 64, 2048  # node count falls as the size grows: bisect for the last size >= target
    counts = {low: nodes(low), high: nodes(high)}
    while high - low > 1:
        mid = (low + high) // 2
        counts[mid] = nodes(mid)
        if counts[mid] >= target:
            low = mid
        else:
            high = mid
    best = min(counts, key=lambda size: (abs(counts[size] - target), size))
    print(json.dumps({"chunk_size": best, "chunk_overlap": max(10, best // 10), "nodes": counts[best]}))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--tokenizer")
    ap.add_argument("--chunk-size", type=int)
    ap.add_argument("--chunk-overlap", type=int)
    ap.add_argument("--probe", type=Path, help="write MarkItDown's texts of FILE... here and stop")
    ap.add_argument("--texts", type=Path, help="a --probe output, for --match-nodes")
    ap.add_argument("--match-nodes", type=int, help="print the chunk size that makes about this many nodes")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.probe:
        import onnxruntime  # noqa: F401  (the timed runs need both: say so before any clock)
        import tokenizers  # noqa: F401

        probe(a.probe, a.files)
        return
    if a.match_nodes:
        match_nodes(a.texts, a.match_nodes)
        return
    if not (a.model and a.tokenizer and a.chunk_size and a.chunk_overlap is not None and a.files):
        ap.error("--model, --tokenizer, --chunk-size, --chunk-overlap and FILE... are required")

    from llama_index.core import Document, Settings, VectorStoreIndex
    from llama_index.core.embeddings import MockEmbedding
    from llama_index.core.ingestion import IngestionPipeline
    from llama_index.core.node_parser import SentenceSplitter
    from markitdown import MarkItDown

    Settings.embed_model = MockEmbedding(embed_dim=384)  # never resolve a default (OpenAI) model
    Settings.llm = None
    embed = make_embedding(a.model, a.tokenizer)
    embed.get_text_embedding("warm up")
    md = MarkItDown()
    md.convert(a.files[0])  # warm-up (magika model load), not counted

    t0 = time.perf_counter()
    docs, failed = [], []
    for name in a.files:
        try:
            text = md.convert(name).markdown
        except Exception:  # a peer's failure on one file is reported, not fatal
            failed.append(Path(name).name)
            continue
        if text and text.strip():
            docs.append(Document(text=text, metadata={"file": Path(name).name}))
        else:
            failed.append(Path(name).name)
    t1 = time.perf_counter()
    pipe = IngestionPipeline(
        transformations=[SentenceSplitter(chunk_size=a.chunk_size, chunk_overlap=a.chunk_overlap), embed]
    )
    nodes = pipe.run(documents=docs)
    t2 = time.perf_counter()
    index = VectorStoreIndex(nodes, embed_model=embed)
    hits = index.as_retriever(similarity_top_k=3).retrieve("how to install a package")
    t3 = time.perf_counter()
    chars = [len(n.get_content()) for n in nodes]
    print(
        json.dumps(
            {
                "files": len(a.files),
                "docs": len(docs),
                "failed": failed,
                "nodes": len(nodes),
                "mean_node_chars": sum(chars) / max(1, len(chars)),
                "parse_s": t1 - t0,
                "pipeline_s": t2 - t1,
                "index_s": t3 - t2,
                "total_s": t3 - t0,
                "top_hit": hits[0].node.metadata.get("file") if hits else None,
            }
        )
    )


if __name__ == "__main__":
    main()
