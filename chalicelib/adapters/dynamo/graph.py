"""The knowledge graph in DynamoDB: entities and relations per knowledge base."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pynamodb.exceptions import (
    DeleteError,
    PutError,
    UpdateError,
)
from pynamodb.expressions.condition import size

from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain.graph import entity_key
from chalicelib.domain.item_limits import (
    GRAPH_MAX_ATTRIBUTES,
    GRAPH_MAX_CHUNK_IDS,
    SORT_KEY_MAX_BYTES,
    graph_attributes,
    graph_name,
    graph_name_part,
    graph_relation,
    graph_relation_part,
    utf8_size,
)
from chalicelib.ports import (
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
)
from chalicelib.ports.graph import GraphWriteRefused


def _graph_key(*parts: str) -> str:
    return "#".join(p.replace("#", " ") for p in parts)


#: a window's record (`add_window`): a prefix no neighbourhood query ("n#", "e#", "r#") reads; it carries the
#: knowledge id, so `delete_knowledge` (the knowledge index) finds it too, and the window's chunk ids, so
#: `keep_only_attempt` drops other attempts' records as it drops their facts
_WINDOW = "w"


def _is_window_record(key: str) -> bool:
    return key.startswith(_WINDOW + "#")


def _name_prefixes(prefix: str, name: str) -> list[str]:
    """The key prefixes an entity's facts are under: its cut key part, and its whole `entity_key` when that
    is longer (facts written before names were cut to their byte budget)."""
    starts = dict.fromkeys(_graph_key(prefix, key) + "#" for key in (graph_name_part(name), entity_key(name)))
    return [start for start in starts if utf8_size(start) < SORT_KEY_MAX_BYTES]


def _refused(error: UpdateError | PutError) -> bool:
    """DynamoDB refused the write itself (an item or key too large): the same write fails again."""
    return getattr(error, "cause_response_code", None) == "ValidationException"


class DynamoGraphRepo:
    def __init__(self, models: Models):
        self.model = models.graph

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        m = self.model
        room = m.chunk_ids.does_not_exist() | (size(m.chunk_ids) < GRAPH_MAX_CHUNK_IDS)
        for name, attributes, chunk_id in entities:
            stored, kept = graph_name(name), graph_attributes(attributes)
            key = _graph_key("n", graph_name_part(stored), knowledge_id)
            mention = [m.knowledge_id.set(knowledge_id), m.name.set(stored), m.chunk_ids.add({chunk_id})]
            if not kept:
                self._update(kb_id, key, mention, room)
                continue
            more = m.attributes.does_not_exist() | (size(m.attributes) < GRAPH_MAX_ATTRIBUTES)
            if not self._update(kb_id, key, [*mention, m.attributes.add(set(kept))], room & more):
                # full of chunk ids or of attributes: each gets in where there is room
                self._update(kb_id, key, mention, room)
                self._update(kb_id, key, [m.attributes.add(set(kept))], m.knowledge_id.exists() & more)
        for source, relation, target, chunk_id in relations:
            source, relation, target = graph_name(source), graph_relation(relation), graph_name(target)
            a, b, rel = graph_name_part(source), graph_name_part(target), graph_relation_part(relation)
            for key, name, other in (
                (_graph_key("e", a, rel, b, knowledge_id), source, target),
                (_graph_key("r", b, rel, a, knowledge_id), target, source),
            ):
                actions = [
                    m.knowledge_id.set(knowledge_id),
                    m.name.set(name),
                    m.other.set(other),
                    m.relation.set(relation),
                    m.chunk_ids.add({chunk_id}),
                ]
                self._update(kb_id, key, actions, room)

    def _update(self, kb_id: str, key: str, actions: list[Any], condition: Any) -> bool:
        """One fact's update, only while its item has room (False when it has none: the mention is known
        already, its item at its cap); GraphWriteRefused when DynamoDB refuses it for good."""
        try:
            self.model(kb_id, key).update(actions=actions, condition=condition)
        except UpdateError as error:
            if _condition_failed(error):
                return False
            if _refused(error):
                raise GraphWriteRefused("the graph store refused a fact (item or key too large)") from None
            raise
        return True

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
            earlier = self._record_window(kb_id, knowledge_id, window_key, window)
            if earlier:  # a redelivery: what an earlier answer added for these chunks goes first
                self._retract(self._facts(kb_id, knowledge_id), lambda ids: ids & earlier)
        self.add(kb_id, knowledge_id, entities, relations)

    def _record_window(self, kb_id: str, knowledge_id: str, window_key: str, window: set[str]) -> set[str]:
        """Records the window's chunk ids: empty on a first call (one conditional put, nothing read), else
        every chunk id recorded under the key, this call's included (a later redelivery retracts them all)."""
        m = self.model
        record = m(
            kb_id, _graph_key(_WINDOW, knowledge_id, window_key), knowledge_id=knowledge_id, chunk_ids=window
        )
        try:
            record.save(condition=m.key.does_not_exist())
            return set()
        except PutError as error:
            if _refused(error):
                raise GraphWriteRefused("the graph store refused a window record") from None
            if not _condition_failed(error):
                raise
        try:
            record.update(actions=[m.knowledge_id.set(knowledge_id), m.chunk_ids.add(window)])
        except UpdateError as error:
            if _refused(error):
                raise GraphWriteRefused("the graph store refused a window record") from None
            raise
        return set(record.chunk_ids or ())

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood:
        key = graph_name_part(entity)
        node = self._node(kb_id, entity)
        edges: list[GraphEdge] = []
        merged: dict[tuple[str, str, str], set[str]] = {}
        for prefix, forward in (("e", True), ("r", False)):
            found = (
                item
                for start in _name_prefixes(prefix, entity)
                for item in self.model.query(kb_id, self.model.key.startswith(start), limit=limit * 4)
            )
            for item in found:
                triple = (
                    (item.name, item.relation, item.other)
                    if forward
                    else (item.other, item.relation, item.name)
                )
                merged.setdefault(triple, set()).add(item.knowledge_id)
        for (source, relation, target), knowledge_ids in list(merged.items())[:limit]:
            edges.append(GraphEdge(source, relation, target, sorted(knowledge_ids)))
        others = {graph_name_part(e.target if graph_name_part(e.source) == key else e.source) for e in edges}
        neighbours = [
            n for n in (self._node(kb_id, other) for other in sorted(others)[:limit]) if n is not None
        ]
        return GraphNeighbourhood(node, edges, neighbours)

    def _node(self, kb_id: str, name: str) -> GraphNode | None:
        items = [
            item
            for start in _name_prefixes("n", name)
            for item in self.model.query(kb_id, self.model.key.startswith(start))
        ]
        if not items:
            return None
        return GraphNode(
            name=items[0].name,
            attributes=sorted({a for i in items for a in (i.attributes or set())}),
            chunk_ids=sorted({c for i in items for c in (i.chunk_ids or set())}),
            knowledge_ids=sorted({i.knowledge_id for i in items}),
        )

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int:
        items = [i for i in self.model.knowledge_index.query(knowledge_id) if i.kb_id == kb_id]
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(self.model(item.kb_id, item.key))
        return len(items)

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        removed = self._retract(
            self._items(kb_id, knowledge_id), lambda ids: {c for c in ids if not c.startswith(chunk_prefix)}
        )
        return sum(1 for key in removed if not _is_window_record(key))

    def retract_chunks(self, kb_id: str, knowledge_id: str, chunk_ids: Sequence[str]) -> int:
        leaving = set(chunk_ids)
        if not leaving:
            return 0
        return len(self._retract(self._facts(kb_id, knowledge_id), lambda ids: ids & leaving))

    def _facts(self, kb_id: str, knowledge_id: str) -> list[Any]:
        """The knowledge's facts, its window records left out."""
        return [i for i in self._items(kb_id, knowledge_id) if not _is_window_record(i.key)]

    def _items(self, kb_id: str, knowledge_id: str) -> list[Any]:
        """Every item of the knowledge (facts and window records), read consistently: the index holds keys
        only."""
        m = self.model
        keys = [(i.kb_id, i.key) for i in m.knowledge_index.query(knowledge_id) if i.kb_id == kb_id]
        return list(m.batch_get(keys, consistent_read=True))

    def _retract(self, items: Iterable[Any], leaving: Callable[[set[str]], set[str]]) -> list[str]:
        """Takes the chunk ids `leaving` picks out of each item, and deletes an item left with none unless a
        chunk id came in meanwhile. Returns the keys deleted."""
        m = self.model
        removed: list[str] = []
        for item in items:
            chunk_ids = set(item.chunk_ids or ())
            stale = leaving(chunk_ids)
            if not stale:
                continue
            fact = m(item.kb_id, item.key)
            try:  # a set DELETE is atomic: an id added meanwhile stays
                fact.update(actions=[m.chunk_ids.delete(stale)], condition=m.knowledge_id.exists())
            except UpdateError as error:
                if not _condition_failed(error):
                    raise
                continue  # already gone
            if chunk_ids - stale:
                continue
            try:  # only while no chunk id came in since: DynamoDB drops a set emptied by DELETE
                fact.delete(condition=m.chunk_ids.does_not_exist())
                removed.append(item.key)
            except DeleteError as error:
                if not _condition_failed(error):
                    raise
        return removed


# ---------------------------------------------------------------- wiki
