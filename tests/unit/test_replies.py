"""A model's JSON reply is its outermost value: an object holding a list is the object."""

from __future__ import annotations

from chalicelib.enrich.auto_tag import pick
from chalicelib.enrich.replies import json_reply


def test_the_outermost_json_value_is_taken() -> None:
    assert json_reply('Sure: {"matches": [{"index": 1}]} done') == {"matches": [{"index": 1}]}
    assert json_reply('```json\n[{"a": {"b": 1}}]\n```') == [{"a": {"b": 1}}]
    assert json_reply("no json here") is None
    assert json_reply('broken [ then {"ok": true}') == {"ok": True}


def test_auto_tag_keeps_confident_listed_choices_best_first() -> None:
    reply = (
        '{"matches": [{"index": 2, "confidence": 0.8}, {"index": 1, "confidence": 95}, '
        '{"index": 3, "confidence": 0.74}, {"index": 9, "confidence": 1}, {"index": 4}]}'
    )
    assert pick(reply, 4, 10) == [3, 0, 1]  # a missing confidence counts as 1; 95 (per cent) is 0.95
    assert pick(reply, 4, 2) == [3, 0]
