"""The graph port's contract, run on the in-memory fake (tests/service) and on DynamoDB (tests/e2e)."""

from __future__ import annotations

import uuid

from chalicelib.domain.ids import attempt_chunk_prefix, chunk_id
from chalicelib.ports import GraphRepo


class GraphContract:
    def test_keep_only_attempt_drops_earlier_attempts_facts_and_keeps_the_current_ones(
        self, graph: GraphRepo
    ) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        old, new = chunk_id(k, 1, 0), chunk_id(k, 10, 0)  # attempt 1's prefix must not match attempt 10's
        graph.add(kb, k, [("Berth", ["quay"], old), ("Crane", [], old)], [("Crane", "serves", "Berth", old)])
        # Attempt 10's subtasks already wrote (a duplicate plan message runs late): these facts stay.
        graph.add(kb, k, [("Berth", [], new), ("Tug", [], new)], [("Tug", "pushes", "Berth", new)])

        removed = graph.keep_only_attempt(kb, k, attempt_chunk_prefix(k, 10))

        assert removed == 3  # the Crane node and the Crane-serves-Berth edge (two items)
        berth = graph.neighbourhood(kb, "Berth")
        assert berth.entity is not None and berth.entity.chunk_ids == [new]
        assert [(e.source, e.relation, e.target) for e in berth.edges] == [("Tug", "pushes", "Berth")]
        assert graph.neighbourhood(kb, "Crane").entity is None
        assert graph.keep_only_attempt(kb, k, attempt_chunk_prefix(k, 10)) == 0  # a repeat changes nothing

    def test_keep_only_attempt_leaves_other_knowledge_alone(self, graph: GraphRepo) -> None:
        kb, a, b = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), str(uuid.uuid4())
        graph.add(kb, a, [("Pier", [], chunk_id(a, 1, 0))], [])
        graph.add(kb, b, [("Pier", [], chunk_id(b, 1, 0))], [])
        assert graph.keep_only_attempt(kb, a, attempt_chunk_prefix(a, 2)) == 1
        pier = graph.neighbourhood(kb, "Pier").entity
        assert pier is not None and pier.knowledge_ids == [b] and pier.chunk_ids == [chunk_id(b, 1, 0)]
