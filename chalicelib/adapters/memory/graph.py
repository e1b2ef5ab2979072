"""The knowledge graph, in memory."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from chalicelib.domain.item_limits import (
    GRAPH_MAX_ATTRIBUTES,
    GRAPH_MAX_CHUNK_IDS,
    ITEM_MAX_BYTES,
    SORT_KEY_MAX_BYTES,
    graph_attributes,
    graph_name,
    graph_name_part,
    graph_relation,
    graph_relation_part,
    item_size,
    utf8_size,
)
from chalicelib.ports import (
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
)
from chalicelib.ports.graph import GraphWriteRefused

if TYPE_CHECKING:
    pass


def _sort_key(*parts: str) -> str:
    return "#".join(p.replace("#", " ") for p in parts)


def _fits(kb_id: str, key: str, *values: tuple[str, object]) -> None:
    """DynamoDB's limits on the item the table would hold (its sort key as the adapter spells it): a write
    past them is refused there, so it is here."""
    size = item_size([("kb_id", kb_id), ("key", key), *values])
    if utf8_size(key) > SORT_KEY_MAX_BYTES or size > ITEM_MAX_BYTES:
        raise GraphWriteRefused("the graph store refused a fact (item or key too large)")


class MemoryGraphRepo:
    """Each knowledge's contribution kept apart, as the DynamoDB items are (node, edge, reversed edge)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str, str], GraphNode] = {}  # (kb, entity key, knowledge)
        self._edges: dict[tuple[str, str, str, str, str], GraphEdge] = {}  # (kb, a, rel, b, knowledge)
        self._edge_chunks: dict[tuple[str, str, str, str, str], set[str]] = {}
        self._windows: dict[tuple[str, str, str], set[str]] = {}  # (kb, knowledge, window key): chunk ids
        self._lock = threading.Lock()

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        with self._lock:
            for name, attributes, chunk_id in entities:
                stored, kept = graph_name(name), graph_attributes(attributes)
                part = graph_name_part(stored)
                node = self._nodes.get((kb_id, part, knowledge_id)) or GraphNode(
                    stored, [], [], [knowledge_id]
                )
                chunk_ids = set(node.chunk_ids)
                if len(chunk_ids) < GRAPH_MAX_CHUNK_IDS:  # a fact's item keeps this many, as the table's
                    chunk_ids.add(chunk_id)
                values = set(node.attributes)
                if kept and len(values) < GRAPH_MAX_ATTRIBUTES:
                    values |= set(kept)
                _fits(
                    kb_id,
                    _sort_key("n", part, knowledge_id),
                    ("knowledge_id", knowledge_id),
                    ("name", stored),
                    ("chunk_ids", chunk_ids),
                    ("attributes", values),
                )
                node.attributes, node.chunk_ids = sorted(values), sorted(chunk_ids)
                self._nodes[(kb_id, part, knowledge_id)] = node
            for source, relation, target, chunk_id in relations:
                source, relation, target = graph_name(source), graph_relation(relation), graph_name(target)
                a, rel, b = graph_name_part(source), graph_relation_part(relation), graph_name_part(target)
                edge_key = (kb_id, a, rel, b, knowledge_id)
                chunk_ids = set(self._edge_chunks.get(edge_key, set()))
                if len(chunk_ids) < GRAPH_MAX_CHUNK_IDS:
                    chunk_ids.add(chunk_id)
                _fits(
                    kb_id,
                    _sort_key("e", a, rel, b, knowledge_id),
                    ("knowledge_id", knowledge_id),
                    ("name", source),
                    ("other", target),
                    ("relation", relation),
                    ("chunk_ids", chunk_ids),
                )
                self._edges.setdefault(edge_key, GraphEdge(source, relation, target, [knowledge_id]))
                self._edge_chunks[edge_key] = chunk_ids

    def add_window(
        self,
        kb_id: str,
        knowledge_id: str,
        window_key: str,
        chunk_ids: Sequence[str],
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        window = {*chunk_ids, *(e[2] for e in entities), *(r[3] for r in relations)}
        if window:
            with self._lock:
                key = (kb_id, knowledge_id, window_key)
                earlier = key in self._windows
                recorded = self._windows.setdefault(key, set())
                recorded |= window
                if earlier:  # a redelivery: what an earlier answer added for these chunks goes first
                    self._retract(kb_id, knowledge_id, recorded.__contains__)
        self.add(kb_id, knowledge_id, entities, relations)

    def _node(self, kb_id: str, key: str) -> GraphNode | None:
        parts = [n for (kb, k, _), n in self._nodes.items() if kb == kb_id and k == key]
        if not parts:
            return None
        return GraphNode(
            parts[0].name,
            sorted({a for n in parts for a in n.attributes}),
            sorted({c for n in parts for c in n.chunk_ids}),
            sorted({k for n in parts for k in n.knowledge_ids}),
        )

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood:
        key = graph_name_part(entity)
        with self._lock:
            merged: dict[tuple[str, str, str], set[str]] = {}
            for (kb, a, _rel, b, knowledge), edge in self._edges.items():
                if kb == kb_id and key in (a, b):
                    merged.setdefault((edge.source, edge.relation, edge.target), set()).add(knowledge)
            edges = [GraphEdge(s, r, t, sorted(ks)) for (s, r, t), ks in list(merged.items())[:limit]]
            others = sorted(
                {graph_name_part(e.target if graph_name_part(e.source) == key else e.source) for e in edges}
            )
            neighbours = [n for n in (self._node(kb_id, o) for o in others[:limit]) if n is not None]
            return GraphNeighbourhood(self._node(kb_id, key), edges, neighbours)

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int:
        with self._lock:
            nodes = [k for k in self._nodes if k[0] == kb_id and k[2] == knowledge_id]
            edges = [k for k in self._edges if k[0] == kb_id and k[4] == knowledge_id]
            for node in nodes:
                del self._nodes[node]
            for edge in edges:
                del self._edges[edge]
                self._edge_chunks.pop(edge, None)
            for window in [k for k in self._windows if k[:2] == (kb_id, knowledge_id)]:
                del self._windows[window]
            return len(nodes) + 2 * len(edges)

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        with self._lock:
            for key, recorded in list(self._windows.items()):  # other attempts' window records go too
                if key[:2] == (kb_id, knowledge_id):
                    kept = {c for c in recorded if c.startswith(chunk_prefix)}
                    if kept:
                        self._windows[key] = kept
                    else:
                        del self._windows[key]
            return self._retract(kb_id, knowledge_id, lambda c: not c.startswith(chunk_prefix))

    def retract_chunks(self, kb_id: str, knowledge_id: str, chunk_ids: Sequence[str]) -> int:
        leaving = set(chunk_ids)
        with self._lock:
            return self._retract(kb_id, knowledge_id, leaving.__contains__)

    def _retract(self, kb_id: str, knowledge_id: str, leaving: Callable[[str], bool]) -> int:
        """Takes the chunk ids `leaving` picks out of the knowledge's facts; a fact left with none goes.
        Returns the facts removed, counted as the DynamoDB items are. The lock is held."""
        removed = 0
        for key, node in list(self._nodes.items()):
            if key[0] == kb_id and key[2] == knowledge_id:
                node.chunk_ids = [c for c in node.chunk_ids if not leaving(c)]
                if not node.chunk_ids:
                    del self._nodes[key]
                    removed += 1
        for edge_key, chunk_ids in list(self._edge_chunks.items()):
            if edge_key[0] == kb_id and edge_key[4] == knowledge_id:
                kept = {c for c in chunk_ids if not leaving(c)}
                self._edge_chunks[edge_key] = kept
                if not kept:
                    del self._edges[edge_key], self._edge_chunks[edge_key]
                    removed += 2  # the edge and its reverse, as the DynamoDB items
        return removed
