"""A refused redirect says what kind of target it was in fixed words: the target's host name, scheme and
URL are written by the remote server (up to 2 KB of its choosing) and reach the knowledge row, its span and
the logs. The URL the tenant gave is theirs and may be named."""

from __future__ import annotations

import socket
import traceback

import pytest
from loopback import LoopbackServer

from chalicelib.net import AllowList, FetchError, SafeHttpClient

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
REMOTE_TEXT = "call-0800-555-0100-your-account-is-suspended"


def no_name_resolves(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def refusal(server: LoopbackServer, location: str, client: SafeHttpClient) -> FetchError:
    server.redirect("/r", location)
    with pytest.raises(FetchError) as caught:
        client.get(server.url("/r"))
    return caught.value


@pytest.mark.parametrize(
    ("location", "expected", "code"),
    [
        (f"http://{REMOTE_TEXT}.internal/x", "redirect target blocked: internal host name", "ssrf_blocked"),
        (f"http://{REMOTE_TEXT}/x", "redirect target blocked: internal host name", "ssrf_blocked"),
        (f"{REMOTE_TEXT}://x/", "redirect target blocked: scheme not allowed", "ssrf_blocked"),
        (f"http://{REMOTE_TEXT}.example/x", "redirect target: host does not resolve", "host_unresolved"),
    ],
)
def test_a_refused_redirect_names_the_kind_of_target_never_its_text(
    server: LoopbackServer, location: str, expected: str, code: str
) -> None:
    error = refusal(server, location, SafeHttpClient(LOOPBACK, resolver=no_name_resolves))
    assert error.message == expected and error.permanent and error.code == code
    logged = "".join(traceback.format_exception(error))  # what a log line with the traceback holds
    assert REMOTE_TEXT not in logged


def test_a_redirect_to_a_name_resolving_inside_names_no_host(server: LoopbackServer) -> None:
    error = refusal(
        server,
        f"http://{REMOTE_TEXT}.example/x",
        SafeHttpClient(LOOPBACK, resolver=lambda _host, _port: ["10.0.0.7"]),
    )
    assert error.message == "redirect target blocked: internal address" and error.code == "ssrf_blocked"
    assert REMOTE_TEXT not in "".join(traceback.format_exception(error))


def test_the_tenants_own_url_is_still_named_in_its_refusal() -> None:
    with pytest.raises(FetchError) as caught:
        SafeHttpClient(AllowList()).get("http://files.tenant-intranet.internal/a.pdf")
    assert (
        caught.value.message
        == "URL blocked: host 'files.tenant-intranet.internal' has an internal domain suffix"
    )
    assert caught.value.code == "ssrf_blocked"
