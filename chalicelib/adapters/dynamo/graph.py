"""The knowledge graph in DynamoDB: entities and relations per knowledge base."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pynamodb.exceptions import (
    DeleteError,
    PutError,
    UpdateError,
)

from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain.graph import entity_key
from chalicelib.ports import (
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
)


def _graph_key(*parts: str) -> str:
    return "#".join(p.replace("#", " ") for p in parts)


#: a window's record (`add_window`): a prefix no neighbourhood query ("n#", "e#", "r#") reads; it carries the
#: knowledge id, so `delete_knowledge` (the knowledge index) finds it too, and the window's chunk ids, so
#: `keep_only_attempt` drops other attempts' records as it drops their facts
_WINDOW = "w"


def _is_window_record(key: str) -> bool:
    return key.startswith(_WINDOW + "#")


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
        for name, attributes, chunk_id in entities:
            key = _graph_key("n", entity_key(name), knowledge_id)
            actions = [m.knowledge_id.set(knowledge_id), m.name.set(name), m.chunk_ids.add({chunk_id})]
            if attributes:
                actions.append(m.attributes.add(set(attributes)))
            m(kb_id, key).update(actions=actions)
        for source, relation, target, chunk_id in relations:
            a, b = entity_key(source), entity_key(target)
            for key, name, other in (
                (_graph_key("e", a, relation.casefold(), b, knowledge_id), source, target),
                (_graph_key("r", b, relation.casefold(), a, knowledge_id), target, source),
            ):
                m(kb_id, key).update(
                    actions=[
                        m.knowledge_id.set(knowledge_id),
                        m.name.set(name),
                        m.other.set(other),
                        m.relation.set(relation),
                        m.chunk_ids.add({chunk_id}),
                    ]
                )

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
                facts = (i for i in self._items(kb_id, knowledge_id) if not _is_window_record(i.key))
                self._retract(facts, lambda ids: ids & earlier)
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
            if not _condition_failed(error):
                raise
        record.update(actions=[m.knowledge_id.set(knowledge_id), m.chunk_ids.add(window)])
        return set(record.chunk_ids or ())

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood:
        key = entity_key(entity)
        node = self._node(kb_id, key)
        edges: list[GraphEdge] = []
        merged: dict[tuple[str, str, str], set[str]] = {}
        for prefix, forward in (("e", True), ("r", False)):
            for item in self.model.query(
                kb_id, self.model.key.startswith(_graph_key(prefix, key) + "#"), limit=limit * 4
            ):
                triple = (
                    (item.name, item.relation, item.other)
                    if forward
                    else (item.other, item.relation, item.name)
                )
                merged.setdefault(triple, set()).add(item.knowledge_id)
        for (source, relation, target), knowledge_ids in list(merged.items())[:limit]:
            edges.append(GraphEdge(source, relation, target, sorted(knowledge_ids)))
        others = {entity_key(e.target if entity_key(e.source) == key else e.source) for e in edges}
        neighbours = [
            n for n in (self._node(kb_id, other) for other in sorted(others)[:limit]) if n is not None
        ]
        return GraphNeighbourhood(node, edges, neighbours)

    def _node(self, kb_id: str, key: str) -> GraphNode | None:
        items = list(self.model.query(kb_id, self.model.key.startswith(_graph_key("n", key) + "#")))
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
