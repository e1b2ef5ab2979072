"""The SSRF-safe client against servers that misbehave on purpose, on raw sockets: an answer trickled a byte
at a time, garbage where the status line goes, a POST that must not be sent twice, a resolver that cannot
answer now. What the server sent never reaches an error message."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from chalicelib.domain.errors import BadRequest, ServiceUnavailable
from chalicelib.net import AllowList, FetchError, SafeHttpClient
from chalicelib.net.urlimport import SafeUrlImporter

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
Handler = Callable[[socket.socket], None]


@pytest.fixture
def raw_server() -> Iterator[Callable[[Handler], tuple[int, list[bytes]]]]:
    """Starts a TCP server whose connections `handler` answers; yields (port, first lines of the requests)."""
    listeners: list[socket.socket] = []

    def start(handler: Handler) -> tuple[int, list[bytes]]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listeners.append(listener)
        requests: list[bytes] = []

        def serve() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                conn.settimeout(5)
                try:
                    requests.append(conn.recv(65536).split(b"\r\n", 1)[0])
                    handler(conn)
                except OSError:
                    pass
                finally:
                    conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return listener.getsockname()[1], requests

    yield start
    for listener in listeners:
        listener.close()


def trickle(conn: socket.socket) -> None:
    """Headers, then a body, each byte well inside a socket timeout."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n" + b"x" * 40:
        time.sleep(0.05)
        conn.sendall(bytes([byte]))


def garbage_status(conn: socket.socket) -> None:
    conn.sendall(b"SECRET-FROM-SERVER internal password=hunter2\r\n\r\n")


def garbage_chunk(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nSECRET server text\r\n")


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_an_answer_trickled_a_byte_at_a_time_stops_at_the_clients_timeout(
    raw_server: Callable[[Handler], tuple[int, list[bytes]]], method: str
) -> None:
    port, _ = raw_server(trickle)
    client = SafeHttpClient(LOOPBACK, timeout=0.6)
    started = time.monotonic()
    with pytest.raises(FetchError, match="timed out") as caught:
        if method == "GET":
            client.get(f"http://127.0.0.1:{port}/slow")
        else:
            client.post(f"http://127.0.0.1:{port}/slow", b"{}", {})
    assert time.monotonic() - started < 2.0  # the whole answer would take 4 s
    assert caught.value.permanent is False


@pytest.mark.parametrize("handler", [garbage_status, garbage_chunk])
def test_what_a_broken_server_sent_stays_out_of_the_error(
    raw_server: Callable[[Handler], tuple[int, list[bytes]]], handler: Handler
) -> None:
    port, _ = raw_server(handler)
    for call in (
        lambda: SafeHttpClient(LOOPBACK, timeout=3).get(f"http://127.0.0.1:{port}/x"),
        lambda: SafeHttpClient(LOOPBACK, timeout=3).post(f"http://127.0.0.1:{port}/x", b"{}", {}),
    ):
        with pytest.raises(FetchError) as caught:
            call()
        assert "SECRET" not in caught.value.message and "127.0.0.1" not in caught.value.message
        assert caught.value.permanent is False


def test_a_post_that_may_have_arrived_is_not_sent_to_the_next_address(
    raw_server: Callable[[Handler], tuple[int, list[bytes]]],
) -> None:
    port, requests = raw_server(lambda conn: None)  # reads the request, closes without an answer
    two_addresses = SafeHttpClient(
        LOOPBACK, timeout=3, resolver=lambda host, port: ["127.0.0.1", "127.0.0.1"]
    )
    with pytest.raises(FetchError, match="did not answer"):
        two_addresses.post(f"http://hooks.example.com:{port}/h", b'{"event": 1}', {})
    assert requests == [b"POST /h HTTP/1.1"]  # once
    with pytest.raises(FetchError):
        two_addresses.get(f"http://hooks.example.com:{port}/h")  # a GET may try the next one
    assert requests[1:] == [b"GET /h HTTP/1.1"] * 2


def resolver_not_answering(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


def resolver_without_the_name(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def test_a_resolver_that_cannot_answer_now_is_worth_another_try_everywhere() -> None:
    client = SafeHttpClient(AllowList(), timeout=3, resolver=resolver_not_answering)
    for call in (
        lambda: client.get("https://models.example.com/v1"),
        lambda: client.post("https://models.example.com/v1", b"{}", {}),
    ):
        with pytest.raises(FetchError) as caught:
            call()
        assert caught.value.permanent is False
    with pytest.raises(ServiceUnavailable) as unavailable:
        SafeUrlImporter(AllowList(), resolver=resolver_not_answering).check("https://docs.example.com/a.pdf")
    assert (unavailable.value.status, unavailable.value.code) == (503, "dns_unavailable")
    with pytest.raises(BadRequest) as refused:  # a name that does not exist stays a 400
        SafeUrlImporter(AllowList(), resolver=resolver_without_the_name).check(
            "https://docs.example.com/a.pdf"
        )
    assert refused.value.code == "host_unresolved"
    post = SafeHttpClient(AllowList(), timeout=3, resolver=resolver_without_the_name)
    with pytest.raises(FetchError) as missing:
        post.post("https://models.example.com/v1", b"{}", {})
    assert missing.value.permanent is True


def big_answer(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"x" * 65536)


def slow_answer_body(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    time.sleep(3)


@pytest.mark.parametrize("handler", [big_answer, slow_answer_body])
def test_a_webhook_receiver_is_judged_by_its_status_line_alone(
    raw_server: Callable[[Handler], tuple[int, list[bytes]]], handler: Handler
) -> None:
    """A body over the cap, or one sent too slowly, turned a delivered 200 into "refused" or a retry."""
    from chalicelib.net.webhooks import SafeWebhookSender

    port, requests = raw_server(handler)
    answer = SafeWebhookSender(LOOPBACK, timeout=1.0).post(f"http://127.0.0.1:{port}/hook", b"{}", {})
    assert answer.status == 200 and len(requests) == 1
