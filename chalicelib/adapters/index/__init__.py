"""Retrieval engines behind the RetrieveEngine port: embedded (SQLite FTS5 + numpy) and OpenSearch."""

from .common import IndexWriteError
from .embedded import EmbeddedEngine
from .fusion import RRF_K, rrf_fuse

__all__ = ["RRF_K", "EmbeddedEngine", "IndexWriteError", "rrf_fuse"]
