"""Retrieval engines behind the RetrieveEngine port: embedded (SQLite FTS5 + numpy) and OpenSearch."""

from chalicelib.adapters.index.embedded import EmbeddedEngine
from chalicelib.adapters.index.fusion import KEYWORD_WEIGHT, fuse

__all__ = ["KEYWORD_WEIGHT", "EmbeddedEngine", "fuse"]
