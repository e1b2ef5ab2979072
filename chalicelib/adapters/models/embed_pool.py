"""The local MiniLM in N worker processes, one single-threaded ONNX Runtime session each.

On the 2-core machines one session with 2 intra-op threads ran slower than with 1, and two threads of one
process share the GIL with everything else the local runtime does (parsing, chunking, moto); two
single-threaded processes are truly parallel. `PooledMiniLm.embed` deals a call's texts round-robin by
length to the workers (each gets a similar mix of long and short texts), runs the shares in parallel and
puts the vectors back in order. A text's vector does not depend on its batch neighbours beyond float noise
(see MiniLmEmbedding), so the result equals the in-process model's up to that noise.

Workers start on first use (spawn, not fork: the parent runs threads; spawn imports the parent's main
module in each worker, so an entry point keeps its work under `if __name__ == "__main__"`, as the CLI,
pytest and the benches do), each loads the model once. The
int8-arithmetic file is built in the parent before any worker starts, so workers never quantise. A worker
that dies (killed, out of memory) breaks the pool: the call raises ModelUnavailable (a transient stage
error) and the next call starts a fresh pool.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from chalicelib.adapters.models.local_onnx import (
    MAX_INPUT_CHARS,
    MINILM_DIMENSIONS,
    MINILM_MAX_TOKENS,
    MiniLmEmbedding,
    empty_vectors,
)
from chalicelib.domain import metering
from chalicelib.ports import ModelUnavailable
from chalicelib.settings import pin_numeric_threads

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

#: below this many texts per worker a call is not split (the hand-off would cost more than it saves)
MIN_TEXTS_PER_WORKER = 4

_WORKER_MODEL: MiniLmEmbedding | None = None


def _init_worker(model_id: str, model_path: str) -> None:
    global _WORKER_MODEL
    pin_numeric_threads()  # one core per worker
    _WORKER_MODEL = MiniLmEmbedding(model_id=model_id, intra_op_threads=1, model_path=Path(model_path))
    _WORKER_MODEL.warm_up()


def _embed_in_worker(texts: list[str]) -> tuple[np.ndarray, float]:
    """The vectors, and the CPU seconds they took (metered as the calling invocation's work)."""
    assert _WORKER_MODEL is not None, "worker not initialised"
    started = time.process_time()
    vectors = np.asarray(_WORKER_MODEL.embed(texts), dtype=np.float32)
    return vectors, time.process_time() - started


def _ready(_: int) -> int:
    return os.getpid()


class PooledMiniLm:
    """EmbeddingModel: MiniLmEmbedding in `workers` processes. Thread-safe; workers start on first use."""

    model_id: str
    dimensions: int
    max_input_chars: int

    def __init__(self, model_id: str, *, workers: int, cache_dir: str = "") -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.model_id = model_id
        self.dimensions = MINILM_DIMENSIONS
        self.max_input_chars = MAX_INPUT_CHARS
        self.max_tokens = MINILM_MAX_TOKENS
        self.workers = workers
        # In this process: the tokenizer for token_count, and the file the workers load (built here once).
        self._local = MiniLmEmbedding(model_id=model_id, cache_dir=cache_dir)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        atexit.register(self.close)

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                model_file = self._local.model_file()
                self._pool = ProcessPoolExecutor(
                    max_workers=self.workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(self.model_id, str(model_file)),
                )
            return self._pool

    def warm_up(self) -> None:
        """Starts every worker and loads the model in each (a worker initialises when it takes a task)."""
        pool = self._executor()
        list(pool.map(_ready, range(self.workers)))

    def token_count(self, text: str) -> int:
        return self._local.token_count(text)

    def windows(self, text: str) -> list[str]:
        """As MiniLmEmbedding.windows: the workers run the same model, so they read the same windows."""
        return self._local.windows(text)

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = empty_vectors(texts, self.dimensions)
        if not texts:
            return out
        clipped = [t[: self.max_input_chars] for t in texts]
        shares = min(self.workers, max(1, len(clipped) // MIN_TEXTS_PER_WORKER))
        order = sorted(range(len(clipped)), key=lambda i: len(clipped[i]))
        parts = [order[k::shares] for k in range(shares)]
        pool = self._executor()
        try:
            futures: list[Future[tuple[np.ndarray, float]]] = [
                pool.submit(_embed_in_worker, [clipped[i] for i in part]) for part in parts
            ]
            for part, future in zip(parts, futures, strict=True):
                out[part], cpu_seconds = future.result()
                metering.record_offloaded(cpu_seconds)
        except BrokenProcessPool as error:
            self._discard(pool)
            raise ModelUnavailable(f"an embedding worker process died: {error}") from error
        return out

    def _discard(self, pool: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stops the workers (also at interpreter exit)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


if TYPE_CHECKING:  # static proof that the adapter satisfies the port
    from chalicelib.ports import EmbeddingModel

    _pooled: type[EmbeddingModel] = PooledMiniLm
