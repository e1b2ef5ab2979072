"""The retrieval index: entries, hits, index spaces and the engine port."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # numpy stays off the API function's cold-start path
    import numpy as np
    import numpy.typing as npt

    from chalicelib.ports.models import EmbeddingModel


@dataclass
class IndexEntry:
    """One searchable entry. `id` is unique per engine space; chunks use the chunk id."""

    id: str
    kb_id: str
    knowledge_id: str
    chunk_id: str
    content: str  # the index text: title + breadcrumb + trimmed content
    vector: npt.NDArray[np.float32] | None = None
    source_id: str = ""
    source_type: str = "chunk"
    chunk_type: str = "text"
    is_enabled: bool = True


@dataclass
class SearchHit:
    id: str
    chunk_id: str
    knowledge_id: str
    kb_id: str
    content: str
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexSpace:
    """Entries embedded by one model at one dimension live in one space (one OpenSearch index)."""

    model_id: str
    dimensions: int

    @classmethod
    def of(cls, model: EmbeddingModel) -> IndexSpace:
        return cls(model.model_id, model.dimensions)

    @property
    def name(self) -> str:
        safe = "".join(ch if ch.isalnum() else "-" for ch in self.model_id.lower()).strip("-")
        return f"weknora-{safe}-{self.dimensions}"


class IndexUnavailable(ConnectionError):
    """The engine did not take the call now (unreachable, timed out, throttled, overloaded, its file busy):
    the same call later may succeed. Adapters raise it for those causes alone; any other error is theirs
    to let through, so a bug is never retried as an outage."""


class IndexWriteError(RuntimeError):
    """The engine refused or lost part of a write for a reason a retry does not change (a document its
    mapping rejects); nothing reports success for a partial write."""


class IndexRefused(IndexWriteError):
    """The engine answered a call with an error status that is not "busy" (a bad request, a refused
    credential, an internal error): a retry sends the same call. It carries the HTTP status and the
    engine's error type only (`403 security_exception`), never its reason text, which may quote the
    document or the cluster's internals."""

    def __init__(self, http_status: int | str, kind: str) -> None:
        super().__init__(f"the index refused the call ({http_status} {kind})")
        self.http_status = http_status
        self.kind = kind


class RetrieveEngine(Protocol):
    engine_name: str

    def batch_index(self, space: IndexSpace, entries: Sequence[IndexEntry]) -> None:
        """Upserts by entry id. Raises IndexUnavailable when the engine cannot take it now, IndexWriteError
        when it refuses part of it."""
        ...

    def delete_by_knowledge(self, space: IndexSpace, kb_id: str, knowledge_ids: Sequence[str]) -> int: ...

    def delete_by_ids(self, space: IndexSpace, kb_id: str, entry_ids: Sequence[str]) -> int: ...

    def copy(
        self,
        space: IndexSpace,
        src_kb_id: str,
        src_knowledge_id: str,
        dst_kb_id: str,
        dst_knowledge_id: str,
        id_map: Mapping[str, str],
    ) -> int:
        """Copies entries (vectors included, nothing re-embedded), renaming chunk ids by `id_map`."""
        ...

    def entries_of(self, space: IndexSpace, kb_id: str, knowledge_id: str) -> list[IndexEntry]:
        """The knowledge's entries as indexed (text, ids, flags; no vectors): what a re-embed into another
        space embeds again."""
        ...

    def set_enabled(self, space: IndexSpace, kb_id: str, chunk_ids: Sequence[str], enabled: bool) -> int: ...

    def hybrid_search(
        self,
        space: IndexSpace,
        kb_id: str,
        query_text: str,
        query_vector: npt.NDArray[np.float32] | None,
        top_k: int,
        *,
        keyword: bool = True,
        vector: bool = True,
        knowledge_ids: Sequence[str] | None = None,
        keyword_weight: float | None = None,
        min_score: float = 0.0,
    ) -> list[SearchHit]:
        """The best `top_k` enabled entries of the knowledge base (`adapters/index/fusion.py` `rank`: fused
        when both lists run, else one list on its own scale; nothing scoring 0 or below `min_score`).
        `knowledge_ids`, when given, is a pre-filter inside both queries (an empty list finds nothing), so a
        filter never leaves fewer than `top_k` hits where more match. `keyword_weight` overrides the
        engine's share of the BM25 list in a fused score."""
        ...

    def count(self, space: IndexSpace, kb_id: str, knowledge_id: str | None = None) -> int: ...

    def move_knowledge(
        self, space: IndexSpace, src_kb_id: str, dst_kb_id: str, knowledge_ids: Sequence[str]
    ) -> int:
        """Moves these knowledge's entries (vectors included, nothing re-embedded) from one knowledge base
        to another of the same space; the source keeps none. Idempotent: a re-run moves what is left."""
        ...

    def health(self) -> bool: ...
