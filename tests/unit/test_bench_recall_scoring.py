"""The recall bench's scoring: a strict hit is the query's own file; a hit by copy needs the query's whole
passage in another file's chunk (issue 27: the corpus ships texts in several formats)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from pathlib import Path

from project_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
from bench_recall import Query, saved_queries, score


def query(file: str, file_type: str, sentence: str) -> Query:
    return Query(file, file_type, "text", False, sentence, sentence)


def test_the_own_file_is_a_strict_hit_and_no_copy_is_looked_for() -> None:
    q = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(q, [("a.epub", "Second, the decorated list is sorted."), ("a.docx", "other text")])
    assert (q.hit, q.rank, q.copy_in, q.hit_or_copy) == (True, 2, None, True)


def test_another_file_with_the_whole_passage_is_a_copy_whatever_its_markup() -> None:
    q = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(q, [("b.md", "the decorated list"), ("a.epub", "**Second**, the decorated\nlist is *sorted*:")])
    assert (q.hit, q.copy_in, q.hit_or_copy) == (False, "a.epub", True)


def test_part_of_the_passage_or_its_words_out_of_order_are_no_copy() -> None:
    q = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(q, [("b.txt", "the decorated list is sorted"), ("c.txt", "Second, the list is decorated sorted.")])
    assert (q.hit, q.copy_in, q.hit_or_copy) == (False, None, False)


def test_a_table_row_is_found_cell_by_cell_in_order_in_another_layout() -> None:
    row = query("t.csv", "csv", "state violent murder hs_grad")
    score(row, [("t.xlsx", "state: Alabama, violent: 459.9, murder: 7.1, hs_grad: 82.1")])
    assert row.copy_in == "t.xlsx"
    shuffled = query("t.csv", "csv", "state violent murder hs_grad")
    score(shuffled, [("u.xlsx", "violent: 459.9, state: Alabama, murder: 7.1, hs_grad: 82.1")])
    assert shuffled.copy_in is None


def test_a_file_listed_in_a_hits_copies_is_not_strict_and_counted_apart() -> None:
    q = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(q, [("a.epub", "Second, the decorated list is sorted.")], [["a.htm", "a.docx"]])
    assert (q.hit, q.listed, q.copy_in) == (False, True, "a.epub")
    own = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(own, [("a.docx", "x")], [["a.docx"]])
    assert (own.hit, own.listed) == (True, False)  # a strict hit is only that


def test_saved_queries_are_asked_again_unscored_and_only_for_the_chosen_files(tmp_path: Path) -> None:
    """--queries: a later run asks exactly the queries an earlier --json saved (no reference texts made)."""
    kept = query("a.docx", "docx", "Second, the decorated list is sorted.")
    score(kept, [("a.docx", "Second, the decorated list is sorted.")])
    left_out = query("b.csv", "csv", "state violent murder")
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps([asdict(kept), asdict(left_out)]))
    [again] = saved_queries(saved, {"a.docx"})
    assert (again.file, again.text, again.sentence) == ("a.docx", kept.text, kept.sentence)
    assert (again.hit, again.rank, again.top, again.copy_in) == (False, None, None, None)
