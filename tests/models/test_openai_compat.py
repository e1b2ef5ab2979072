"""OpenAI-compatible adapters against a local http.server thread speaking the OpenAI wire format.
(Hosted APIs, vLLM and Ollama cannot run here; this server replays their documented responses.)"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from chalicelib.adapters.models._common import parse_retry_after
from chalicelib.adapters.models.openai_compat import (
    OpenAIChatModel,
    OpenAIEmbedding,
    OpenAIVisionModel,
    SafeTransport,
)
from chalicelib.net.client import SafeHttpClient
from chalicelib.net.ssrf import AllowList
from chalicelib.ports import (
    ModelAuthError,
    ModelEmptyResponse,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
)
from chalicelib.services.backoff import call_with_backoff

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
#: the SSRF-safe transport every model call uses, allowed to reach the loopback test server
LOOPBACK = SafeTransport(SafeHttpClient(AllowList.parse("127.0.0.0/8:*")))


class FakeOpenAI:
    """Records each request; answers from a script of (status, headers, body) or a default handler."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.script: list[tuple[int, dict[str, str], Any]] = []
        self.dims = 8

    def default(self, path: str, payload: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
        if path.endswith("/embeddings"):
            inputs = payload["input"]
            data = []
            for i, text in enumerate(inputs):
                vec = [0.0] * self.dims
                vec[len(text) % self.dims] = 2.0  # not unit length: the adapter normalises
                vec[(len(text) + 1) % self.dims] = 1.0
                data.append({"object": "embedding", "index": i, "embedding": vec})
            data.reverse()  # out of order on purpose: `index` is authoritative
            return (
                200,
                {},
                {
                    "object": "list",
                    "data": data,
                    "model": payload["model"],
                    "usage": {"prompt_tokens": 3, "total_tokens": 3},
                },
            )
        return (
            200,
            {},
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": payload["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "Hello from the fake."},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9},
            },
        )


@pytest.fixture(scope="module")
def _running_server() -> Iterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            payload = json.loads(self.rfile.read(length))
            fake.requests.append({"path": self.path, "headers": dict(self.headers.items()), "json": payload})
            status, headers, body = fake.script.pop(0) if fake.script else fake.default(self.path, payload)
            raw = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake, f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def server(_running_server: tuple[FakeOpenAI, str]) -> tuple[FakeOpenAI, str]:
    fake, base = _running_server
    fake.requests.clear()
    fake.script.clear()
    fake.dims = 8
    return fake, base


def test_embeddings_request_shape_order_and_normalisation(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    model = OpenAIEmbedding(
        "nomic-embed-text", base_url=base, transport=LOOPBACK, api_key="k-1", declared_dim=8, batch_size=2
    )
    texts = ["a", "bb", "ccc", "dddd", "eeeee"]
    vectors = model.embed(texts)
    assert vectors.shape == (5, 8)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    assert [int(np.argmax(v)) for v in vectors] == [len(t) % 8 for t in texts]
    assert [r["json"]["input"] for r in fake.requests] == [["a", "bb"], ["ccc", "dddd"], ["eeeee"]]
    first = fake.requests[0]
    assert first["path"] == "/v1/embeddings"
    assert first["json"] == {"model": "nomic-embed-text", "input": ["a", "bb"], "encoding_format": "float"}
    assert first["headers"]["Authorization"] == "Bearer k-1"
    assert first["headers"]["Content-Type"] == "application/json"


def test_embeddings_dimensions_param_and_no_key(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.dims = 4
    model = OpenAIEmbedding("text-embedding-3-small", base_url=base, transport=LOOPBACK, dimensions=4)
    assert model.embed(["x"]).shape == (1, 4)
    assert fake.requests[0]["json"]["dimensions"] == 4
    assert "Authorization" not in fake.requests[0]["headers"]


def test_embeddings_dimension_probe(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.dims = 6
    model = OpenAIEmbedding("some-unknown-model", base_url=base, transport=LOOPBACK)
    assert model.dimensions == 6
    assert len(fake.requests) == 1
    assert model.dimensions == 6  # probed once
    assert len(fake.requests) == 1
    assert model.embed([]).shape == (0, 6)


def test_embeddings_wrong_dimension_is_permanent(server: tuple[FakeOpenAI, str]) -> None:
    _fake, base = server
    with pytest.raises(ModelRequestError, match="expected 16"):
        OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=16).embed(["x"])


def test_429_with_retry_after_seconds(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.script.append(
        (
            429,
            {"Retry-After": "12"},
            {"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}},
        )
    )
    with pytest.raises(ModelThrottled) as info:
        OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8).embed(["x"])
    assert info.value.retry_after == 12.0
    assert "Rate limit reached" not in str(info.value)  # the provider's text never travels on


def test_429_with_retry_after_http_date(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    when = datetime.now(UTC) + timedelta(seconds=120)
    fake.script.append((429, {"Retry-After": format_datetime(when, usegmt=True)}, {"error": "busy"}))
    with pytest.raises(ModelThrottled) as info:
        OpenAIChatModel("m", base_url=base, transport=LOOPBACK).chat([{"role": "user", "content": "hi"}])
    assert info.value.retry_after is not None
    assert 60.0 < info.value.retry_after <= 121.0


def test_429_insufficient_quota_is_permanent(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.script.append(
        (
            429,
            {},
            {
                "error": {
                    "message": "You exceeded your current quota",
                    "type": "insufficient_quota",
                    "code": "insufficient_quota",
                }
            },
        )
    )
    with pytest.raises(ModelRequestError) as info:
        OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8).embed(["x"])
    assert info.value.provider_code == "insufficient_quota"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (500, ModelUnavailable),
        (502, ModelUnavailable),
        (503, ModelUnavailable),
        (408, ModelUnavailable),
        (401, ModelAuthError),
        (403, ModelAuthError),
        (400, ModelRequestError),
        (404, ModelRequestError),
    ],
)
def test_status_mapping(server: tuple[FakeOpenAI, str], status: int, expected: type[Exception]) -> None:
    fake, base = server
    fake.script.append((status, {}, {"error": {"message": f"internal detail {status}", "code": "bad_thing"}}))
    with pytest.raises(expected, match=f"HTTP {status}") as info:
        OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8).embed(["x"])
    assert "internal detail" not in str(info.value) and base not in str(info.value)


def test_a_provider_answer_never_reaches_the_error_text(server: tuple[FakeOpenAI, str]) -> None:
    """Regression (issue 9): up to 300 characters of a model endpoint's reply were copied into the
    document's error_message and the logs; pointed at an internal service, that leaked its answers."""
    fake, base = server
    secret = "AWS_SECRET=abc123 <html>internal admin page</html>"
    fake.script.append((400, {}, secret.encode()))
    fake.script.append((400, {}, {"error": {"message": secret, "code": "x y z <script>"}}))
    for _ in range(2):
        with pytest.raises(ModelRequestError) as info:
            OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8).embed(["x"])
        assert str(info.value) == "openai/m: HTTP 400"


def test_the_transport_refuses_hosts_outside_its_allow_list(server: tuple[FakeOpenAI, str]) -> None:
    _fake, base = server
    closed = SafeTransport(SafeHttpClient(AllowList()))
    with pytest.raises(ModelRequestError, match="cannot be used"):
        OpenAIEmbedding("m", base_url=base, transport=closed, declared_dim=8).embed(["x"])
    metadata = SafeTransport(SafeHttpClient(AllowList.parse("127.0.0.0/8:*")))
    with pytest.raises(ModelRequestError, match="cannot be used"):
        OpenAIEmbedding("m", base_url="http://169.254.169.254/v1", transport=metadata).embed(["x"])


def test_non_json_success_is_a_malformed_reply(server: tuple[FakeOpenAI, str]) -> None:
    """A 200 whose body is not the API's JSON is a misbehaving endpoint: permanent, not retried (each retry
    is a paid call; see tests/models/test_openai_replies.py)."""
    fake, base = server
    fake.script.append((200, {}, b"<html>gateway</html>"))
    with pytest.raises(ModelRequestError) as info:
        OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8).embed(["x"])
    assert info.value.code == "model_reply_malformed"


def test_connection_refused_is_unavailable() -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ModelUnavailable):
        OpenAIEmbedding(
            "m", base_url=f"http://127.0.0.1:{port}/v1", transport=LOOPBACK, declared_dim=8
        ).embed(["x"])


def test_backoff_over_http_honours_retry_after(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.script.append((429, {"Retry-After": "2"}, {"error": {"message": "slow down"}}))
    fake.script.append((500, {}, {"error": {"message": "oops"}}))
    sleeps: list[float] = []
    model = OpenAIEmbedding("m", base_url=base, transport=LOOPBACK, declared_dim=8)
    vectors = call_with_backoff(
        lambda: model.embed(["x", "y"]), base_delay=0.1, sleep=sleeps.append, rng=lambda: 1.0
    )
    assert vectors.shape == (2, 8)
    assert len(fake.requests) == 3
    assert sleeps == [2.0, 0.2]


def test_chat_request_shape(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    model = OpenAIChatModel("llama3.2:3b", base_url=base, transport=LOOPBACK, api_key="secret")
    answer = model.chat(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        temperature=0.1,
        max_tokens=64,
    )
    assert answer == "Hello from the fake."
    request = fake.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["json"] == {
        "model": "llama3.2:3b",
        "temperature": 0.1,
        "max_tokens": 64,
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
    }
    assert request["headers"]["Authorization"] == "Bearer secret"


def test_chat_max_completion_tokens_field(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    OpenAIChatModel(
        "gpt-5-mini", base_url=base, transport=LOOPBACK, max_tokens_field="max_completion_tokens"
    ).chat([{"role": "user", "content": "Hi"}], max_tokens=10)
    assert fake.requests[0]["json"]["max_completion_tokens"] == 10
    assert "max_tokens" not in fake.requests[0]["json"]


def test_chat_empty_content_is_reported_not_swallowed(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    fake.script.append(
        (
            200,
            {},
            {
                "choices": [
                    {"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": ""}}
                ]
            },
        )
    )
    with pytest.raises(ModelEmptyResponse, match="max_completion_tokens"):
        OpenAIVisionModel("gpt-5", base_url=base, transport=LOOPBACK).describe(JPEG, "What is this?")


def test_vision_sends_data_uri(server: tuple[FakeOpenAI, str]) -> None:
    fake, base = server
    answer = OpenAIVisionModel("qwen2.5-vl", base_url=base, transport=LOOPBACK).describe(
        JPEG, "Describe.", max_tokens=50
    )
    assert answer == "Hello from the fake."
    sent = fake.requests[0]["json"]
    assert sent["max_tokens"] == 50
    content = sent["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "Describe."}
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == JPEG


def test_parse_retry_after_forms() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after({"retry-after": "5"}) == 5.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after": "-3"}) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    date = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True)
    assert parse_retry_after({"retry-after": date}, now=lambda: now) == pytest.approx(30.0)
    past = format_datetime(datetime.fromtimestamp(now - 30, UTC), usegmt=True)
    assert parse_retry_after({"retry-after": past}, now=lambda: now) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None
