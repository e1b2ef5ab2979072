"""Helpers both index engines share: vector checks, copy id remapping, the refusal of a query."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from chalicelib.domain.errors import BadRequest
from chalicelib.ports import IndexEntry, IndexSpace

# Candidates each list contributes before fusion; top_k larger than this widens the pool.
DEFAULT_CANDIDATES = 50

#: Term proximity: two consecutive words of a query found at most this many positions apart in a chunk
#: score again (the window of Rasolofo and Savoy, "Term proximity scoring for keyword-based retrieval
#: systems", ECIR 2003). Pairs, not the whole query as one phrase: a chunk missing one word (an OCR or
#: ASR error, a paraphrase) keeps the credit of its other pairs. FTS5 `NEAR(a b, PROXIMITY_WINDOW - 1)`
#: on the embedded engine, `match_phrase` with `slop: PROXIMITY_WINDOW - 1` on OpenSearch.
PROXIMITY_WINDOW = 5


class QueryTooComplex(BadRequest):
    """The engine refused the query's text itself (OpenSearch: a 400 to the BM25 request, whose only free part
    is the query, e.g. more than 1,024 clauses from a text the term cap could not bound): the tenant can
    shorten it. Fixed text only: the server's reason may quote the query or the cluster's internals."""

    code = "query_too_complex"

    def __init__(self) -> None:
        super().__init__("the search index refused the query as too complex; shorten the query text")


def unit_vector(vector: npt.ArrayLike, space: IndexSpace) -> npt.NDArray[np.float32] | None:
    """The vector as float32, L2-normalised; None for a zero vector. Raises on a wrong dimension."""
    arr = np.asarray(vector, dtype=np.float32).reshape(-1)
    if arr.shape[0] != space.dimensions:
        raise ValueError(f"vector has {arr.shape[0]} dimensions, space {space.name} needs {space.dimensions}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("vector contains NaN or infinity")
    norm = float(np.linalg.norm(arr))
    if norm == 0.0:
        return None
    return (arr / norm).astype(np.float32, copy=False)


def remap_id(value: str, chunk_id: str, new_chunk_id: str, id_map: Mapping[str, str]) -> str:
    """Renames an id derived from a chunk id (e.g. `<chunk>-q1` for a generated question)."""
    if value == chunk_id:
        return new_chunk_id
    if value in id_map:
        return id_map[value]
    if chunk_id and value.startswith(chunk_id):
        return new_chunk_id + value[len(chunk_id) :]
    return f"{new_chunk_id}:{value}"


def remap_entry(
    entry: IndexEntry, dst_kb_id: str, src_knowledge_id: str, dst_knowledge_id: str, id_map: Mapping[str, str]
) -> IndexEntry | None:
    """The copy of `entry` in the destination, or None when its chunk was not copied (not in id_map)."""
    new_chunk = id_map.get(entry.chunk_id)
    if new_chunk is None:
        return None
    if not entry.source_id:
        source_id = ""
    elif entry.source_id == src_knowledge_id:
        source_id = dst_knowledge_id
    elif (
        entry.source_id == entry.chunk_id
        or entry.source_id in id_map
        or entry.source_id.startswith(entry.chunk_id)
    ):
        source_id = remap_id(entry.source_id, entry.chunk_id, new_chunk, id_map)
    else:
        source_id = entry.source_id  # points outside the copied chunks: keep
    return IndexEntry(
        id=remap_id(entry.id, entry.chunk_id, new_chunk, id_map),
        kb_id=dst_kb_id,
        knowledge_id=dst_knowledge_id,
        chunk_id=new_chunk,
        content=entry.content,
        vector=entry.vector,
        source_id=source_id,
        source_type=entry.source_type,
        chunk_type=entry.chunk_type,
        is_enabled=entry.is_enabled,
    )
