"""A fetch client that cannot be steered at internal hosts: each hop (redirects included) is validated,
the TCP connection goes to the address that was validated (so a second DNS answer cannot rebind it),
bodies are capped, and credentials are dropped when a redirect leaves the origin."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin, urlsplit

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.exceptions import HTTPError as Urllib3HTTPError

from chalicelib.domain.errors import SpanErrorCode
from chalicelib.net.ssrf import (
    CODE_BLOCKED,
    AllowList,
    BlockKind,
    HostUnresolved,
    Resolver,
    URLBlocked,
    ValidatedURL,
    check_addresses,
    default_resolver,
    validate_url,
)
from chalicelib.ports import FetchFailed

DEFAULT_MAX_BYTES = 10 * 1024 * 1024
#: the code of an answer past the client's `max_bytes`: the API's and the document's for a file past its limit
CODE_TOO_LARGE = SpanErrorCode.FILE_TOO_LARGE.value
DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_REDIRECTS = 10
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
USER_AGENT = "weknora-ingest/0.1 (+document import)"


#: the libraries on the fetch and parse path whose log records can quote a URL (its query's credentials
#: included, or a redirect target the server wrote) or what a remote server or a document says: urllib3 (a
#: malformed header line), trafilatura and its helpers (the page's final URL when it discards a page), the
#: document parsers' libraries (an object, a stream or a style named as the file has it)
WITHHELD_LOGGERS = frozenset(
    {
        "urllib3",
        "trafilatura",
        "htmldate",
        "courlan",
        "justext",
        "tld",
        "charset_normalizer",
        "PIL",
        "olefile",
        "pdfminer",
        "markitdown",
    }
)


def _withhold_library_text() -> None:
    """The records of `WITHHELD_LOGGERS` keep their logger and level, not their text. Done where every record
    is made (the record factory): a logger's filter sees only the records logged on that very logger, and a
    lazily imported library (trafilatura, on a page's first import) makes its loggers after this runs."""
    made = logging.getLogRecordFactory()
    if getattr(made, "withholds_library_text", False):
        return

    def withholding(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = made(*args, **kwargs)
        name = record.name if isinstance(record.name, str) else ""  # makeLogRecord makes one named None
        if name.partition(".")[0] in WITHHELD_LOGGERS:  # a library's root logger or any below it
            record.msg = (
                f"{record.name} {record.levelname.lower()} (text withheld: it may quote a remote server)"
            )
            record.args = ()
            record.exc_info = record.exc_text = record.stack_info = None
        return record

    withholding.withholds_library_text = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(withholding)


_withhold_library_text()


class FetchError(FetchFailed):
    """A download by the SSRF-safe client failed; `permanent` ones (blocked, too large, 4xx) never retry.
    An answer past `max_bytes` has the code `file_too_large`. `unnamed`: the message without the URL's host
    (a refusal's kind in fixed words; other messages never name it), for a caller whose URL is not the
    reader's business (the operator's model endpoint)."""

    def __init__(
        self,
        message: str,
        *,
        permanent: bool,
        status: int | None = None,
        code: str | None = None,
        unnamed: str | None = None,
    ) -> None:
        super().__init__(message, permanent=permanent, status=status, code=code)
        self.unnamed = message if unnamed is None else unnamed


def _refusal(blocked: URLBlocked, *, redirected: bool) -> FetchError:
    """The failure for a refused URL. The tenant's own URL is named with its reason; a redirect's target
    only by the kind of block: its host, scheme and path are whatever the remote server wrote, and this
    text reaches the knowledge row, its trace, events and logs."""
    reason = blocked.kind.value if redirected else blocked.reason
    where = "redirect target" if redirected else "URL"
    if isinstance(blocked, HostUnresolved):  # the resolver not answering now is worth a later try
        return FetchError(
            f"{where}: {reason}",
            permanent=not blocked.transient,
            code=blocked.code,
            unnamed=f"{where}: {blocked.kind.value}",
        )
    return FetchError(
        f"{where} blocked: {reason}",
        permanent=True,
        code=blocked.code,
        unnamed=f"{where} blocked: {blocked.kind.value}",
    )


def _resolved_by(resolver: Resolver | None, deadline: float) -> Resolver:
    """`resolver` (DNS by default) given until the exchange's deadline: a name a tenant controls may answer
    slowly, and the lookup runs before any socket the deadline cuts. Past it the lookup counts as the
    resolver not answering now (EAI_AGAIN: a later try may do), while its thread finishes on its own."""
    lookup = resolver or default_resolver

    def bounded(host: str, port: int) -> list[str]:
        answer: list[list[str]] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                answer.append(lookup(host, port))
            except BaseException as error:  # handed to the caller's thread as it is
                failure.append(error)

        worker = threading.Thread(target=run, name="dns-lookup", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0.0))
        if failure:
            raise failure[0]
        if not answer:
            raise socket.gaierror(socket.EAI_AGAIN, "the lookup took longer than the request's time")
        return answer[0]

    return bounded


@dataclass
class FetchResponse:
    url: str  # the final URL after redirects
    status: int
    headers: dict[str, str]
    body: bytes
    redirects: list[str] = field(default_factory=list)

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()

    @property
    def charset(self) -> str | None:
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip("\"' ")
        return None


#: a declared length of more digits than this is past any `max_bytes` (and int() refuses 4,300 digits)
_MAX_LENGTH_DIGITS = 18


def _declared_length(value: str) -> int:
    """The body length a Content-Length declares; 0 when it declares none a number can say (not ASCII
    digits: `²` is a digit to str.isdigit, not to int), so the read is bounded as without one. A length of
    more digits than any limit counts as past it."""
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        return 0
    digits = digits.lstrip("0") or "0"
    return sys.maxsize if len(digits) > _MAX_LENGTH_DIGITS else int(digits)


def _too_large(max_bytes: int) -> FetchError:
    return FetchError(
        f"file is larger than the {max_bytes} bytes allowed", permanent=True, code=CODE_TOO_LARGE
    )


class _Deadline:
    """Shuts down the sockets of the connections it watches when the whole exchange's time is up. A socket
    timeout bounds one read, not an answer sent a byte at a time: headers and body trickled so that every read
    returns in time would hold the caller until its Lambda's own timeout."""

    def __init__(self, seconds: float) -> None:
        self.passed = False
        self._connections: list[HTTPConnection] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._cut)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, connection: HTTPConnection) -> None:
        with self._lock:
            self._connections.append(connection)

    def _cut(self) -> None:
        with self._lock:
            self.passed = True
            sockets = [c.sock for c in self._connections if c.sock is not None]
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


class _Watched(HTTPConnection):
    """A connection that hands itself to the exchange's deadline (the pool passes `deadline` along)."""

    def __init__(self, *args: Any, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        deadline.watch(self)


class _WatchedHTTPConnection(_Watched):
    pass


class _WatchedHTTPSConnection(_Watched, HTTPSConnection):
    pass


class _WatchedHTTPPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _WatchedHTTPSPool(urllib3.HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


def _pool(
    target: ValidatedURL, ip: str, timeout: urllib3.Timeout, deadline: _Deadline
) -> urllib3.HTTPConnectionPool:
    """A pool of one connection to the validated address, its socket cut when `deadline` passes (the pool
    hands `deadline` to the connection it makes)."""
    if target.scheme == "https":
        return _WatchedHTTPSPool(
            ip,
            target.port,
            timeout=timeout,
            retries=False,
            maxsize=1,
            server_hostname=target.host,
            assert_hostname=target.host,
            cert_reqs="CERT_REQUIRED",
            deadline=deadline,
        )
    return _WatchedHTTPPool(ip, target.port, timeout=timeout, retries=False, maxsize=1, deadline=deadline)


def _host_header(target: ValidatedURL) -> str:
    default = 443 if target.scheme == "https" else 80
    host = f"[{target.host}]" if ":" in target.host else target.host
    return host if target.port == default else f"{host}:{target.port}"


class SafeHttpClient:
    def __init__(
        self,
        allow_list: AllowList | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        timeout: float = DEFAULT_TIMEOUT,
        max_redirects: int = DEFAULT_MAX_REDIRECTS,
        resolver: Resolver | None = None,
    ) -> None:
        self.allow_list = allow_list if allow_list is not None else AllowList()
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        self.resolver = resolver

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> FetchResponse:
        deadline = time.monotonic() + self.timeout
        send_headers = {"User-Agent": USER_AGENT, "Accept": "*/*", **(headers or {})}
        redirects: list[str] = []
        current = url
        origin: tuple[str, str, int] | None = None
        for _hop in range(self.max_redirects + 1):
            try:
                target = validate_url(
                    current, self.allow_list, resolver=_resolved_by(self.resolver, deadline)
                )
            except URLBlocked as exc:
                if redirects:  # not chained: the cause's text names the server's target (tracebacks, logs)
                    raise _refusal(exc, redirected=True) from None
                raise _refusal(exc, redirected=False) from exc
            if origin is not None and target.origin != origin:
                send_headers = {k: v for k, v in send_headers.items() if k.lower() not in SENSITIVE_HEADERS}
            origin = target.origin
            status, resp_headers, body = self._one(target, send_headers, deadline)
            if status in REDIRECT_STATUSES and "location" in resp_headers:
                if len(redirects) >= self.max_redirects:
                    break
                redirects.append(current)
                try:
                    current = urljoin(current, resp_headers["location"])
                except ValueError:  # an unbalanced IPv6 bracket: a refused target, not a bug to retry
                    malformed = URLBlocked("", "malformed redirect target", BlockKind.MALFORMED)
                    raise _refusal(malformed, redirected=True) from None
                continue
            if status >= 400:
                raise FetchError(
                    f"server answered HTTP {status}",
                    permanent=400 <= status < 500 and status not in (408, 425, 429),
                    status=status,
                )
            return FetchResponse(current, status, resp_headers, body, redirects)
        raise FetchError(f"too many redirects (more than {self.max_redirects})", permanent=True)

    def with_timeout(self, timeout: float) -> SafeHttpClient:
        if timeout == self.timeout:
            return self
        return SafeHttpClient(
            self.allow_list,
            max_bytes=self.max_bytes,
            timeout=timeout,
            max_redirects=self.max_redirects,
            resolver=self.resolver,
        )

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], *, status_only: bool = False
    ) -> FetchResponse:
        """POSTs to a validated, pinned address and returns any status (the caller maps it). Redirects
        are not followed: a model endpoint that redirects a POST is misconfigured or hostile. `status_only`:
        the answer's body is not read (a webhook receiver's answer counts by its status alone, however large
        or slow its body)."""
        deadline = time.monotonic() + self.timeout
        try:
            target = validate_url(url, self.allow_list, resolver=_resolved_by(self.resolver, deadline))
        except URLBlocked as exc:
            raise _refusal(exc, redirected=False) from exc
        send_headers = {"User-Agent": USER_AGENT, **headers}
        status, resp_headers, data = self._one(
            target, send_headers, deadline, method="POST", body=body, status_only=status_only
        )
        if status in REDIRECT_STATUSES:
            raise FetchError(
                f"the endpoint answered a POST with a redirect (HTTP {status})", permanent=True, status=status
            )
        return FetchResponse(url, status, resp_headers, data)

    def _one(
        self,
        target: ValidatedURL,
        headers: Mapping[str, str],
        deadline: float,
        *,
        method: str = "GET",
        body: bytes | None = None,
        status_only: bool = False,
    ) -> tuple[int, dict[str, str], bytes]:
        reason = (
            check_addresses(target.addresses, target.port, self.allow_list)
            if not self.allow_list.host_allowed(target.host, target.port)
            else None
        )
        if reason:  # validate_url already checked; this guards a caller-built ValidatedURL
            raise FetchError(f"URL blocked: {reason}", permanent=True, code=CODE_BLOCKED)
        parts = urlsplit(target.url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        last_error: Exception | None = None
        for ip in target.addresses:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FetchError("download timed out", permanent=False)
            timeout = urllib3.Timeout(connect=min(remaining, 10.0), read=remaining)
            cut = _Deadline(remaining)
            pool = _pool(target, ip, timeout, cut)
            try:
                try:
                    resp = pool.urlopen(
                        method,
                        path,
                        body=body,
                        headers={**headers, "Host": _host_header(target)},
                        redirect=False,
                        retries=False,
                        preload_content=False,
                        assert_same_host=False,
                    )
                except (Urllib3HTTPError, OSError) as exc:
                    # not chained: urllib3's text can hold what the server sent
                    if cut.passed:
                        raise FetchError("download timed out", permanent=False) from None
                    # The next address only when this one took nothing: a POST that may have arrived is not
                    # sent again (a webhook delivered twice, a model call paid twice).
                    if method != "GET" and not isinstance(exc, NewConnectionError | ConnectTimeoutError):
                        raise FetchError(
                            f"the endpoint did not answer ({type(exc).__name__})", permanent=False
                        ) from None
                    last_error = exc
                    continue
                try:
                    return self._read(resp, deadline, cut, status_only)
                finally:
                    resp.release_conn()
            finally:
                cut.cancel()
                pool.close()
        # the class alone: urllib3's text can hold what the server sent, and the address it resolved to
        raise FetchError(f"the server did not answer ({type(last_error).__name__})", permanent=False)

    def _read(
        self, resp: urllib3.BaseHTTPResponse, deadline: float, cut: _Deadline, status_only: bool = False
    ) -> tuple[int, dict[str, str], bytes]:
        headers = {k.lower(): v for k, v in resp.headers.items()}
        if resp.status in REDIRECT_STATUSES or status_only:
            return resp.status, headers, b""
        if _declared_length(headers.get("content-length", "")) > self.max_bytes:
            raise _too_large(self.max_bytes)
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in resp.stream(min(65536, self.max_bytes + 1)):
                size += len(chunk)
                if size > self.max_bytes:
                    raise _too_large(self.max_bytes)  # stop reading: nothing past the limit is taken
                if time.monotonic() > deadline:
                    raise FetchError("download timed out", permanent=False)
                chunks.append(chunk)
        except (Urllib3HTTPError, OSError) as exc:
            # not chained: urllib3's text quotes the bytes the server sent (a chunk's size line)
            if cut.passed:
                raise FetchError("download timed out", permanent=False) from None
            raise FetchError(f"download interrupted ({type(exc).__name__})", permanent=False) from None
        return resp.status, headers, b"".join(chunks)
