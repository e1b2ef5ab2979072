"""A server that breaks its answer off where a chunk's size belongs, writing a marker there instead: the
client library quotes those bytes in its error (urllib3's InvalidChunkLength), so a test can check that no
adapter hands a server's words on in an error, its chain or a log."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager


def _read_request(connection: socket.socket) -> None:
    """Reads one request whole (head, and a body of Content-Length bytes), so the client sees an answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += connection.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    while len(rest) < length:
        rest += connection.recv(65536)


@contextmanager
def chunk_size_marker_server(marker: str, content_type: str) -> Iterator[int]:
    """Answers every request 200, chunked, with `marker` where the first chunk's size belongs; yields its
    port on 127.0.0.1."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(5)
                _read_request(connection)
                connection.sendall(
                    f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\n"
                    f"Transfer-Encoding: chunked\r\n\r\n{marker}\r\n".encode()
                )

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join()
        server.close()
