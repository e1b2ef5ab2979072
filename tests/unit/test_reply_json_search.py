"""json_reply finds the JSON a model meant, whatever prose comes before it, and reads a list cut off at
max_tokens as its complete items."""

from __future__ import annotations

import json

import pytest

from chalicelib.enrich import auto_tag, graph, replies, tables, wiki
from chalicelib.enrich.replies import ModelReplyMalformed, json_reply
from chalicelib.ports import ModelRequestError
from chalicelib.ports import models as model_ports

ITEMS = [
    {"passage": 1, "entity": "Keeper", "entity_attributes": ["logs weather"]},
    {"passage": 1, "entity": "Lamp", "entity_attributes": ["bright"]},
    {"passage": 1, "entity1": "Keeper", "entity2": "Lamp", "relation": "trims"},
]


def test_a_bracket_in_the_prose_before_the_json_is_passed_over() -> None:
    [found] = graph.parse("Here are the entities I found [3 items]:\n" + json.dumps(ITEMS), 1, [])
    assert [e.name for e in found.entities] == ["Keeper", "Lamp"] and len(found.relations) == 1


def test_a_citation_before_the_auto_tag_object_is_not_the_reply() -> None:
    reply = 'Tag [1] clearly applies.\n{"matches": [{"index": 1, "confidence": 0.95}]}'
    assert auto_tag.pick(reply, 3, 3) == [0]


def test_a_list_of_numbers_in_the_prose_is_not_the_wiki_pages() -> None:
    reply = "I wrote [1] page:\n" + json.dumps([{"title": "Lighthouses", "content": "A page."}])
    assert [p.title for p in wiki.read_pages(json_reply(reply))] == ["Lighthouses"]


def test_a_fenced_block_is_read_before_the_prose_around_it() -> None:
    reply = (
        'Each match looks like {"index": 0}.\n```json\n{"matches": [{"index": 2, "confidence": 0.9}]}\n```'
    )
    assert json_reply(reply) == {"matches": [{"index": 2, "confidence": 0.9}]}


def test_the_expected_kind_is_found_after_another() -> None:
    reply = 'Columns: [{"name": "a"}]. Answer: {"description": "A timetable.", "columns": []}'
    assert json_reply(reply, dict) == {"description": "A timetable.", "columns": []}
    summary = tables._read(json_reply(reply, dict), tables.TableSchema([("a", "text")], [], 0))
    assert summary is not None and summary.description == "A timetable."


def test_an_empty_list_answer_is_still_an_answer() -> None:
    assert json_reply("```json\n[]\n```") == []
    assert json_reply("No entities: []") == []


def test_prose_with_only_brackets_is_no_json_and_the_search_is_bounded() -> None:
    assert json_reply("See [a] and [b], [c" + " [x]" * 40_000) is None
    assert json_reply("[1, 2, 3] items") is None


def test_a_cut_off_list_is_read_as_its_complete_items() -> None:
    whole = json.dumps(ITEMS)
    cut = whole[: whole.index('"Lamp"') + 10]  # inside the second item
    assert json_reply(model_ports.ChatReply("```json\n" + cut, truncated=True)) == [ITEMS[0]]


def test_an_item_cut_inside_its_own_list_is_not_kept_in_part() -> None:
    items = [ITEMS[0], {"passage": 1, "entity": "Lamp", "entity_attributes": ["bright", "brass"]}]
    whole = json.dumps(items)
    cut = whole[: whole.index('"brass"') + 3]
    assert json_reply(model_ports.ChatReply(cut, truncated=True)) == [ITEMS[0]]


def test_an_object_around_a_cut_off_list_is_closed_after_its_last_complete_item() -> None:
    cut = '{"matches": [{"index": 1, "confidence": 0.95}, {"index": 3, "confidence": 0.9}, {"index": 2'
    assert auto_tag.pick(model_ports.ChatReply(cut, truncated=True), 3, 3) == [0, 2]


def test_a_cut_off_reply_with_nothing_complete_is_a_truncated_reply() -> None:
    with pytest.raises(ModelRequestError) as info:
        json_reply(model_ports.ChatReply('{"description": "A timetable of', truncated=True), dict)
    assert info.value.code == "model_reply_truncated"
    assert json_reply('{"description": "A timetable of') is None  # not said to be cut off: nothing read


def test_a_closed_value_with_a_syntax_error_is_not_mended() -> None:
    assert json_reply('[{"entity": "A"}, {"entity": B}] then {"k": 1}') == {"k": 1}


def test_a_reply_nested_too_deeply_is_still_refused() -> None:
    with pytest.raises(ModelReplyMalformed):
        json_reply("prose [1] " + "[" * 50 + "]" * 50)


def test_the_complete_part_of_a_cut_off_reply() -> None:
    assert (
        replies.complete_part(model_ports.ChatReply("Pi is 3.14 here. It is cut mid-wor", truncated=True))
        == "Pi is 3.14 here."
    )
    assert replies.complete_part(model_ports.ChatReply("| a | b |\n| 1 | 2", truncated=True)) == "| a | b |"
    assert replies.complete_part(model_ports.ChatReply("no sentence ends", truncated=True)) == ""
    assert replies.complete_part("not said to be cut off") == "not said to be cut off"
