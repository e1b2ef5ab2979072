"""`GET /admin/tenants/{id}/api-keys` is paged as the other listings: every key in one answer passed Lambda's
6 MB response (a 502 without a code) for a tenant with many keys limited to long lists of knowledge bases. A
page holds at most `limit` keys and ends before the byte budget; `next_cursor` beside `data` goes on after
the last key given, the store read a page at a time; the CLI's `key list` follows it."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests
from chalice.test import Client
from rich.console import Console

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTenantRequest, IssueKeyRequest
from chalicelib.local import cli
from chalicelib.local.cli import client as cli_client
from chalicelib.operations import admin
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"
OPERATOR = {"X-Operator-Key": "op-secret"}


@pytest.fixture
def operator_deps(deps: Services) -> Services:
    deps.settings = replace(deps.settings, operator_key="op-secret")
    return deps


def _tenant_with_keys(deps: Services, count: int, name: str = "ci") -> str:
    tenant, _, _ = admin.create_tenant(deps, CreateTenantRequest(name="港口公司"))
    for n in range(count):
        admin.issue_key(deps, tenant.id, IssueKeyRequest(name=f"{name}-{n:02d}"))
    return tenant.id


def _walk(client: Client, path: str, limit: int | None = None) -> tuple[list[list[Any]], list[str | None]]:
    """Every page of a listing from the first, following `next_cursor`, and the cursors it gave."""
    pages: list[list[Any]] = []
    cursors: list[str | None] = []
    cursor = ""
    for _ in range(50):
        params = [f"limit={limit}"] if limit else []
        params += [f"cursor={cursor}"] if cursor else []
        answer = client.http.get(f"{path}?{'&'.join(params)}" if params else path, headers=OPERATOR)
        assert answer.status_code == 200, answer.body
        body = answer.json_body
        assert body["has_more"] == (body["next_cursor"] is not None)
        pages.append(body["data"])
        cursors.append(body["next_cursor"])
        if body["next_cursor"] is None:
            return pages, cursors
        cursor = body["next_cursor"]
    raise AssertionError("the listing never ended")


def test_a_tenants_keys_come_limit_at_a_time_and_each_once(operator_deps: Services, client: Client) -> None:
    tenant_id = _tenant_with_keys(operator_deps, 11)  # and its first key: 12
    every = {k.id for k in admin.list_keys(operator_deps, tenant_id)}
    assert len(every) == 12

    pages, _ = _walk(client, f"{V1}/admin/tenants/{tenant_id}/api-keys", limit=5)
    assert [len(page) for page in pages] == [5, 5, 2]
    listed = [k["id"] for page in pages for k in page]
    assert len(listed) == len(set(listed)) and set(listed) == every
    assert all(k["tenant_id"] == tenant_id and "api_key" not in k for page in pages for k in page)

    whole, _ = _walk(client, f"{V1}/admin/tenants/{tenant_id}/api-keys")  # the default limit: one page
    assert len(whole) == 1 and {k["id"] for k in whole[0]} == every


def test_the_store_is_read_a_page_at_a_time(operator_deps: Services, client: Client) -> None:
    tenant_id = _tenant_with_keys(operator_deps, 20)
    reads: list[tuple[str, int]] = []
    real = operator_deps.api_keys.page

    def page(tenant: str, after: str, limit: int) -> Any:
        reads.append((after, limit))
        return real(tenant, after, limit)

    operator_deps.api_keys.page = page  # type: ignore[method-assign]
    answer = client.http.get(f"{V1}/admin/tenants/{tenant_id}/api-keys?limit=4", headers=OPERATOR)
    assert answer.status_code == 200 and len(answer.json_body["data"]) == 4
    assert reads == [("", 5)]  # the page and one more (is there a next page?), never every key


def test_a_page_ends_before_the_byte_budget_and_the_next_goes_on_after_it(
    operator_deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant_id = _tenant_with_keys(operator_deps, 9, name="港" * 90)
    keys = admin.list_keys(operator_deps, tenant_id)
    one = max(len(json.dumps(admin.key_view(k))) + 1 for k in keys)
    monkeypatch.setattr(admin, "KEYS_PAGE_MAX_BYTES", 3 * one + 1, raising=False)

    pages, cursors = _walk(client, f"{V1}/admin/tenants/{tenant_id}/api-keys", limit=100)
    assert [len(page) for page in pages] == [3, 3, 3, 1]  # cut by size, far below the limit
    listed = [k["id"] for page in pages for k in page]
    assert len(listed) == len(set(listed)) and set(listed) == {k.id for k in keys}
    assert all(cursors[:-1]) and cursors[-1] is None


def test_an_unrecorded_primary_key_is_listed_once_first(operator_deps: Services, client: Client) -> None:
    """A tenant's key with no record (the local tenant, tenants from before key records) comes first, on the
    first page only; a page ending on it goes on from the store's first key."""
    tenant, _ = create_tenant_with_key(operator_deps, "legacy")
    for n in range(3):
        admin.issue_key(operator_deps, tenant.id, IssueKeyRequest(name=f"k{n}"))

    pages, _ = _walk(client, f"{V1}/admin/tenants/{tenant.id}/api-keys", limit=1)
    names = [k["name"] for page in pages for k in page]
    assert [len(page) for page in pages] == [1, 1, 1, 1]
    assert names[0] == "primary" and sorted(names[1:]) == ["k0", "k1", "k2"]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("limit=0", "invalid_limit"),
        ("limit=1001", "invalid_limit"),
        ("limit=many", "invalid_limit"),
        ("cursor=not-a-cursor", "invalid_cursor"),
        ("cursor=" + "x" * 201, "invalid_cursor"),
    ],
)
def test_a_bad_limit_or_cursor_is_a_400_with_its_code(
    operator_deps: Services, client: Client, query: str, code: str
) -> None:
    tenant_id = _tenant_with_keys(operator_deps, 1)
    answer = client.http.get(f"{V1}/admin/tenants/{tenant_id}/api-keys?{query}", headers=OPERATOR)
    assert (answer.status_code, answer.json_body["error"]["code"]) == (400, code), answer.body


def test_another_tenants_cursor_is_refused(operator_deps: Services, client: Client) -> None:
    first, second = _tenant_with_keys(operator_deps, 3), _tenant_with_keys(operator_deps, 3)
    _, cursors = _walk(client, f"{V1}/admin/tenants/{first}/api-keys", limit=2)
    answer = client.http.get(f"{V1}/admin/tenants/{second}/api-keys?cursor={cursors[0]}", headers=OPERATOR)
    assert (answer.status_code, answer.json_body["error"]["code"]) == (400, "invalid_cursor")


class _ToChalice(requests.adapters.BaseAdapter):
    """The CLI's HTTP session sent to the Chalice test client instead of a socket."""

    def __init__(self, client: Client) -> None:
        super().__init__()
        self.client = client
        self.paths: list[str] = []

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        url = urlsplit(str(request.url))
        path = url.path + (f"?{url.query}" if url.query else "")
        self.paths.append(path)
        body = request.body if isinstance(request.body, bytes) else (request.body or "").encode()
        answer = self.client.http.request(str(request.method), path, headers=dict(request.headers), body=body)
        response = requests.Response()
        response.status_code, response._content = answer.status_code, answer.body
        response.headers.update(answer.headers)
        response.url, response.request = str(request.url), request
        return response

    def close(self) -> None:
        pass


def test_the_cli_key_list_follows_the_cursor(
    operator_deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant_id = _tenant_with_keys(operator_deps, 7)
    every = {k.id for k in admin.list_keys(operator_deps, tenant_id)}
    one = max(len(json.dumps(admin.key_view(k))) + 1 for k in admin.list_keys(operator_deps, tenant_id))
    monkeypatch.setattr(admin, "KEYS_PAGE_MAX_BYTES", 2 * one + 1, raising=False)  # two keys a page
    transport = _ToChalice(client)
    made = cli_client.ApiClient.__init__

    def routed(self: cli_client.ApiClient, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.session.mount("http://", transport)

    monkeypatch.setattr(cli_client.ApiClient, "__init__", routed)
    out = io.StringIO()
    console = Console(file=out, width=250, force_terminal=False, color_system=None)
    api = ["--api", f"http://api.test{V1}", "--operator-key", "op-secret"]
    assert cli.main(["key", "list", tenant_id, "--json", *api], console) == 0, out.getvalue()
    listed = [k["id"] for k in json.loads(out.getvalue())]
    assert len(listed) == len(set(listed)) == 8 and set(listed) == every
    assert len(transport.paths) == 4 and all("cursor=" in path for path in transport.paths[1:])
