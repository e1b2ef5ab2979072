"""A search's metadata filter costs a row its stored elements, not elements × filter values: a tenant's
document with a 21,000-element list field against a 100-value `in` was 2.1 M comparisons a row (a search over
ten such documents ran 15 s, past the API's timeout)."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import SearchRequest, validate
from chalicelib.operations.search import metadata_filter


class CountedInt(int):
    """An int that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other: object) -> bool:
        CountedInt.compared += 1
        return int(self) == other

    __hash__ = int.__hash__


def _conditions(metadata: dict[str, Any]) -> dict[str, Any]:
    request = validate(SearchRequest, {"query_text": "q", "metadata": metadata})
    return request.metadata or {}


def test_a_long_stored_list_against_many_values_is_compared_once_an_element() -> None:
    stored = [CountedInt(0)] * 5_000 + [CountedInt(77)]
    matches = metadata_filter(_conditions({"a": {"in": list(range(1, 101))}}))
    CountedInt.compared = 0
    assert matches({"a": stored})
    assert CountedInt.compared <= 2 * len(stored)  # pairwise it was len(stored) × 100


def test_values_are_equal_only_as_the_same_json_value() -> None:
    numbers = metadata_filter(_conditions({"year": {"in": [2024, 1]}}))
    assert numbers({"year": 2024.0}) and numbers({"year": [True, 2024]})
    assert not numbers({"year": "2024"}) and not numbers({"year": True}) and not numbers({"year": [None, {}]})
    flags = metadata_filter(_conditions({"flag": True}))
    assert flags({"flag": True}) and not flags({"flag": 1}) and not flags({"flag": "true"})
    texts = metadata_filter(_conditions({"owner.name": "Ines"}))
    assert texts({"owner": {"name": "Ines"}}) and not texts({"owner": "Ines"}) and not texts({})
    assert not metadata_filter(_conditions({"x": 1.5}))({"x": float("nan")})
