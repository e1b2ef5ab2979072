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

    def test_add_window_again_replaces_what_the_earlier_call_added_for_that_window(
        self, graph: GraphRepo
    ) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        first, second, other = chunk_id(k, 1, 0), chunk_id(k, 1, 1), chunk_id(k, 1, 20)
        window = [first, second]
        graph.add_window(kb, k, "a1.graph.1", [other], [("Berth", ["quay"], other)], [])
        graph.add_window(
            kb,
            k,
            "a1.graph.0",
            window,
            [("Keeper", ["first"], first), ("Lamp", ["bright"], first), ("Berth", ["old"], second)],
            [("Keeper", "tends", "Lamp", first)],
        )
        # redelivered (the first run died before its slot was released): the model answers differently
        again = ([("Lamp", ["dim"], first), ("Tower", [], second)], [("Lamp", "crowns", "Tower", second)])
        graph.add_window(kb, k, "a1.graph.0", window, *again)

        assert graph.neighbourhood(kb, "Keeper").entity is None
        lamp = graph.neighbourhood(kb, "Lamp")
        assert (
            lamp.entity is not None and lamp.entity.attributes == ["dim"] and lamp.entity.chunk_ids == [first]
        )
        assert [(e.source, e.relation, e.target) for e in lamp.edges] == [("Lamp", "crowns", "Tower")]
        # the other window's fact stays, with only its own chunk (attributes are kept per entity and
        # knowledge, not per chunk: the first answer's "old" is not told apart)
        berth = graph.neighbourhood(kb, "Berth").entity
        assert berth is not None and berth.chunk_ids == [other]
        graph.add_window(kb, k, "a1.graph.0", window, *again)  # the same answer again changes nothing
        tower = graph.neighbourhood(kb, "Tower")
        assert tower.entity is not None and tower.entity.chunk_ids == [second]
        assert [(e.source, e.relation, e.target) for e in tower.edges] == [("Lamp", "crowns", "Tower")]

    def test_add_window_the_first_time_only_adds(self, graph: GraphRepo) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        chunk = chunk_id(k, 1, 0)
        graph.add(kb, k, [("Pier", ["stone"], chunk)], [])  # written by someone else for the same chunk
        graph.add_window(kb, k, "a1.graph.0", [chunk], [("Quay", [], chunk)], [])
        pier, quay = graph.neighbourhood(kb, "Pier").entity, graph.neighbourhood(kb, "Quay").entity
        assert pier is not None and pier.chunk_ids == [chunk]
        assert quay is not None and quay.chunk_ids == [chunk]

    def test_window_records_are_no_facts_and_leave_with_their_attempt_or_knowledge(
        self, graph: GraphRepo
    ) -> None:
        kb, k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
        old, new = chunk_id(k, 1, 0), chunk_id(k, 10, 0)
        graph.add_window(kb, k, "a1.graph.0", [old], [("Crane", [], old)], [])
        graph.add_window(kb, k, "a10.graph.0", [new], [("Tug", [], new)], [])
        assert graph.neighbourhood(kb, "a1.graph.0").entity is None

        assert graph.keep_only_attempt(kb, k, attempt_chunk_prefix(k, 10)) == 1  # the Crane node only
        # attempt 1's record went with its facts: a late copy of its window only adds
        graph.add(kb, k, [("Buoy", [], old)], [])
        graph.add_window(kb, k, "a1.graph.0", [old], [("Crane", [], old)], [])
        assert graph.neighbourhood(kb, "Buoy").entity is not None
        # attempt 10's record stays: its redelivery still replaces
        graph.add_window(kb, k, "a10.graph.0", [new], [("Ferry", [], new)], [])
        assert graph.neighbourhood(kb, "Tug").entity is None
        assert graph.neighbourhood(kb, "Ferry").entity is not None

        graph.delete_knowledge(kb, k)
        graph.add(kb, k, [("Ferry", [], new)], [])  # the records went with the knowledge: this stays
        graph.add_window(kb, k, "a10.graph.0", [new], [("Tug", [], new)], [])
        ferry = graph.neighbourhood(kb, "Ferry").entity
        assert ferry is not None and ferry.chunk_ids == [new]

    def test_retract_chunks_takes_an_edited_chunks_facts_out_and_keeps_the_others(
        self, graph: GraphRepo
    ) -> None:
        kb, k, other_k = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4()), str(uuid.uuid4())
        edited, kept, elsewhere = chunk_id(k, 1, 0), chunk_id(k, 1, 1), chunk_id(other_k, 1, 0)
        graph.add_window(
            kb,
            k,
            "a1.graph.0",
            [edited, kept],
            [
                ("Keeper", ["old"], edited),
                ("Lamp", ["bright"], edited),
                ("Lamp", [], kept),
                ("Quay", [], kept),
            ],
            [
                ("Keeper", "tends", "Lamp", edited),
                ("Lamp", "lights", "Quay", edited),
                ("Lamp", "lights", "Quay", kept),
            ],
        )
        graph.add(kb, other_k, [("Keeper", [], elsewhere)], [("Keeper", "tends", "Lamp", elsewhere)])

        removed = graph.retract_chunks(kb, k, [edited])

        assert removed == 3  # this knowledge's Keeper node and its Keeper-tends-Lamp edge (two items)
        keeper = graph.neighbourhood(kb, "Keeper")
        # another document's Keeper (and its edge) stays
        assert keeper.entity is not None and keeper.entity.knowledge_ids == [other_k]
        assert keeper.entity.chunk_ids == [elsewhere]
        assert [(e.source, e.relation, e.target, e.knowledge_ids) for e in keeper.edges] == [
            ("Keeper", "tends", "Lamp", [other_k])
        ]
        lamp = graph.neighbourhood(kb, "Lamp")
        assert lamp.entity is not None and lamp.entity.chunk_ids == [kept]
        assert sorted((e.source, e.relation, e.target) for e in lamp.edges) == [
            ("Keeper", "tends", "Lamp"),  # the other document's
            ("Lamp", "lights", "Quay"),  # supported by the chunk that was not edited too
        ]
        quay = graph.neighbourhood(kb, "Quay").entity
        assert quay is not None and quay.chunk_ids == [kept]
        assert graph.retract_chunks(kb, k, [edited]) == 0  # a repeat changes nothing
        assert graph.retract_chunks(kb, k, []) == 0
        # the window's record is not a fact and stays: its redelivery still replaces what it wrote
        graph.add_window(kb, k, "a1.graph.0", [edited, kept], [("Tower", [], kept)], [])
        assert graph.neighbourhood(kb, "Quay").entity is None
        assert graph.neighbourhood(kb, "Lamp").entity is None
        tower = graph.neighbourhood(kb, "Tower").entity
        assert tower is not None and tower.chunk_ids == [kept]
