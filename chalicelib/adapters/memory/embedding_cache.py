"""The embedding cache, in memory."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from chalicelib.ports import (
    IndexSpace,
)

if TYPE_CHECKING:
    from chalicelib.ports import Vectors


class MemoryEmbeddingCache:
    """Vectors by (tenant, space, content hash), kept as float32 like the DynamoDB cache's bytes; a stored vector
    of another size is a miss there, and here."""

    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str, str], Any] = {}
        #: content hashes written by each put_many call, in order (the checkpoints)
        self.writes: list[list[str]] = []
        self._lock = threading.Lock()

    def get_many(
        self, tenant_id: str, space: IndexSpace, content_hashes: Sequence[str]
    ) -> dict[str, Vectors]:
        with self._lock:
            found = {h: self._vectors.get((tenant_id, space.name, h)) for h in dict.fromkeys(content_hashes)}
        return {h: v.copy() for h, v in found.items() if v is not None and v.shape[0] == space.dimensions}

    def put_many(self, tenant_id: str, space: IndexSpace, vectors: Mapping[str, Vectors]) -> None:
        import numpy as np

        stored = {h: np.asarray(v, dtype=np.float32).copy() for h, v in vectors.items()}
        with self._lock:
            for content_hash, vector in stored.items():
                self._vectors[(tenant_id, space.name, content_hash)] = vector
            self.writes.append(list(stored))
