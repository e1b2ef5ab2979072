"""What a chat model answers is read defensively: a reply that would crash the parser is a classified
ModelReplyMalformed (one code, never retried), a value of the wrong type is left out rather than taken
apart, and every field written from a reply has a size cap."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from chalicelib.adapters.models.openai_compat import HttpResponse, OpenAIChatModel
from chalicelib.enrich import images, questions, summary, tables, wiki
from chalicelib.enrich.auto_tag import pick
from chalicelib.enrich.graph import parse
from chalicelib.enrich.replies import ModelReplyMalformed, json_reply
from chalicelib.enrich.tables import TableSchema
from chalicelib.ports import ModelEmptyResponse, ModelRequestError


class FixedChat:
    """A chat model that answers one text, whatever it is asked."""

    model_id = "fake/chat"

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def chat(
        self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.3, max_tokens: int = 512
    ) -> str:
        return self.reply


# ---------------------------------------------------------------- json_reply


@pytest.mark.parametrize(
    "reply",
    [
        "[" * 50_000,  # deeper than the decoder's recursion limit
        "```json\n" + '{"a": ' * 40 + "1" + "}" * 40 + "\n```",  # deeper than any reply of ours
        json.dumps([{"title": "t", "content": "x" * 300_000}]),  # longer than any 4,096-token answer
    ],
    ids=["recursion", "depth", "length"],
)
def test_a_reply_too_deep_or_too_long_is_malformed_not_a_crash(reply: str) -> None:
    with pytest.raises(ModelReplyMalformed) as raised:
        json_reply(reply)
    assert isinstance(raised.value, ModelRequestError) and raised.value.code == "model_reply_malformed"
    assert "[[[" not in str(raised.value) and "xxx" not in str(raised.value)  # our words, not the reply's


def test_brackets_inside_strings_do_not_count_as_depth() -> None:
    text = '[{"entity": "' + "[" * 100 + '\\"{", "entity_attributes": ["a]]]]"]}]'
    assert json_reply(text) == [{"entity": "[" * 100 + '"{', "entity_attributes": ["a]]]]"]}]


@pytest.mark.parametrize(
    "parser",
    [
        lambda reply: parse(reply, 1, []),
        lambda reply: pick(reply, 3, 3),
        lambda reply: wiki.pages_for(FixedChat(reply), "t", "text"),
        lambda reply: tables.summarise(FixedChat(reply), "t", TableSchema([("a", "text")])),
    ],
    ids=["graph", "auto_tag", "wiki", "tables"],
)
def test_every_json_parser_classifies_a_nested_reply(parser: Any) -> None:
    with pytest.raises(ModelReplyMalformed):
        parser("[" * 50_000)


# ---------------------------------------------------------------- types


@pytest.mark.parametrize("attributes", [5, True, 1.5, {"a": 1}])
def test_entity_attributes_of_another_type_leave_the_entity_out(attributes: Any) -> None:
    reply = json.dumps([{"passage": 1, "entity": "Harbour", "entity_attributes": attributes}])
    assert parse(reply, 1, [])[0].entities == []


def test_one_attribute_as_a_string_is_one_attribute_not_its_characters() -> None:
    reply = json.dumps(
        [
            {"passage": 1, "entity": "Harbour", "entity_attributes": "founded 1990"},
            {"passage": 1, "entity": "Pier", "entity_attributes": ["long", 7, None, " wooden "]},
            {"passage": True, "entity": "Flagged"},  # a flag is not a passage number
        ]
    )
    entities = parse(reply, 1, [])[0].entities
    assert [(e.name, e.attributes) for e in entities] == [
        ("Harbour", ["founded 1990"]),
        ("Pier", ["long", "wooden"]),
    ]


def test_entities_and_relations_per_passage_are_capped() -> None:
    from chalicelib.enrich.graph import MAX_ENTITIES_PER_PASSAGE, MAX_RELATIONS_PER_PASSAGE

    items: list[dict[str, Any]] = [{"passage": 1, "entity": f"E{i}"} for i in range(500)]
    items += [{"passage": 1, "entity1": "A", "entity2": f"B{i}", "relation": "r"} for i in range(500)]
    extracted = parse(json.dumps(items), 1, [])[0]
    assert len(extracted.entities) == MAX_ENTITIES_PER_PASSAGE
    assert len(extracted.relations) == MAX_RELATIONS_PER_PASSAGE


@pytest.mark.parametrize("columns", [5, True, "name", {"name": "a"}])
def test_table_columns_of_another_type_describe_no_column(columns: Any) -> None:
    reply = json.dumps({"description": "Ferries", "columns": columns})
    summarised = tables.summarise(FixedChat(reply), "t", TableSchema([("a", "text"), ("n", "text")]))
    assert summarised is not None and summarised.columns == {}


def test_a_table_description_that_is_not_text_is_no_description() -> None:
    reply = json.dumps({"description": 12, "columns": []})
    assert tables.summarise(FixedChat(reply), "t", TableSchema([("a", "text")])) is None


def test_auto_tag_refuses_a_flag_for_an_index_and_an_infinite_confidence() -> None:
    assert pick('{"matches": [{"index": true}, {"index": 2, "confidence": Infinity}]}', 3, 3) == []
    assert pick('{"matches": [{"index": 2, "confidence": NaN}, {"index": 3, "confidence": 0.9}]}', 3, 3) == [
        2
    ]


# ---------------------------------------------------------------- sizes


def test_a_summary_is_capped() -> None:
    made = summary.summarize(["Tides follow the moon. " * 20], "openai/gpt", FixedChat("Tides. " * 100_000))
    assert len(made) <= summary.MAX_SUMMARY_CHARS and made.startswith("Tides.")


def test_wiki_pages_are_capped_in_size_and_number() -> None:
    reply = json.dumps(
        [{"title": "T" * 500, "content": "word " * (8_000 if n == 0 else 5)} for n in range(9)]
    )
    pages = wiki.pages_for(FixedChat(reply), "t", "text")
    assert len(pages) == wiki.MAX_PAGES
    assert all(len(p.content) <= wiki.MAX_PAGE_CHARS and len(p.title) <= 200 for p in pages)


def test_captions_ocr_and_table_descriptions_are_capped() -> None:
    assert len(images.clean("A kiln. " * 100_000)) <= images.MAX_IMAGE_TEXT_CHARS
    reply = json.dumps({"description": "d " * 5_000, "columns": [{"name": "a", "description": "c " * 5_000}]})
    summarised = tables.summarise(FixedChat(reply), "t", TableSchema([("a", "text")]))
    assert summarised is not None and len(summarised.description) <= tables.MAX_DESCRIPTION_CHARS
    assert len(summarised.columns["a"]) <= tables.MAX_COLUMN_DESCRIPTION_CHARS


def test_questions_are_capped_in_length_and_number_and_read_in_linear_time() -> None:
    long = "What about the " + "fog horn " * 100 + "?"
    assert questions.clean(f"1. {long}\n2. When is the wick trimmed?\n3. What arrives by boat?", 1) == [
        "When is the wick trimmed?"
    ]
    many = "\n".join(f"{i}. Question number {i} about the harbour?" for i in range(200_000))
    started = time.perf_counter()
    kept = questions.clean(many, 3)
    assert kept == [f"Question number {i} about the harbour?" for i in range(3)]
    assert time.perf_counter() - started < 0.5
    assert questions.clean("1. Same question here?\n2. Same question here?\n3. Other one here?", 3) == [
        "Same question here?",
        "Other one here?",
    ]


# ---------------------------------------------------------------- errors


def test_not_enough_text_is_its_own_error_and_a_model_error_is_not_it() -> None:
    with pytest.raises(summary.SummaryNotMade) as raised:
        summary.summarize(["..."], "openai/gpt", FixedChat("unused"))
    assert raised.value.code == "summary_not_enough_text"
    assert not issubclass(ModelRequestError, summary.SummaryNotMade)


class InjectingTransport:
    """An OpenAI-compatible server whose empty answer carries a crafted finish_reason."""

    def __init__(self, finish_reason: Any) -> None:
        self.finish_reason = finish_reason

    def post_json(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float
    ) -> HttpResponse:
        choice = {"index": 0, "finish_reason": self.finish_reason, "message": {"content": ""}}
        return HttpResponse(200, json.dumps({"choices": [choice]}).encode())


@pytest.mark.parametrize(
    ("finish_reason", "kept"),
    [
        ("length", "length"),
        ("content_filter", "content_filter"),
        ("<script>alert(1)</script> re-enter your key at https://evil.example", ""),
        ("length\n", ""),
        ("x" * 33, ""),
        (7, ""),
    ],
)
def test_only_a_short_code_of_the_servers_finish_reason_is_kept(finish_reason: Any, kept: str) -> None:
    model = OpenAIChatModel("m", base_url="http://model.test/v1", transport=InjectingTransport(finish_reason))
    with pytest.raises(ModelEmptyResponse) as raised:
        model.chat([{"role": "user", "content": "hi"}])
    assert raised.value.provider_code == kept
    assert "evil" not in str(raised.value) and "\n" not in str(raised.value)
