"""A Content-Length no number can say: `²` (latin-1 `\\xb2`: a digit to str.isdigit, not to int) or 5,000
digits (past int()'s limit) made the SSRF-safe client raise a bare ValueError, not FetchError: an image host
linked from a Markdown upload failed the whole document after four tries as `unknown` (a reviewer's
proof). Such a length is ignored (the read bounded as without one); one past any limit is too large."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import replace

import pytest

from chalicelib.adapters.models.openai_compat import OpenAIEmbedding, SafeTransport
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.net import AllowList, FetchError, SafeHttpClient
from chalicelib.net.client import CODE_TOO_LARGE
from chalicelib.ports import ModelRequestError

from .conftest import deliver, upload

LOOPBACK = AllowList.parse("127.0.0.0/8:*")


@pytest.fixture
def host() -> Iterator[tuple[int, list[bytes]]]:
    """Answers every request with `answer[0]`: 200, Content-Length as the test sets it, body `ab`."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    answer = [b""]

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            conn.sendall(answer[0])
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield int(listener.getsockname()[1]), answer
    listener.close()


def _answer(length: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: " + length + b"\r\n\r\nab"


def test_a_length_that_is_no_number_is_ignored(host: tuple[int, list[bytes]]) -> None:
    port, answer = host
    answer[0] = _answer(b"\xb2")
    assert SafeHttpClient(LOOPBACK, timeout=5).get(f"http://127.0.0.1:{port}/a.png").body == b"ab"


@pytest.mark.parametrize("length", [b"9" * 5000, b"99999999999999999999"])
def test_a_length_of_more_digits_than_any_limit_is_too_large(
    host: tuple[int, list[bytes]], length: bytes
) -> None:
    port, answer = host
    answer[0] = _answer(length)
    with pytest.raises(FetchError) as caught:
        SafeHttpClient(LOOPBACK, timeout=5).get(f"http://127.0.0.1:{port}/a.png")
    assert caught.value.code == CODE_TOO_LARGE


def test_a_model_endpoint_declaring_5000_digits_is_a_model_error(host: tuple[int, list[bytes]]) -> None:
    port, answer = host
    answer[0] = _answer(b"9" * 5000)
    model = OpenAIEmbedding(
        "m",
        base_url=f"http://127.0.0.1:{port}/v1",
        declared_dim=4,
        transport=SafeTransport(SafeHttpClient(LOOPBACK)),
    )
    with pytest.raises(ModelRequestError):
        model.embed(["x"])


@pytest.mark.parametrize("length", [b"\xb2", b"9" * 5000])
def test_a_markdown_upload_linking_such_an_image_is_read_once(
    deps: Services, kb: KnowledgeBase, host: tuple[int, list[bytes]], length: bytes
) -> None:
    port, answer = host
    answer[0] = _answer(length)
    deps.settings = replace(deps.settings, ssrf_allow=f"127.0.0.1:{port}")
    text = (
        "# Notes\n\nThe keeper logs the weather at dawn and at dusk, and trims the wick.\n\n"
        f"![map](http://127.0.0.1:{port}/map.png)\n"
    ).encode()
    knowledge = upload(deps, kb, "notes.md", text)
    receives = 0
    while deps.queue.waiting("docreader") and receives < 8:  # type: ignore[attr-defined]
        deliver(deps, "docreader")
        receives += 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    assert receives == 1, (row.error_code, row.error_message)
    assert row.parse_status != ParseStatus.FAILED, (row.error_code, row.error_message)
