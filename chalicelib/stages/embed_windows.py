"""Texts longer than the embedding model's window (issue 12): a model that reads only its first N tokens
(MiniLM: 256) would embed such a chunk truncated, its tail invisible to vector search. A model that says
how it cuts a text into windows it reads whole (`windows(text) -> list[str]`, on token boundaries) gets
every window embedded; the text's vector is the mean of the window vectors weighted by their length, L2-normalised.

One vector per text, so search stays one result per chunk and a redelivered slice upserts the same entry.
The cache key of a windowed text differs from a plain text's (`windowed_key`): a vector cached before this
change (the truncated one) is never taken for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..domain.ids import content_hash

if TYPE_CHECKING:
    from ..ports import Vectors

#: cache-key prefix of texts embedded as several windows (bump when the pooling changes)
WINDOWED = "\x00windows-v1\x00"


def windows_of(model: Any, text: str) -> list[str]:
    """The pieces `model` reads whole, in order; `[text]` when it fits or the model has no window."""
    split = getattr(model, "windows", None)
    limit = getattr(model, "max_tokens", 0)
    # Every token but [CLS]/[SEP] covers at least one character: a shorter text cannot overflow.
    if split is None or not limit or len(text) <= limit - 2:
        return [text]
    parts: list[str] = split(text)
    return parts or [text]


def window_key(text: str, parts: Sequence[str]) -> str:
    """Embedding-cache key: the plain content hash, or a distinct one for a windowed text."""
    return content_hash(text) if len(parts) == 1 else content_hash(WINDOWED + text)


def pool(vectors: Vectors, parts: Sequence[Sequence[str]]) -> Vectors:
    """One row per text from the rows of its windows (flattened in order): length-weighted mean, unit norm."""
    import numpy as np

    out = np.zeros((len(parts), vectors.shape[1]), dtype=np.float32)
    row = 0
    for i, pieces in enumerate(parts):
        n = len(pieces)
        if n == 1:
            out[i] = vectors[row]
        else:
            weights = np.array([max(len(p), 1) for p in pieces], dtype=np.float32)
            mean = (vectors[row : row + n] * weights[:, None]).sum(axis=0)
            out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        row += n
    return out
