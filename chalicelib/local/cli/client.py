"""The API client every command shares, and the settings it reads from the environment.

Every API reply uses the envelope ``{success, data}`` / ``{success: false, error: {code, message}}``.
"""

from __future__ import annotations

import mimetypes
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal
from urllib.parse import urlsplit

import requests

DIRECT_UPLOAD_MAX_BYTES = 4 * 1024 * 1024  # API Gateway/Lambda payload limits: bigger files via presigned PUT
DEFAULT_KEY = "local-dev-key"
DEFAULT_OPERATOR_KEY = "local-operator-key"

#: every setting the CLI reads from the environment, named in `--help`
ENVIRONMENT = {
    "WEKNORA_API": "the API base URL, e.g. https://…/api/v1 (WEKNORA_API_URL is read too)",
    "WEKNORA_API_KEY": f"a tenant's API key (default {DEFAULT_KEY}, the local stack's)",
    "WEKNORA_OPERATOR_KEY": f"the operator key for tenant, key and dlq (default {DEFAULT_OPERATOR_KEY})",
    "WEKNORA_PORT": "the local API's port, for `up` and the default API URL (default 8000)",
    "WEKNORA_STATE_DIR": "where `up` keeps its local state (default .weknora)",
    "WEKNORA_CORPUS": "the dev corpus for check-corpus",
}


def default_api() -> str:
    return (
        os.environ.get("WEKNORA_API")
        or os.environ.get("WEKNORA_API_URL")
        or f"http://127.0.0.1:{os.environ.get('WEKNORA_PORT', '8000')}/api/v1"
    )


def default_key() -> str:
    return os.environ.get("WEKNORA_API_KEY", DEFAULT_KEY)


def default_operator_key() -> str:
    return os.environ.get("WEKNORA_OPERATOR_KEY") or DEFAULT_OPERATOR_KEY


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, data: Any = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.data = data


class CliError(Exception):
    """Bad input the CLI itself finds (a file it cannot read, an argument it cannot use): `main` prints the
    message on one line (an error document with --json) and exits with `exit_code`."""

    def __init__(self, code: str, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.exit_code = exit_code


#: what requests raises for a URL it cannot send to (no scheme, not http(s), no host)
_BAD_URL = (
    requests.exceptions.MissingSchema,
    requests.exceptions.InvalidSchema,
    requests.exceptions.InvalidURL,
    requests.exceptions.URLRequired,
)


def no_answer(exc: requests.RequestException, url: str, unreachable: str = "") -> ApiError:
    """A request that got no HTTP answer as an ApiError with a stable code (status 0): `timeout`,
    `bad_url`, `unreachable` (nothing listens; `unreachable` overrides the message) or `network_error`."""
    if isinstance(exc, requests.Timeout):  # before ConnectionError: ConnectTimeout is both
        return ApiError(0, "timeout", f"{url} did not answer in time ({type(exc).__name__})")
    if isinstance(exc, _BAD_URL):
        return ApiError(0, "bad_url", f"not an http(s) URL: {url}")
    if isinstance(exc, requests.ConnectionError):
        return ApiError(0, "unreachable", unreachable or f"cannot reach {url}")
    return ApiError(0, "network_error", f"{url}: {type(exc).__name__}: {exc}")


def storage_request(method: str, url: str, timeout: float = 600, **kw: Any) -> requests.Response:
    """A request to a presigned storage link: plain requests, not the API session (no API key sent to
    storage); a failure without an answer as an ApiError."""
    try:
        return requests.request(method, url, timeout=timeout, **kw)
    except requests.RequestException as exc:
        raise no_answer(exc, urlsplit(url)._replace(query="").geturl()) from exc  # the signature stays out


#: times a request is sent while the tenant's rate limit refuses it (each again after its Retry-After, at most
#: 60 s, WAF's; after the last refusal the error is raised at once)
RATE_LIMIT_RETRIES = 6


def _rate_limited_wait(resp: requests.Response) -> float | None:
    """The seconds to wait before sending a request the tenant's rate limit refused again; None otherwise."""
    if resp.status_code != 429:
        return None
    try:
        refused = resp.json().get("error", {}).get("code") == "tenant_rate_limited"
        wait = float(resp.headers.get("Retry-After", "1"))
    except (ValueError, AttributeError):
        return None
    return min(max(wait, 0.1), 60.0) if refused else None


#: where a command looks for a knowledge base it is given the name of, in order: MINE for a command that
#: writes (the API answers 404 to a write into a shared knowledge base), READS for one that only reads (the
#: tenant's own first, then one shared with it), SHARED for one about what others shared (`share decline`).
#: A command's parser declares its scope (output.command's `kb_scope`); the client resolves names with it
KbScope = Literal["mine", "reads", "shared"]
MINE: Final = "mine"
READS: Final = "reads"
SHARED: Final = "shared"
KB_SCOPES: dict[KbScope, tuple[str, ...]] = {MINE: ("own",), READS: ("own", "shared"), SHARED: ("shared",)}


class ApiClient:
    def __init__(self, base_url: str, api_key: str, timeout: float = 60.0, kb_scope: KbScope = READS) -> None:
        self.base = base_url.rstrip("/")
        self.kb_scope: KbScope = kb_scope
        self.timeout = timeout
        self.session = requests.Session()
        self.session.headers["X-API-Key"] = api_key

    def call(self, method: str, path: str, *, whole: bool = False, **kw: Any) -> Any:
        """The answer's `data` (`whole`: its envelope, where a paged list keeps `next_cursor` beside `data`).
        A request refused by the tenant's rate limit (429 `tenant_rate_limited`, refused before any work) is
        sent again after its `Retry-After`, a few times."""
        for sent in range(1, RATE_LIMIT_RETRIES + 1):
            resp = self._send(method, path, **kw)
            wait = _rate_limited_wait(resp)
            if wait is None or sent == RATE_LIMIT_RETRIES:
                break
            time.sleep(wait)
            for _name, file in (kw.get("files") or {}).items():  # an upload's file is read again
                if isinstance(file, tuple) and hasattr(file[1], "seek"):
                    file[1].seek(0)
        return self._answer(resp, whole)

    def _send(self, method: str, path: str, **kw: Any) -> requests.Response:
        try:
            return self.session.request(method, f"{self.base}{path}", timeout=self.timeout, **kw)
        except requests.RequestException as exc:
            hint = f"cannot reach {self.base} (is `weknora-ingest up` running?)"
            raise no_answer(exc, self.base, unreachable=hint) from exc

    def _answer(self, resp: requests.Response, whole: bool) -> Any:
        try:
            body = resp.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("success") is True and resp.ok:
            return body if whole else body.get("data")
        if resp.ok and body is not None and not isinstance(body, dict | list):
            return body
        if resp.ok and isinstance(body, dict) and "success" not in body:
            return body  # a document that is not an envelope (the OpenAPI document)
        err = body.get("error") if isinstance(body, dict) else None
        err = err if isinstance(err, dict) else {}
        top = body if isinstance(body, dict) else {}
        code = str(err.get("code") or top.get("code") or resp.status_code)
        message = str(err.get("message") or top.get("message") or resp.text[:200] or resp.reason)
        raise ApiError(resp.status_code, code, message, top.get("data"))

    def pages(
        self, path: str, params: dict[str, Any] | None = None, limit: int | None = None, size_key: str = ""
    ) -> Iterator[dict[str, Any]]:
        """Every item of a cursor-paged listing (`items`, `next_cursor`), at most `limit`."""
        params = dict(params or {})
        cursor: str | None = None
        seen = 0
        while True:
            page = self.call("GET", path, params={**params, **({"cursor": cursor} if cursor else {})})
            for item in page.get("items") or []:
                yield item
                seen += 1
                if limit is not None and seen >= limit:
                    return
            cursor = page.get("next_cursor") or None
            if not cursor:
                return

    def every(self, path: str) -> list[Any]:
        """Every item of a listing whose `data` is a page, `next_cursor` beside it, page after page."""
        found: list[Any] = []
        params: dict[str, str] = {}
        while True:
            page = self.call("GET", path, params=params, whole=True)
            found += page.get("data") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return found
            params = {"cursor": cursor}

    def knowledge_bases(self) -> list[dict[str, Any]]:
        """Every knowledge base the key sees."""
        return self.every("/knowledge-bases")

    def wiki(self, kb_id: str) -> dict[str, Any]:
        """The whole wiki: GET .../wiki page after page (`next_cursor`), its index parts joined, its pages."""
        parts: list[str] = []
        pages: list[dict[str, Any]] = []
        params: dict[str, str] = {}
        while True:
            page = self.call("GET", f"/knowledge-bases/{kb_id}/wiki", params=params) or {}
            parts.append(page.get("index") or "")
            pages += page.get("pages") or []
            cursor = page.get("next_cursor")
            if not cursor:
                return {"index": "".join(parts), "pages": pages}
            params = {"cursor": cursor}

    def find_kb(self, ref: str, scope: KbScope | None = None) -> dict[str, Any] | None:
        """The knowledge base with this id, or else the one with this name where `scope` (default the
        command's, `kb_scope`) looks: the key's listing holds the knowledge bases other tenants shared with
        its tenant, with no acceptance asked, so a name is the tenant's own first, and a shared one only for
        a command that reads (said on stderr). Two of the name in one place: CliError `kb_ambiguous` naming
        their ids."""
        kbs = self.knowledge_bases()
        by_id = next((kb for kb in kbs if kb.get("id") == ref), None)
        if by_id is not None:
            return by_id
        own = [kb for kb in kbs if not kb.get("shared")]
        shared = [kb for kb in kbs if kb.get("shared")]
        for place in KB_SCOPES[scope or self.kb_scope]:
            named = [kb for kb in (own if place == "own" else shared) if kb.get("name") == ref]
            if len(named) > 1:
                ids = ", ".join(str(kb.get("id")) for kb in named)
                whose = "of yours" if place == "own" else "shared with you"
                raise CliError(
                    "kb_ambiguous",
                    f"{len(named)} knowledge bases {whose} are named {ref!r} ({ids}): give its id",
                )
            if named:
                if place == "shared":
                    owner = named[0].get("tenant_id") or "another tenant"
                    sys.stderr.write(
                        f"note: {ref!r} is knowledge base {named[0].get('id')}, shared with you read-only by "
                        f"tenant {owner} (you have none of that name)\n"
                    )
                return named[0]
        return None

    def kb_id(self, ref: str) -> str:
        """A knowledge base named (where the command's `kb_scope` looks) or given by id: its id (an unknown
        one is passed on for the API's 404)."""
        found = self.find_kb(ref)
        return str(found["id"]) if found is not None else ref

    def ensure_kb(self, ref: str) -> tuple[dict[str, Any], bool]:
        """The tenant's own knowledge base with this id or name, or a new one named so (True): never one
        another tenant shared (read-only: every upload into it would fail)."""
        found = self.find_kb(ref, MINE)
        if found is not None and found.get("shared"):  # named by its id
            raise CliError(
                "kb_read_only",
                f"knowledge base {found.get('id')} ({found.get('name')!r}) was shared with you read-only by "
                f"tenant {found.get('tenant_id') or 'another tenant'}: nothing can be added to it",
            )
        if found is not None:
            return found, False
        return self.call("POST", "/knowledge-bases", json={"name": ref}), True

    def upload(self, kb_id: str, path: Path) -> str:
        """Upload one file; returns its knowledge id. A duplicate raises ApiError(409) carrying the row."""
        return str(self.upload_row(kb_id, path)["id"])

    def upload_row(self, kb_id: str, path: Path) -> dict[str, Any]:
        """Upload one file: its new row (only `id` after a presigned PUT, whose row the storage event
        makes)."""
        size = path.stat().st_size
        if size <= DIRECT_UPLOAD_MAX_BYTES:
            mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            with path.open("rb") as fh:
                data = self.call(
                    "POST", f"/knowledge-bases/{kb_id}/knowledge/file", files={"file": (path.name, fh, mime)}
                )
            return dict(data)
        grant = self.call(
            "POST",
            f"/knowledge-bases/{kb_id}/knowledge/upload-url",
            json={"file_name": path.name, "file_size": size},
        )
        self.put_presigned(grant, path)
        return {"id": str(grant["knowledge_id"])}

    @staticmethod
    def put_presigned(grant: dict[str, Any], path: Path) -> None:
        """The file to storage as the grant says: a PUT to `upload_url`, or a form POSTed to `url` (its
        `fields`, then the file last, as S3 wants it)."""
        with path.open("rb") as fh:
            if grant.get("method") == "POST":
                files = {"file": (path.name, fh)}
                put = storage_request("POST", grant["url"], data=grant.get("fields") or {}, files=files)
            else:
                put = storage_request("PUT", grant["upload_url"], data=fh, headers=grant.get("headers") or {})
        if not put.ok:
            what = "POST" if grant.get("method") == "POST" else "PUT"
            raise ApiError(put.status_code, "upload_failed", f"{what} to storage failed: {put.text[:200]}")

    def knowledge(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}"))

    def list_knowledge(self, kb_id: str, **filters: Any) -> list[dict[str, Any]]:
        """Every row of a knowledge base (with the listing's filters), 100 to a request."""
        return list(self.pages(f"/knowledge-bases/{kb_id}/knowledge", {"page_size": 100, **filters}))

    def cost(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}/cost"))

    def spans(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge/{knowledge_id}/spans"))

    def stats(self, kb_id: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/knowledge-bases/{kb_id}/stats"))

    def search(self, kb_id: str, query: str, n: int, **filters: Any) -> list[dict[str, Any]]:
        """`filters`: the request's other fields (`tag_ids`, `min_score`, `retriever`, …) as the API names them."""
        body = {"query_text": query, "match_count": n, **filters}
        return list(self.call("POST", f"/knowledge-bases/{kb_id}/hybrid-search", json=body) or [])


def operator_client(api: str, operator_key: str) -> ApiClient:
    client = ApiClient(api, "")
    client.session.headers.pop("X-API-Key", None)
    client.session.headers["X-Operator-Key"] = operator_key
    return client
