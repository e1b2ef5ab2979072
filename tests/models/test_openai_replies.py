"""What an OpenAI-compatible server's replies become, through the real adapter, the SSRF-safe transport and
the enrichment readers, with a loopback server sending scripted bytes: the model's reasoning is never read as
its answer; a 200 that is not the API's JSON is a permanent malformed reply (one paid call, not 16); a reply
cut off at max_tokens is marked, and readers keep only its complete part (or fail with a stable code); a 200
carrying an error is classified by its code; content parts without text are skipped."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from chalicelib.adapters.models.bedrock import BedrockChatModel
from chalicelib.adapters.models.openai_compat import OpenAIChatModel, OpenAIVisionModel, SafeTransport
from chalicelib.enrich import auto_tag, graph, images, questions, summary, wiki
from chalicelib.net.client import SafeHttpClient
from chalicelib.net.ssrf import AllowList
from chalicelib.ports import ModelEmptyResponse, ModelRequestError, ModelThrottled, ModelUnavailable
from chalicelib.ports import models as model_ports

LOOPBACK = SafeTransport(SafeHttpClient(AllowList.parse("127.0.0.0/8:*")))
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
SECRET = "SECRET-REASONING"
ITEMS = [
    {"passage": 1, "entity": "Keeper", "entity_attributes": ["logs weather"]},
    {"passage": 1, "entity": "Lamp", "entity_attributes": ["bright"]},
    {"passage": 1, "entity1": "Keeper", "entity2": "Lamp", "relation": "trims"},
]


def completion(content: Any, finish: str = "stop") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-wire",
            "object": "chat.completion",
            "choices": [
                {"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": content}}
            ],
        }
    ).encode()


class WireLLM:
    """Answers every POST with the next scripted (status, headers, body bytes); counts the calls."""

    def __init__(self) -> None:
        self.script: list[tuple[int, dict[str, str], bytes]] = []
        self.calls = 0
        wire = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                wire.calls += 1
                status, headers, raw = wire.script.pop(0)
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, content: Any, finish: str = "stop") -> None:
        self.script.append((200, {}, completion(content, finish)))

    def chat(self) -> OpenAIChatModel:
        return OpenAIChatModel("wire", base_url=self.base_url, transport=LOOPBACK)

    def vision(self) -> OpenAIVisionModel:
        return OpenAIVisionModel("wire-vl", base_url=self.base_url, transport=LOOPBACK)


@pytest.fixture(scope="module")
def _running() -> Iterator[WireLLM]:
    server = WireLLM()
    yield server
    server.server.shutdown()
    server.server.server_close()


@pytest.fixture
def wire(_running: WireLLM) -> WireLLM:
    _running.script.clear()
    _running.calls = 0
    return _running


def say(chat: OpenAIChatModel) -> str:
    return chat.chat([{"role": "user", "content": "hello"}])


# ---------------------------------------------------------------- 1. reasoning is not the answer


@pytest.mark.parametrize(
    "content",
    [
        f"<think>\nThe user wants a summary. {SECRET}\n</think>\n\nThe keeper logs the weather.",
        f"<thinking>{SECRET}</thinking>The keeper logs the weather.",
        f"<THINK>{SECRET}</THINK>\nThe keeper logs the weather.",
        # the server's chat template wrote the opening tag: the reply opens with reasoning and a lone close
        f"Okay, {SECRET}, the passage is about a keeper.\n</think>\n\nThe keeper logs the weather.",
        [
            {"type": "text", "text": f"<think>{SECRET}"},
            {"type": "text", "text": "</think>The keeper logs the weather."},
        ],
    ],
)
def test_the_models_reasoning_is_removed_from_its_answer(wire: WireLLM, content: Any) -> None:
    wire.answer(content)
    assert say(wire.chat()) == "The keeper logs the weather."


def test_a_reply_that_is_all_reasoning_is_an_empty_answer(wire: WireLLM) -> None:
    wire.answer(f"<think>{SECRET} I need three questions and", finish="length")  # ran out while thinking
    with pytest.raises(ModelEmptyResponse) as info:
        say(wire.chat())
    assert info.value.provider_code == "length" and SECRET not in str(info.value)


def test_questions_are_not_made_of_reasoning_lines(wire: WireLLM) -> None:
    wire.answer(
        "<think>\nOkay, the passage is about a keeper.\nI need three questions.\n</think>\n"
        "1. When does the keeper log the weather?\n2. What does the keeper trim?\n3. When is the wick trimmed?"
    )
    made = questions.generate(
        wire.chat(), document="d", previous="", passage="The keeper logs.", following="", count=3
    )
    assert made == [
        "When does the keeper log the weather?",
        "What does the keeper trim?",
        "When is the wick trimmed?",
    ]


def test_a_summary_is_not_the_models_reasoning(wire: WireLLM) -> None:
    wire.answer(f"<think>\nThe user wants a summary. {SECRET}\n</think>\n\nThe document covers lighthouses.")
    made = summary.summarize(["The keeper logs the weather every night."], "wire", wire.chat())
    assert made == "The document covers lighthouses."


def test_a_caption_is_not_the_models_reasoning(wire: WireLLM) -> None:
    wire.answer(
        f"<think>\nThe user wants a caption. {SECRET}: it looks like a kiln.\n</think>\nAn orange kiln."
    )
    assert images.clean(wire.vision().describe(JPEG, images.caption_prompt())) == "An orange kiln."


def test_a_json_example_quoted_in_the_reasoning_is_not_the_graph(wire: WireLLM) -> None:
    wire.answer(
        '<think>Each item looks like {"passage": 1, "entity": "Name"}; passage 1 mentions a keeper.</think>\n'
        + json.dumps(ITEMS)
    )
    [found] = graph.extract(wire.chat(), ["The keeper trims the lamp."], [])
    assert [e.name for e in found.entities] == ["Keeper", "Lamp"] and len(found.relations) == 1


def test_bedrock_text_with_inline_reasoning_and_a_max_tokens_stop() -> None:
    class Converse:
        def converse(self, **request: Any) -> dict[str, Any]:
            blocks = [
                {"reasoningContent": {"reasoningText": {"text": SECRET}}},
                {"text": f"<think>{SECRET}</think>The keeper logs the weather. He trims"},
                {"text": None},
            ]
            return {"output": {"message": {"content": blocks}}, "stopReason": "max_tokens"}

    reply = BedrockChatModel(Converse(), "qwen.qwen3").chat([{"role": "user", "content": "hi"}])
    assert reply == "The keeper logs the weather. He trims" and model_ports.was_truncated(reply)


# ---------------------------------------------------------------- 2. a 200 that is not the API's JSON


@pytest.mark.parametrize(
    "body",
    [
        b'data: {"choices":[{"delta":{"content":"a summary"}}]}\n\ndata: [DONE]\n\n',  # SSE, never asked for
        b'{"choices":[{"index":0,"finish_reason":"stop","message":{"content":"ab\xff\xfe"}}]}',  # not UTF-8
    ],
)
def test_a_200_that_is_not_the_apis_json_is_a_permanent_malformed_reply(wire: WireLLM, body: bytes) -> None:
    wire.script.append((200, {"Content-Type": "text/event-stream"}, body))
    with pytest.raises(ModelRequestError) as info:
        say(wire.chat())
    assert info.value.code == "model_reply_malformed" and not isinstance(info.value, ModelUnavailable)
    assert wire.calls == 1


# ---------------------------------------------------------------- 3. a reply cut off at max_tokens


def test_the_adapter_marks_a_reply_cut_off_at_max_tokens(wire: WireLLM) -> None:
    wire.answer("The keeper logs the weather and the", finish="length")
    wire.answer("The keeper logs the weather.")
    chat = wire.chat()
    assert model_ports.was_truncated(say(chat)) and not model_ports.was_truncated(say(chat))


def test_a_cut_off_summary_ends_with_its_last_whole_sentence(wire: WireLLM) -> None:
    wire.answer("The document covers lighthouse keeping. It lists the fog horns and the", finish="length")
    made = summary.summarize(["The keeper logs the weather every night."], "wire", wire.chat())
    assert made == "The document covers lighthouse keeping."


def test_a_summary_cut_off_before_its_first_sentence_ended_is_not_made(wire: WireLLM) -> None:
    wire.answer("The document covers lighthouse keeping and the", finish="length")
    with pytest.raises(summary.SummaryNotMade) as info:
        summary.summarize(["The keeper logs the weather every night."], "wire", wire.chat())
    assert info.value.code == "summary_truncated"


def test_a_cut_off_caption_and_question_list_keep_their_whole_parts(wire: WireLLM) -> None:
    wire.answer("An orange kiln in a pottery studio. Shelves of unfired", finish="length")
    assert images.clean(wire.vision().describe(JPEG, images.caption_prompt())) == (
        "An orange kiln in a pottery studio."
    )
    wire.answer("1. When does the keeper log the weather?\n2. What does the keeper", finish="length")
    made = questions.generate(wire.chat(), document="d", previous="", passage="p", following="", count=3)
    assert made == ["When does the keeper log the weather?"]


def test_a_cut_off_graph_list_keeps_its_complete_items(wire: WireLLM) -> None:
    items = [{"passage": 1, "entity": f"Name{i}", "entity_attributes": ["x"]} for i in range(30)]
    whole = "```json\n" + json.dumps(items)
    wire.answer(whole[: len(whole) // 2], finish="length")  # no closing bracket, no closing fence
    [found] = graph.extract(wire.chat(), ["p"], [])
    names = [e.name for e in found.entities]
    assert len(names) >= 10 and names == [f"Name{i}" for i in range(len(names))]


def test_a_cut_off_auto_tag_reply_keeps_its_complete_matches_only(wire: WireLLM) -> None:
    # the second match is cut before its confidence: kept in part it would count as sure
    wire.answer('{"matches": [{"index": 1, "confidence": 0.95}, {"index": 2', finish="length")
    assert auto_tag.choose(wire.chat(), ["Lighthouses", "Kilns"], "doc", 3) == [0]


def test_a_cut_off_json_reply_with_nothing_complete_fails_with_a_stable_code(wire: WireLLM) -> None:
    wire.answer('{"matches": [{"index": 1, "confid', finish="length")
    with pytest.raises(ModelRequestError) as info:
        auto_tag.choose(wire.chat(), ["Lighthouses"], "doc", 3)
    assert info.value.code == "model_reply_truncated"
    wire.answer('[{"title": "Lighthouses", "content": "A lighthouse is a tow', finish="length")
    with pytest.raises(ModelRequestError) as info:
        wiki.pages_for(wire.chat(), "Lighthouses", "text")
    assert info.value.code == "model_reply_truncated"


# ---------------------------------------------------------------- 5. a 200 carrying an error


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        (502, ModelUnavailable),
        ("503", ModelUnavailable),
        (408, ModelUnavailable),
        (429, ModelThrottled),
        (400, ModelRequestError),
        ("context_length_exceeded", ModelRequestError),
    ],
)
def test_a_200_carrying_an_error_is_classified_by_its_code(
    wire: WireLLM, code: Any, raised: type[Exception]
) -> None:
    body = {"error": {"message": "EVILMARK upstream overloaded", "code": code}}
    wire.script.append((200, {}, json.dumps(body).encode()))
    with pytest.raises(raised) as info:
        say(wire.chat())
    assert "EVILMARK" not in str(info.value) and "EVILMARK" not in repr(info.value.args)
    assert wire.calls == 1


# ---------------------------------------------------------------- 6. content parts without text


@pytest.mark.parametrize(
    "parts",
    [[{"type": "text", "text": None}], [{"type": "text", "text": {"value": "x", "annotations": []}}]],
)
def test_content_parts_whose_text_is_not_a_string_are_skipped(wire: WireLLM, parts: list[Any]) -> None:
    wire.answer(parts)
    with pytest.raises(ModelEmptyResponse):
        say(wire.chat())
    wire.answer([*parts, {"type": "text", "text": "The keeper logs the weather."}])
    assert say(wire.chat()) == "The keeper logs the weather."
