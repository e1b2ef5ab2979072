"""The one rule every API answer keeps to under Lambda's 6 MB response: items are counted as the JSON list
they make (brackets and commas included, non-ASCII escaped), and the first always fits."""

from __future__ import annotations

import json

from chalicelib.domain.answer_size import AnswerBudget, fitting, json_size


def test_the_items_that_fit_make_a_list_within_the_budget() -> None:
    items = [{"t": "港口" * n} for n in range(1, 40)]
    for budget in range(30, 6_000, 7):
        kept = fitting(items, budget)
        # the compact JSON the API writes (the count is at least that)
        assert len(json.dumps(items[:kept], separators=(",", ":"))) <= budget


def test_the_first_item_always_fits_and_an_empty_list_is_empty() -> None:
    assert fitting([{"t": "x" * 100}], 10) == 1
    assert fitting([], 10) == 0


def test_what_the_rest_of_the_answer_uses_counts_and_items_are_taken_one_by_one() -> None:
    index = "港" * 100
    budget = AnswerBudget(json_size(index) + 40, used=json_size(index))
    assert [budget.takes("a" * 10) for _ in range(4)] == [True, True, True, False]
    assert budget.count == 3


def test_a_part_of_an_answer_may_take_none_when_there_is_no_room() -> None:
    assert fitting([{"t": "x" * 100}], 10, at_least_one=False) == 0
