"""A model's reply whose JSON spells a lone surrogate (`\\ud83d`: a server or gateway cut an emoji's UTF-16 pair,
at max_tokens or between stream chunks) is valid JSON, and decoded it is a text no store can encode: the
first write raised UnicodeEncodeError, failing the task on every paid retry. Each adapter that reads a
reply's text (OpenAI-compatible chat and vision, Bedrock Converse chat and vision) gives it back with U+FFFD
in the surrogate's place, and a pair split across two content parts joined into its character. Checked on
the wire: a loopback server sends the JSON bytes, read through the SSRF-safe transport or botocore's parser."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config
from test_openai_replies import JPEG, WireLLM, _running, say, wire  # noqa: F401

from chalicelib.adapters.models.bedrock import BedrockChatModel, BedrockVisionModel
from chalicelib.ports.models import was_truncated

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
#: JSON text as a server writes it: the escape of an emoji's first half with no second half
LONE_HIGH = "\\ud83d"
LONE_LOW = "\\ude00"


def completion_bytes(content_json: str, finish: str = "stop") -> bytes:
    """A chat completion whose message content is the given JSON text, written as it is on the wire."""
    return (
        '{"id": "chatcmpl-wire", "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "'
        + finish
        + '", "message": {"role": "assistant", "content": '
        + content_json
        + "}}]}"
    ).encode("ascii")


@pytest.fixture
def server(wire: WireLLM) -> WireLLM:  # noqa: F811
    """The loopback server of the replies' tests, its script empty."""
    return wire


def stored(text: str) -> str:
    """What a store does first with a reply: encode it (raised UnicodeEncodeError on a lone surrogate)."""
    return text.encode("utf-8").decode("utf-8")


@pytest.mark.parametrize(
    ("content_json", "expected"),
    [
        (f'"The ferry leaves at dusk {LONE_HIGH}. Fog horns sound twice."', "dusk \ufffd. Fog"),
        (f'"{LONE_LOW}The ferry leaves at dusk."', "\ufffdThe ferry"),
        (f'"The ferry leaves at dusk {LONE_HIGH}"', "dusk \ufffd"),
        # a JSON reply (a table's, a graph's): the surrogate is inside one of its strings, the structure stays
        (
            json.dumps(json.dumps({"description": "Stock list X of the shop."})).replace("X", LONE_HIGH),
            "\ufffd",
        ),
    ],
)
def test_an_openai_chat_reply_with_a_lone_surrogate_is_stored_with_a_replacement_character(
    server: WireLLM, content_json: str, expected: str
) -> None:
    server.script.append((200, {}, completion_bytes(content_json)))
    reply = say(server.chat())
    assert expected in stored(reply)
    assert server.calls == 1


def test_the_replaced_json_reply_still_reads_as_json(server: WireLLM) -> None:
    from chalicelib.enrich.replies import json_reply

    inner = json.dumps({"description": "Stock list X of the shop.", "columns": []})
    server.script.append((200, {}, completion_bytes(json.dumps(inner).replace("X", LONE_HIGH))))
    value = json_reply(say(server.chat()), dict)
    assert value == {"description": "Stock list \ufffd of the shop.", "columns": []}


def test_a_pair_split_across_content_parts_is_one_character_again(server: WireLLM) -> None:
    parts = f'[{{"type": "text", "text": "A ferry {LONE_HIGH}"}}, {{"type": "text", "text": "{LONE_LOW} at dusk."}}]'
    server.script.append((200, {}, completion_bytes(parts)))
    assert stored(say(server.chat())) == "A ferry \U0001f600 at dusk."


def test_a_cut_off_reply_keeps_its_mark(server: WireLLM) -> None:
    server.script.append((200, {}, completion_bytes(f'"The keeper logs the weather. {LONE_HIGH}"', "length")))
    reply = say(server.chat())
    assert was_truncated(reply) and stored(reply) == "The keeper logs the weather. \ufffd"


def test_an_openai_vision_caption_with_a_lone_surrogate(server: WireLLM) -> None:
    server.script.append(
        (200, {}, completion_bytes(f'"A ferry at the quay {LONE_HIGH} under an orange sky."'))
    )
    caption = server.vision().describe(JPEG, "Describe the image.")
    assert stored(caption) == "A ferry at the quay \ufffd under an orange sky."


# ---------------------------------------------------------------- Bedrock Converse, through botocore's parser


class ConverseServer:
    """Answers every POST (…/converse) with the next scripted JSON text, as Bedrock's endpoint would."""

    def __init__(self) -> None:
        self.script: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                raw = server.script.pop(0).encode("ascii")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def answer(self, blocks_json: str, stop: str = "end_turn") -> None:
        self.script.append(
            '{"output": {"message": {"role": "assistant", "content": '
            + blocks_json
            + '}}, "stopReason": "'
            + stop
            + '", "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8}, "metrics": {"latencyMs": 9}}'
        )


@pytest.fixture(scope="module")
def converse() -> Iterator[tuple[ConverseServer, Any]]:
    server = ConverseServer()
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"total_max_attempts": 1}),
    )
    yield server, client
    server.http.shutdown()
    server.http.server_close()


def test_a_bedrock_chat_reply_with_a_lone_surrogate(converse: tuple[ConverseServer, Any]) -> None:
    server, client = converse
    server.answer(f'[{{"text": "The keeper trims the wick {LONE_HIGH}. Fog horns sound twice."}}]')
    reply = BedrockChatModel(client, "amazon.nova-lite-v1:0").chat([{"role": "user", "content": "hi"}])
    assert stored(reply) == "The keeper trims the wick \ufffd. Fog horns sound twice."


def test_a_bedrock_caption_split_across_blocks_and_cut(converse: tuple[ConverseServer, Any]) -> None:
    server, client = converse
    server.answer(
        f'[{{"text": "A ferry {LONE_HIGH}"}}, {{"text": "{LONE_LOW} at the quay {LONE_HIGH}"}}]',
        stop="max_tokens",
    )
    caption = BedrockVisionModel(client, "amazon.nova-lite-v1:0").describe(PNG, "Describe the image.")
    assert stored(caption) == "A ferry \U0001f600 at the quay \ufffd" and was_truncated(caption)
