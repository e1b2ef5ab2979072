"""The knowledge graph's port: entities and relations per knowledge base, each knowledge's part kept apart."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from chalicelib.domain.errors import WriteRefused


class GraphWriteRefused(WriteRefused):
    """The store refused a window's facts for good (too large for an item or a key): a retry would pay the
    model for an answer refused the same way, so the enrichment stage fails the window at once with this
    stable code."""

    code = "graph_write_refused"


@dataclass
class GraphNode:
    name: str
    attributes: list[str]
    chunk_ids: list[str]
    knowledge_ids: list[str]


@dataclass
class GraphEdge:
    source: str
    relation: str
    target: str
    knowledge_ids: list[str]


@dataclass
class GraphNeighbourhood:
    entity: GraphNode | None
    edges: list[GraphEdge]
    neighbours: list[GraphNode]


class GraphRepo(Protocol):
    """Entities and relations per knowledge base; each knowledge's contribution is kept apart, so deleting
    (or re-extracting) a knowledge removes exactly what it added."""

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        """entities: (name, attributes, chunk_id); relations: (source, relation, target, chunk_id).
        Idempotent: adding the same facts again changes nothing. Names, relations and attributes are cut
        to `domain.item_limits`' byte budgets, and a fact keeps at most GRAPH_MAX_CHUNK_IDS chunk ids and
        about GRAPH_MAX_ATTRIBUTES attributes, so every write fits DynamoDB; GraphWriteRefused if the
        store still refuses one."""
        ...

    def add_window(
        self,
        kb_id: str,
        knowledge_id: str,
        window_key: str,
        chunk_ids: Sequence[str],
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        """`add` for one window of chunks whose facts replace what an earlier call with the same
        `window_key` added (a redelivery whose first run died before its slot was released; a model
        answers differently each time). The window's chunk ids (and any fact's) are recorded first under
        the key; only when that record existed already are the ids recorded under it retracted from the
        knowledge's facts before the add, so a first delivery reads no facts."""
        ...

    def retract_chunks(self, kb_id: str, knowledge_id: str, chunk_ids: Sequence[str]) -> int:
        """Takes these chunks out of the knowledge's facts (an edit of their text: the facts read from the
        old text go): a fact left with no chunk goes, one other chunks support keeps them. Window records
        are left alone. Idempotent; returns the facts removed, counted as `keep_only_attempt` counts."""
        ...

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood: ...

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int: ...

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        """Drops what the knowledge's other attempts contributed: chunk ids that do not start with
        `chunk_prefix` leave every fact, and a fact left with none goes (unless a chunk id was added
        meanwhile), so facts the current attempt writes concurrently are never lost. Other attempts'
        window records (`add_window`) go the same way. Returns the facts removed (records not counted)."""
        ...
