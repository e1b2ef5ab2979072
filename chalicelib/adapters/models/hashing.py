"""HashingEmbedding: a deterministic TEST DOUBLE for EmbeddingModel. Not a semantic model.

It hashes lower-cased word unigrams and bigrams into `dimensions` buckets with a signed hash (the
"hashing trick"), then L2-normalises. Texts sharing words get a positive cosine, so keyword-ish
retrieval tests behave sensibly, but it knows nothing about meaning. Use it in unit tests and local
runs where loading the ONNX model is not wanted; never for a real knowledge base.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from chalicelib.ports import Vectors


_WORD = re.compile(r"\w+", re.UNICODE)


class HashingEmbedding:
    """Test double: deterministic signed feature hashing of words and word pairs, L2-normalised."""

    max_input_chars: int

    def __init__(self, dimensions: int = 384, *, max_input_chars: int = 20_000) -> None:
        if dimensions < 2:
            raise ValueError("dimensions must be >= 2")
        self.dimensions = dimensions
        self.model_id = f"hashing/{dimensions}"
        self.max_input_chars = max_input_chars
        self.calls: list[int] = []  # batch sizes seen, for tests that count model calls

    def _vector(self, text: str) -> np.ndarray:
        vec = np.zeros(self.dimensions, dtype=np.float64)
        words = _WORD.findall(text[: self.max_input_chars].lower())
        features = words + [f"{a} {b}" for a, b in itertools.pairwise(words)]
        for feature in features:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            sign = 1.0 if value & 1 else -1.0
            vec[(value >> 1) % self.dimensions] += sign
        norm = float(np.linalg.norm(vec))
        if norm == 0.0:
            # Empty/punctuation-only text: a fixed unit vector keeps the output normalised.
            vec[0] = 1.0
            return vec
        return vec / norm

    def embed(self, texts: Sequence[str]) -> Vectors:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of strings, not a string")
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            out[row] = self._vector(text)
        return out
