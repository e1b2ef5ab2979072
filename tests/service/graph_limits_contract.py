"""The graph port within DynamoDB's limits, on the in-memory fake (tests/service) and on DynamoDB (tests/e2e):
names the parser keeps made a sort key past 1,024 bytes (200 CJK characters: 1,508 bytes), and an entity's
item collected chunk ids and attributes across a document until it passed 400 KB. Both were refused for good,
and the model paid again on each retry."""

from __future__ import annotations

import json
import uuid

from chalicelib.domain.ids import chunk_id
from chalicelib.domain.item_limits import (
    GRAPH_ATTRIBUTE_BYTES,
    GRAPH_MAX_ATTRIBUTES,
    GRAPH_NAME_BYTES,
    GRAPH_RELATION_BYTES,
)
from chalicelib.enrich.graph import MAX_ATTRIBUTES, parse
from chalicelib.ports import GraphRepo


class GraphLimitsContract:
    """`chunk_id_cap`: GRAPH_MAX_CHUNK_IDS set lower in the adapter's module (1,000 writes are slow on moto)."""

    def test_cjk_names_the_parser_keeps_are_stored_and_found_by_their_full_text(
        self, graph: GraphRepo
    ) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        name_a, name_b, rel = "甲" * 300, "乙" * 300, "关" * 150
        reply = json.dumps(
            [
                {"passage": 1, "entity": name_a, "entity_attributes": ["属" * 300]},
                {"passage": 1, "entity": name_b},
                {"passage": 1, "entity1": name_a, "entity2": name_b, "relation": rel},
            ]
        )
        [found] = parse(reply, 1, [])
        entity, relation = found.entities[0], found.relations[0]
        assert len(entity.name.encode()) <= GRAPH_NAME_BYTES
        assert len(relation.relation.encode()) <= GRAPH_RELATION_BYTES
        assert all(len(a.encode()) <= GRAPH_ATTRIBUTE_BYTES for a in entity.attributes)
        c = chunk_id(k, 1, 0)
        graph.add_window(
            kb,
            k,
            "a1.graph.0",
            [c],
            [(e.name, e.attributes, c) for e in found.entities],
            [(r.source, r.relation, r.target, c) for r in found.relations],
        )
        near = graph.neighbourhood(kb, name_a)  # the name as the document has it, longer than the stored one
        assert near.entity is not None and near.entity.name == entity.name and near.entity.chunk_ids == [c]
        assert [(e.source, e.target) for e in near.edges] == [(relation.source, relation.target)]
        assert [n.name for n in near.neighbours] == [relation.target]
        # a caller past the parser (names longer still) is cut to fit as well
        graph.add(kb, k, [("丙" * 2000, ["x" * 5000], c)], [("丙" * 2000, "丁" * 900, "戊" * 2000, c)])
        far = graph.neighbourhood(kb, "丙" * 2000)
        assert far.entity is not None and len(far.edges) == 1

    def test_an_entity_in_every_window_keeps_a_bounded_item(self, graph: GraphRepo) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        # the most a mention brings: 20 attributes of 400 bytes (200 two-byte characters), new each window
        for window in range(60):
            attributes = [f"{window:03d}{n:02d}" + "é" * 195 for n in range(MAX_ATTRIBUTES)]
            c = chunk_id(k, 1, window)
            graph.add_window(kb, k, f"a1.graph.{window}", [c], [("Acme", attributes, c)], [])
        acme = graph.neighbourhood(kb, "Acme").entity
        assert acme is not None and len(acme.chunk_ids) == 60
        assert GRAPH_MAX_ATTRIBUTES <= len(acme.attributes) < GRAPH_MAX_ATTRIBUTES + MAX_ATTRIBUTES

    def test_an_entity_and_a_relation_keep_at_most_the_cap_of_chunk_ids(
        self, graph: GraphRepo, chunk_id_cap: int
    ) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        ids = [chunk_id(k, 1, n) for n in range(chunk_id_cap + 5)]
        graph.add(kb, k, [("Acme", [], c) for c in ids], [("Acme", "owns", "Depot", c) for c in ids])
        near = graph.neighbourhood(kb, "Acme")
        assert near.entity is not None and near.entity.chunk_ids == ids[:chunk_id_cap]
        assert [(e.source, e.relation, e.target) for e in near.edges] == [("Acme", "owns", "Depot")]
        # the facts still go with their attempt's chunks
        assert graph.keep_only_attempt(kb, k, f"{k}-a2-") == 3
        assert graph.neighbourhood(kb, "Acme").entity is None
