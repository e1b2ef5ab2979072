"""Issue 24, quotas: the operator's optional per-tenant storage and document quotas, enforced with a clear
4xx at the API and a `failed` row with the reason where the size is known only at indexing (a URL import)."""

from __future__ import annotations

import io
import random
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from chalice.test import Client
from PIL import Image

from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_admin_api import Operator, operator  # noqa: F401  (the fixture)

DOC = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"


def _tenant(client: Client, operator: Operator, **quotas: int) -> tuple[str, Api]:  # noqa: F811
    created = operator.call("post", "/tenants", {"name": "quota", **quotas})
    assert created.status_code == 201, created.json_body
    data = created.json_body["data"]
    return data["tenant"]["id"], Api(client, data["api_key"])


def _view(operator: Operator, tenant_id: str) -> dict[str, Any]:  # noqa: F811
    tenants = operator.call("get", "/tenants").json_body["data"]
    return dict(next(t for t in tenants if t["id"] == tenant_id))


def test_a_document_quota_refuses_the_next_document_until_one_is_deleted(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
) -> None:
    tenant_id, api = _tenant(client, operator, document_quota=2)
    kb = api.create_kb()
    first = api.upload(kb["id"], "a.md", DOC).json_body["data"]
    assert api.upload(kb["id"], "b.md", DOC + b"b").status_code == 200
    refused = api.upload(kb["id"], "c.md", DOC + b"c")
    assert refused.status_code == 403 and refused.json_body["error"]["code"] == "document_quota_exceeded"
    manual = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# x\n\ny"})
    assert manual.status_code == 403 and manual.json_body["error"]["code"] == "document_quota_exceeded"
    assert _view(operator, tenant_id)["document_count"] == 2
    runtime.drain(timeout=120)
    deleted = api.client.http.delete(f"/api/v1/knowledge/{first['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code == 202
    runtime.drain(timeout=120)
    assert _view(operator, tenant_id)["document_count"] == 1
    assert api.upload(kb["id"], "c.md", DOC + b"c").status_code == 200
    raised = operator.call("put", f"/tenants/{tenant_id}/quotas", {"document_quota": 0, "storage_quota": 0})
    assert raised.status_code == 200 and raised.json_body["data"]["document_quota"] == 0
    assert api.upload(kb["id"], "d.md", DOC + b"d").status_code == 200


def _markdown_size(services: Services, knowledge_id: str) -> int:
    row = services.knowledge.get(knowledge_id)
    assert row is not None
    key = parsed_markdown_key(row.tenant_id, row.id, row.attempt)
    return services.files.size(services.files.backend(row.storage_backend).url_for(key))


def test_a_storage_quota_refuses_a_file_that_does_not_fit(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
    services: Services,
) -> None:
    tenant_id, api = _tenant(client, operator, storage_quota=len(DOC) * 3 + 10)
    kb = api.create_kb()
    first = api.upload(kb["id"], "a.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    counted = len(DOC) + _markdown_size(services, first["id"])  # the file and its parsed Markdown
    assert _view(operator, tenant_id)["storage_used"] == counted
    too_big = api.upload(kb["id"], "big.md", DOC * 3)
    assert too_big.status_code == 403 and too_big.json_body["error"]["code"] == "storage_quota_exceeded"
    presign = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "x.md", "file_size": 10**6}
    )
    assert presign.status_code == 403 and presign.json_body["error"]["code"] == "storage_quota_exceeded"
    fits = api.upload(kb["id"], "b.md", DOC + b"b").json_body["data"]
    # counted when accepted, before it is indexed: a third file finds the room taken
    assert _view(operator, tenant_id)["storage_used"] == counted + len(DOC) + 1
    third = api.upload(kb["id"], "c.md", b"# c\n\n" + b"x" * 20)
    assert third.status_code == 403 and third.json_body["error"]["code"] == "storage_quota_exceeded"
    # the operator lowers the quota while it is queued: its file stays counted, and what its parse stores
    # (its Markdown) no longer fits: it fails at indexing, counting nothing more
    operator.call("put", f"/tenants/{tenant_id}/quotas", {"storage_quota": len(DOC) + 5})
    runtime.drain(timeout=120)
    failed = api.knowledge(fits["id"])
    assert (failed["parse_status"], failed["error_code"]) == ("failed", "quota_exceeded")
    assert _view(operator, tenant_id)["storage_used"] == counted + len(DOC) + 1


def test_quotas_are_validated(client: Client, operator: Operator) -> None:  # noqa: F811
    bad = operator.call("post", "/tenants", {"name": "neg", "document_quota": -1})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_quota"
    missing = operator.call("put", "/tenants/no-such-tenant/quotas", {"document_quota": 1})
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "tenant_not_found"


@pytest.fixture
def photo_site(services: Services) -> Iterator[tuple[str, dict[str, bytes]]]:
    """A loopback server of incompressible PNGs (a distinct one per path), and what it served."""
    served: dict[str, bytes] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            noise = random.Random(self.path).randbytes(120 * 120 * 3)
            out = io.BytesIO()
            Image.frombytes("RGB", (120, 120), noise).save(out, "PNG")
            body = served[self.path] = out.getvalue()
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings = services.settings
    # the operator's allow-list lets tests reach loopback
    services.settings = replace(settings, ssrf_allow=("127.0.0.1:*",))
    yield f"http://127.0.0.1:{server.server_address[1]}", served
    services.settings = settings
    server.shutdown()


def test_the_images_a_markdown_file_links_count_on_the_storage_quota(
    client: Client,
    operator: Operator,  # noqa: F811
    runtime: LocalRuntime,
    services: Services,
    photo_site: tuple[str, dict[str, bytes]],
) -> None:
    site, served = photo_site
    tenant_id, api = _tenant(client, operator, storage_quota=20_000)  # the file fits, its images do not
    kb = api.create_kb()

    def gallery(name: str) -> bytes:
        return (f"# {name}\n\n" + "\n\n".join(f"![p{i}]({site}/{name}/{i}.png)" for i in range(10))).encode()

    refused = api.upload(kb["id"], "one.md", gallery("one")).json_body["data"]
    runtime.drain(timeout=120)
    failed = api.knowledge(refused["id"])
    assert (failed["parse_status"], failed["error_code"]) == ("failed", "quota_exceeded")
    assert _view(operator, tenant_id)["storage_used"] == len(gallery("one"))  # its file, counted at upload
    operator.call("put", f"/tenants/{tenant_id}/quotas", {"storage_quota": 0})
    fits = api.upload(kb["id"], "two.md", gallery("two")).json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(fits["id"])["parse_status"] == "completed"
    images = sum(len(body) for path, body in served.items() if path.startswith("/two/"))
    counted = len(gallery("two")) + _markdown_size(services, fits["id"]) + images
    assert images > 10 * len(gallery("two"))
    assert _view(operator, tenant_id)["storage_used"] == len(gallery("one")) + counted
    deleted = api.client.http.delete(f"/api/v1/knowledge/{fits['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code == 202
    runtime.drain(timeout=120)
    assert _view(operator, tenant_id)["storage_used"] == len(gallery("one"))  # given back once
