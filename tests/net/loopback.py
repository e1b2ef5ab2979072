"""A real HTTP server on 127.0.0.1 for the SSRF-safe client tests (shared by tests/net and tests/parsers)."""

import http.server
import threading
from collections.abc import Callable

Route = Callable[[http.server.BaseHTTPRequestHandler], None]


class LoopbackServer:
    """A real HTTP server on 127.0.0.1 whose routes tests register; records the requests it saw."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[tuple[str, dict[str, str]]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                route = server.routes.get(self.path.split("?", 1)[0])
                if route is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                route(self)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def body(self, path: str, data: bytes, content_type: str = "text/plain", status: int = 200) -> None:
        def route(h: http.server.BaseHTTPRequestHandler) -> None:
            h.send_response(status)
            h.send_header("Content-Type", content_type)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        self.routes[path] = route

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        def route(h: http.server.BaseHTTPRequestHandler) -> None:
            h.send_response(status)
            h.send_header("Location", location)
            h.send_header("Content-Length", "0")
            h.end_headers()

        self.routes[path] = route

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
