"""A URL import that fails in the worker fails its row with a stable code saying why (the API's own codes
for a refused URL, `ssrf_blocked` and `host_unresolved`, and `url_fetch_failed` for a server that was
reached but did not give the document), and with no text the remote server chose in the row or its trace."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from loopback import LoopbackServer

from chalicelib.adapters.memory import ScriptedUrlImporter
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

from .conftest import drain

REMOTE_TEXT = "your-account-is-suspended-call-0800-555-0100-now"


def names_resolve_nowhere(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


@pytest.fixture
def real_urls(deps: Services) -> Iterator[Services]:
    """The real SSRF-safe importer, the loopback server trusted; no name resolves."""
    deps.urls = SafeUrlImporter(AllowList.parse("127.0.0.0/8:*"), resolver=names_resolve_nowhere)
    yield deps


def import_and_run(deps: Services, kb: KnowledgeBase, url: str) -> Knowledge:
    from chalicelib.commands import UrlImportRequest
    from chalicelib.operations.create import create_from_url

    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    drain(deps, ("docreader",))
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    return row


def shown(deps: Services, row: Knowledge) -> str:
    """What the API shows of the failure: the row's message and the trace."""
    return row.error_message + json.dumps(deps.tracker.view(row))


@pytest.mark.parametrize(
    ("location", "code", "said"),
    [
        (f"http://{REMOTE_TEXT}.internal/", "ssrf_blocked", "redirect target blocked: internal host name"),
        (f"{REMOTE_TEXT}://x/", "ssrf_blocked", "redirect target blocked: scheme not allowed"),
        (f"http://{REMOTE_TEXT}.example/", "host_unresolved", "redirect target: host does not resolve"),
    ],
)
def test_a_refused_redirect_fails_the_row_with_a_stable_code_and_none_of_the_servers_text(
    real_urls: Services, kb: KnowledgeBase, server: LoopbackServer, location: str, code: str, said: str
) -> None:
    server.redirect("/r", location)
    row = import_and_run(real_urls, kb, server.url("/r"))
    assert row.error_code == code
    assert said in row.error_message and server.url("/r") in row.error_message  # the tenant's URL is theirs
    assert REMOTE_TEXT not in shown(real_urls, row)


def test_a_url_the_server_does_not_serve_fails_with_url_fetch_failed(
    real_urls: Services, kb: KnowledgeBase, server: LoopbackServer
) -> None:
    row = import_and_run(real_urls, kb, server.url("/missing.pdf"))
    assert row.error_code == "url_fetch_failed" and "HTTP 404" in row.error_message


def test_a_url_refused_when_the_worker_checks_it_again_fails_with_ssrf_blocked(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    from chalicelib.commands import UrlImportRequest
    from chalicelib.operations.create import create_from_url

    url = "https://docs.example.org/moved.pdf"
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    urls.blocked.add(url)  # its name now points inside
    drain(deps, ("docreader",))
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED and row.error_code == "ssrf_blocked"
