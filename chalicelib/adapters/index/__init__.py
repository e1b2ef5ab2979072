"""Retrieval engines behind the RetrieveEngine port: embedded (SQLite FTS5 + numpy) and OpenSearch."""

from .common import IndexWriteError
from .embedded import EmbeddedEngine
from .fusion import KEYWORD_WEIGHT, fuse

__all__ = ["KEYWORD_WEIGHT", "EmbeddedEngine", "IndexWriteError", "fuse"]
