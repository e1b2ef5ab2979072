"""The knowledge graph in DynamoDB: entities and relations per knowledge base."""

from __future__ import annotations

from collections.abc import Sequence

from pynamodb.exceptions import (
    DeleteError,
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
        m = self.model
        removed = 0
        # The index holds keys only: the facts themselves are read (consistently) for their chunk ids.
        keys = [(i.kb_id, i.key) for i in m.knowledge_index.query(knowledge_id) if i.kb_id == kb_id]
        for item in m.batch_get(keys, consistent_read=True):
            chunk_ids = set(item.chunk_ids or ())
            stale = {c for c in chunk_ids if not c.startswith(chunk_prefix)}
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
                removed += 1
            except DeleteError as error:
                if not _condition_failed(error):
                    raise
        return removed


# ---------------------------------------------------------------- wiki
