"""`deepened`: asked deeper while answers that only stand in fill the answer, never past MAX_ENGINE_DEPTH."""

from __future__ import annotations

from chalicelib.domain.retrieval import MAX_ENGINE_DEPTH, deepened
from chalicelib.operations.search import past_cap, per_document_capped


def test_stand_ins_are_looked_past_until_the_engine_runs_out_or_the_bound() -> None:
    asked: list[int] = []

    def one_document(depth: int) -> tuple[int, list[str], int]:  # every page full, every answer a stand-in
        asked.append(depth)
        return depth, ["a"] * 3, 2

    assert deepened(one_document, 3, 10) == ["a"] * 3
    assert asked == [10, 40, 160, MAX_ENGINE_DEPTH]

    asked.clear()

    def runs_out(depth: int) -> tuple[int, list[str], int]:  # 50 hits in all
        asked.append(depth)
        return min(depth, 50), ["a"] * 3, 2

    deepened(runs_out, 3, 10)
    assert asked == [10, 40, 160]

    asked.clear()

    def settled(depth: int) -> tuple[int, list[str], int]:
        asked.append(depth)
        return depth, ["a", "b", "c"], 0

    deepened(settled, 3, 10)
    assert asked == [10]


def test_past_cap_counts_the_waiting_hits_that_fill_places() -> None:
    def doc(hit: str) -> str:
        return hit[0]

    answer = per_document_capped(["a1", "a2", "a3", "b1"], doc, 3, 1)
    assert answer == ["a1", "a2", "b1"]
    assert past_cap(answer, doc, 1) == 1  # a2 waits for another document's hit
    assert past_cap(per_document_capped(["a1", "b1", "c1", "a2"], doc, 3, 1), doc, 1) == 0
    assert past_cap(["a1", "a2"], doc, None) == 0
