"""Two PUTs of one webhook at once on the in-memory fakes (scenarios: webhook_put_races.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from . import webhook_put_races as races

Race = Callable[[Services, str, str, pytest.MonkeyPatch], None]


@pytest.mark.parametrize(
    "race",
    [
        races.a_url_change_is_not_undone_by_a_description_change_that_read_before_it,
        races.a_switch_off_is_not_undone_by_an_event_types_change_that_read_before_it,
        races.a_put_overtaken_every_time_is_a_409_and_writes_none_of_its_fields,
        races.the_breakers_writes_between_a_puts_read_and_write_neither_fail_it_nor_are_lost,
    ],
)
def test_two_puts_at_once(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, race: Race
) -> None:
    race(deps, kb.tenant_id, kb.id, monkeypatch)
