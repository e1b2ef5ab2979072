"""`per_document_capped`: at most `cap` hits of one document while others have hits to offer, the rest waiting
in order to fill places that no other document takes."""

from __future__ import annotations

from chalicelib.operations.search import engine_depth, per_document_capped


def _doc(hit: str) -> str:
    return hit[0]  # "a1" is the first hit of document "a"


def test_no_cap_is_the_first_top_k() -> None:
    hits = ["a1", "a2", "a3", "b1", "c1"]
    assert per_document_capped(hits, _doc, 3, None) == ["a1", "a2", "a3"]


def test_one_documents_run_gives_way_to_other_documents() -> None:
    # a sheet whose every row repeats the query's words outranks the short document that has them once
    hits = ["a1", "a2", "a3", "a4", "b1", "a5", "c1", "d1"]
    assert per_document_capped(hits, _doc, 4, 2) == ["a1", "a2", "b1", "c1"]
    assert per_document_capped(hits, _doc, 4, 1) == ["a1", "b1", "c1", "d1"]


def test_waiting_hits_fill_the_answer_in_score_order_when_too_few_documents_match() -> None:
    hits = ["a1", "a2", "a3", "b1", "a4", "b2", "b3"]
    # one hit each of a and b, then the best waiting hits, all in the engine's order
    assert per_document_capped(hits, _doc, 5, 1) == ["a1", "a2", "a3", "b1", "a4"]
    assert per_document_capped(["a1", "a2", "a3"], _doc, 2, 1) == ["a1", "a2"]  # one document: still 2 hits


def test_the_cap_asks_the_engine_for_room_behind_a_run() -> None:
    assert engine_depth(5, capped=False) == 10
    assert engine_depth(5, capped=True) == 25  # a CSV's own chunk came 15th behind its XLSX copy's rows
    assert engine_depth(100, capped=True) == 140


def test_a_hit_repeating_a_better_hit_of_another_document_is_listed_under_it() -> None:
    from chalicelib.domain.repetition import words_of
    from chalicelib.operations.search import fold_copies

    text = {
        "a1": "Second, the decorated list is sorted.",
        "b1": "**Second**, the decorated list is sorted.",  # the same passage in another format
        "c1": "Second, the decorated list is sorted. Finally, the decorations are removed.",  # more than it
        "a2": "Second, the decorated list is sorted.",  # one document's own repeat: the route's rule, not this
        "d1": "First, the initial list is decorated.",
    }
    folded = fold_copies(list(text), _doc, lambda hit: words_of(text[hit]))
    assert folded == [("a1", ["b1"]), ("c1", []), ("a2", []), ("d1", [])]
    # then capped by document, the copies travel with their hit
    assert per_document_capped(folded, lambda g: _doc(g[0]), 3, 1) == [("a1", ["b1"]), ("c1", []), ("d1", [])]
