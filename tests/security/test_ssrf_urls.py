"""SSRF through URL import and model endpoints: no tenant can make the service fetch an internal address.

Every URL is either refused by the API with a clean 4xx, or accepted and then `failed` in the worker with a
reason (a redirect to an internal address, a name that resolves elsewhere by the time the worker fetches);
an internal listener receives nothing, and a good document imported afterwards completes.

Names under `example.test` resolve through a scripted resolver (no DNS is needed); the operator's
allow-list trusts exactly one loopback port, the "site" that serves the redirects."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from e2e.conftest import Api

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

PUBLIC_IP = "93.184.216.34"

#: refused by the API: (url template, what it tries); {internal} is the port of the internal listener
REFUSED = [
    # loopback, every spelling
    "http://127.0.0.1/",
    "http://127.1/",
    "http://127.0.0.1:80/admin",
    "http://0.0.0.0/",
    "http://0/",
    "http://localhost/",
    "http://LOCALHOST./",
    "http://foo.localhost/",
    "http://[::1]/",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://[::]/",
    # decimal, octal, hex and shorthand encodings
    "http://2130706433/",
    "http://017700000001/",
    "http://0x7f000001/",
    "http://0x7f.0.0.1/",
    "http://0177.0.0.1/",
    "http://127.000.000.001/",
    # IPv6 carrying IPv4, scoped and private IPv6
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[2002:7f00:1::]/",
    "http://[fe80::1%25eth0]/",
    "http://[fd00::1]/",
    # link-local and cloud metadata
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.170.2/v2/credentials",
    "http://[fd00:ec2::254]/latest/meta-data/",
    "http://metadata.google.internal/computeMetadata/v1/",
    "http://metadata/",
    "http://instance-data/latest/",
    "http://100.100.100.200/latest/meta-data/",
    # private networks
    "http://10.0.0.1/",
    "http://192.168.1.1/",
    "http://172.16.0.1/",
    # names that resolve to internal addresses
    "http://internal.example.test/",
    "http://loopback.example.test/",
    "http://metadata.example.test/latest/meta-data/",
    "http://mixed.example.test/",
    "http://v6.example.test/",
    # userinfo and parser-confusion tricks
    "http://example.test@127.0.0.1/",
    "http://user:pass@169.254.169.254/",
    "http://127.0.0.1#@example.test/",
    "http://example.test\\@127.0.0.1/",
    # schemes other than http(s)
    "file:///etc/passwd",
    "gopher://127.0.0.1:6379/_INFO",
    "ftp://example.test/x",
    "dict://127.0.0.1:11211/",
    "data:text/html,hello",
    "javascript:alert(1)",
    # a trusted host on a port it is not trusted on, and blocked service ports
    "http://127.0.0.1:{internal}/",
    "http://public.example.test:22/",
    "http://public.example.test:6379/",
]

#: accepted by the API (the first hop is the trusted site), refused in the worker
REDIRECTED_TO = [
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:{internal}/secret",
    "http://localhost:{internal}/",
    "http://[::1]:{internal}/",
    "http://internal.example.test/",
    "file:///etc/passwd",
    "http://0x7f000001:{internal}/",
]

MODEL_ENDPOINTS = [
    "http://127.0.0.1:{internal}/v1",
    "http://169.254.169.254/latest",
    "http://internal.example.test/v1",
    "http://[::1]:{internal}/v1",
    "http://127.0.0.1:{internal}/moto-api/reset",
]


@dataclass
class Resolver:
    """Scripted DNS: fixed answers, and `rebind.example.test`, public at the first look, loopback after."""

    answers: dict[str, list[str]] = field(
        default_factory=lambda: {
            "internal.example.test": ["10.0.0.5"],
            "loopback.example.test": ["127.0.0.1"],
            "metadata.example.test": ["169.254.169.254"],
            "mixed.example.test": [PUBLIC_IP, "127.0.0.1"],
            "v6.example.test": ["::1"],
            "public.example.test": [PUBLIC_IP],
            "example.test": [PUBLIC_IP],
        }
    )
    rebind_lookups: int = 0

    def __call__(self, host: str, port: int) -> list[str]:
        if host == "rebind.example.test":
            self.rebind_lookups += 1
            return [PUBLIC_IP] if self.rebind_lookups == 1 else ["127.0.0.1"]
        if host in ("127.0.0.1", "localhost"):
            return ["127.0.0.1"]
        if host not in self.answers:
            raise OSError(f"{host} does not resolve")
        return self.answers[host]


def _server(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@dataclass
class Net:
    site: str  # the trusted loopback site (redirects, a good page)
    internal: int  # the port of a listener nobody may reach
    received: list[str]  # what the internal listener was sent


@pytest.fixture
def net(services: Services) -> Iterator[Net]:
    received: list[str] = []

    class Internal(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            received.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"internal secret")

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    internal, internal_port = _server(Internal)

    class Site(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            query = parse_qs(urlsplit(self.path).query)
            if self.path.startswith("/r?"):
                self.send_response(302)
                self.send_header("Location", query["to"][0])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = b"# Good page\n\nThe lighthouse keeper logs every ship that passes the cape.\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/markdown")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    site, site_port = _server(Site)
    # The operator trusts the site's port only: the same host on another port stays forbidden.
    services.settings = replace(services.settings, ssrf_allow=(f"127.0.0.1:{site_port}",))
    services.urls = SafeUrlImporter(AllowList.parse(services.settings.ssrf_allow), resolver=Resolver())
    yield Net(f"http://127.0.0.1:{site_port}", internal_port, received)
    site.shutdown()
    internal.shutdown()


def _fill(template: str, net: Net) -> str:
    return template.replace("{internal}", str(net.internal))


def test_at_least_forty_urls() -> None:
    assert len(REFUSED) + len(REDIRECTED_TO) + len(MODEL_ENDPOINTS) + 1 >= 40


def test_hostile_urls_are_refused_or_fail_and_a_good_document_completes(
    api: Api, runtime: LocalRuntime, net: Net
) -> None:
    kb = api.create_kb()
    url_route = f"/knowledge-bases/{kb['id']}/knowledge/url"
    problems = []
    for template in REFUSED:
        url = _fill(template, net)
        response = api.post(url_route, {"url": url})
        if response.status_code != 400 or response.json_body["error"]["code"] not in (
            "ssrf_blocked",
            "invalid_url",
        ):
            problems.append(f"{url}: {response.status_code} {response.json_body}")
        elif "secret" in str(response.json_body):
            problems.append(f"{url}: the message repeats credentials")
    assert not problems, "\n".join(problems)

    accepted: dict[str, str] = {}
    for template in REDIRECTED_TO:
        target = _fill(template, net)
        url = f"{net.site}/r?to={target}"
        response = api.post(url_route, {"url": url})
        assert response.status_code == 201, (url, response.json_body)
        accepted[url] = response.json_body["data"]["id"]
    # DNS rebinding: public when the API looks, loopback when the worker fetches.
    rebind = api.post(url_route, {"url": f"http://rebind.example.test:{net.internal}/"})
    assert rebind.status_code == 201, rebind.json_body
    accepted["rebind"] = rebind.json_body["data"]["id"]

    runtime.drain(timeout=180)
    for url, knowledge_id in accepted.items():
        row = api.knowledge(knowledge_id)
        assert row["parse_status"] == "failed", (url, row)
        assert row["error_message"], (url, row)
        assert "blocked" in row["error_message"] or "rejected" in row["error_message"], (url, row)
        assert "internal secret" not in str(row)
    assert net.received == []

    good = api.post(url_route, {"url": f"{net.site}/good.md"})
    assert good.status_code == 201, good.json_body
    upload = api.upload(kb["id"], "after.md", b"# After\n\nThe ferry leaves at noon from the north pier.")
    assert upload.status_code == 200, upload.json_body
    runtime.drain(timeout=180)
    assert api.knowledge(good.json_body["data"]["id"])["parse_status"] == "completed"
    assert api.knowledge(upload.json_body["data"]["id"])["parse_status"] == "completed"
    assert net.received == []


@pytest.mark.parametrize("setting", ["embedding_model_id", "summary_model_id", "vlm_model_id"])
def test_model_endpoints_are_names_from_the_catalogue(
    api: Api, runtime: LocalRuntime, net: Net, setting: str
) -> None:
    """The same hostile addresses as model endpoints (see test_model_endpoints.py for every setting and
    the upload overrides): a knowledge base can only name a model the operator offers."""
    for template in MODEL_ENDPOINTS:
        value = f"openai/x@{_fill(template, net)}"
        response = api.post("/knowledge-bases", {"name": f"kb-{setting}", setting: value})
        assert response.status_code == 400, response.json_body
        assert response.json_body["error"]["code"] == "unknown_model"
    kb = api.create_kb()
    upload = api.upload(kb["id"], "ok.md", b"# Fine\n\nA good document after the refused ones.")
    runtime.drain(timeout=180)
    assert api.knowledge(upload.json_body["data"]["id"])["parse_status"] == "completed"
    assert net.received == []


def test_a_host_that_does_not_resolve_is_a_dns_error_not_an_ssrf_block(
    api: Api, runtime: LocalRuntime, net: Net
) -> None:
    """Issue 24, defect 11: a host without an address was reported as `ssrf_blocked`."""
    kb = api.create_kb()
    url_route = f"/knowledge-bases/{kb['id']}/knowledge/url"
    response = api.post(url_route, {"url": "http://nowhere.example.test/page"})
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == "host_unresolved"
    assert "does not resolve" in response.json_body["error"]["message"]
    blocked = api.post(url_route, {"url": "http://internal.example.test/"})
    assert blocked.json_body["error"]["code"] == "ssrf_blocked"
    # a redirect to such a host fails the document with the DNS reason, not a block
    created = api.post(url_route, {"url": f"{net.site}/r?to=http://nowhere.example.test/"})
    assert created.status_code == 201, created.json_body
    runtime.drain(timeout=120)
    row = api.knowledge(created.json_body["data"]["id"])
    assert row["parse_status"] == "failed"
    assert "does not resolve" in row["error_message"] and "blocked" not in row["error_message"]
