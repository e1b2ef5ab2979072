"""A knowledge base bound to a named storage backend, through the public API: its documents' objects are
written to that backend (a MinIO-style endpoint of its own, keys from SSM), the `dummy` backend fails a
document with a clear permanent reason, an unknown backend is a 400, a change of the knowledge base's
backend applies to new documents only, and a move into a knowledge base on another backend takes the
document's objects along."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from chalicelib.bootstrap import Services, get_deps, set_deps
from chalicelib.local.moto_server import MotoServer, shared_moto_server
from chalicelib.local.runtime import LocalRuntime
from chalicelib.settings import get_settings

from .conftest import Api
from .stored import stored_keys

BUCKET = "kb-documents"
TEXT = b"# Tide tables\n\nSpring tides follow the new and the full moon; neap tides the quarter moons.\n"


@pytest.fixture(scope="module")
def lab_endpoint() -> Iterator[MotoServer]:
    """The named backend's own S3-compatible endpoint (not the stack's moto)."""
    shared_moto_server()
    server = MotoServer(port=0, separate_process=True).start(point_sdk=False)
    boto3.client("s3", endpoint_url=server.url).create_bucket(Bucket=BUCKET)
    yield server
    server.stop()


@pytest.fixture
def backends(
    runtime: LocalRuntime, lab_endpoint: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Services]:
    """The operator configures `lab` (MinIO, path style, keys in SSM) and `void` (the dummy backend)."""
    prefix = get_settings().prefix
    parameter = f"/{prefix}/storage/lab"
    keys = {"access_key_id": "AKLAB", "secret_access_key": "lab-secret"}
    boto3.client("ssm").put_parameter(
        Name=parameter, Value=json.dumps(keys), Type="SecureString", Overwrite=True
    )
    configured = {
        "lab": {
            "provider": "minio",
            "bucket": BUCKET,
            "endpoint": lab_endpoint.url,
            "credentials": f"ssm:{parameter}",
        },
        "void": {"provider": "dummy"},
    }
    monkeypatch.setenv("WEKNORA_STORAGE_BACKENDS", json.dumps(configured))
    get_settings.cache_clear()
    set_deps(None)
    yield get_deps()
    monkeypatch.delenv("WEKNORA_STORAGE_BACKENDS")
    get_settings.cache_clear()
    set_deps(None)


def _lab_keys(server: MotoServer, prefix: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=server.url)
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", []))


def _put_kb(api: Api, kb_id: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"/api/v1/knowledge-bases/{kb_id}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


def test_a_document_of_a_kb_bound_to_a_backend_is_stored_and_completed_there(
    api: Api, runtime: LocalRuntime, backends: Services, lab_endpoint: MotoServer
) -> None:
    kb = api.create_kb(storage_backend="lab")
    assert kb["storage_backend"] == "lab"
    assert api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]["storage_backend"] == "lab"
    created = api.upload(kb["id"], "tides.md", TEXT).json_body["data"]
    assert created["storage_backend"] == "lab"
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    row = backends.knowledge.get(created["id"])
    assert row is not None and row.file_path.startswith("storage://lab/")
    document = f"{created['tenant_id']}/{created['id']}/"
    on_lab = _lab_keys(lab_endpoint, document)
    assert row.file_path.removeprefix("storage://lab/") in on_lab  # the source, on the backend's bucket
    assert f"{document}parsed/attempt-1.md" in on_lab and f"{document}parsed/attempt-1.images.json" in on_lab
    assert stored_keys(backends.inbox, document) == []  # nothing of it in the stack's files bucket
    grant = api.get(f"/knowledge/{created['id']}/file-url?kind=original").json_body["data"]["url"]
    redeemed = api.client.http.get(urlsplit(grant).path)  # the download grant: its presigned GET
    assert redeemed.status_code == 302, redeemed.json_body
    link = str(redeemed.headers["Location"])
    assert urlsplit(link).netloc == f"127.0.0.1:{lab_endpoint.port}"  # signed by the backend's own client
    hits = api.post(
        f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "neap tides", "match_count": 3}
    )
    assert hits.status_code == 200 and hits.json_body["data"]

    # new documents only: after the knowledge base moves to the default backend, the first stays on lab
    assert _put_kb(api, kb["id"], {"storage_backend": ""}).status_code == 200
    later = api.upload(kb["id"], "later.md", TEXT.replace(b"Tide", b"Harbour")).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(later["id"])["parse_status"] == "completed"
    later_row = backends.knowledge.get(later["id"])
    assert later_row is not None and later_row.file_path.startswith("s3://")
    assert _lab_keys(lab_endpoint, f"{later['tenant_id']}/{later['id']}/") == []
    assert backends.files.read(row.file_path) == TEXT

    # delete: the document's objects go from its backend
    assert api.client.http.delete(
        f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key}
    ).status_code in (200, 202)
    runtime.drain(timeout=180)
    assert _lab_keys(lab_endpoint, document) == []


def test_a_move_into_a_kb_on_another_backend_takes_the_document_s_objects_along(
    api: Api, runtime: LocalRuntime, backends: Services, lab_endpoint: MotoServer
) -> None:
    """POST /knowledge/move from a knowledge base on `lab` into one on the default backend: the objects are
    copied to the stack's files bucket under the same keys and deleted from lab; the row, its downloads and
    its search hits follow; a download link made before the move stops working (410)."""
    lab_kb = api.create_kb(storage_backend="lab")
    plain_kb = api.create_kb()
    created = api.upload(lab_kb["id"], "tides.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    document = f"{created['tenant_id']}/{created['id']}/"
    on_lab = _lab_keys(lab_endpoint, document)
    assert f"{document}parsed/attempt-1.md" in on_lab
    old_grant = api.get(f"/knowledge/{created['id']}/file-url?kind=original").json_body["data"]["url"]

    started = api.post(
        "/knowledge/move",
        {"source_kb_id": lab_kb["id"], "target_kb_id": plain_kb["id"], "ids": [created["id"]]},
    )
    assert started.status_code == 202, started.json_body
    runtime.drain(timeout=180)
    task = api.get(f"/tasks/{started.json_body['data']['task_id']}").json_body["data"]
    assert task["status"] == "completed" and task["succeeded"] == 1, task
    moved = api.knowledge(created["id"])
    assert moved["kb_id"] == plain_kb["id"] and moved["storage_backend"] == ""
    assert _lab_keys(lab_endpoint, document) == []  # gone from lab
    assert stored_keys(backends.inbox, document) == on_lab  # the same keys, in the stack's bucket
    row = backends.knowledge.get(created["id"])
    assert (
        row is not None and row.file_path.startswith("s3://") and backends.files.read(row.file_path) == TEXT
    )

    stale = api.client.http.get(urlsplit(old_grant).path)
    assert stale.status_code == 410 and stale.json_body["error"]["code"] == "resource_deleted"
    grant = api.get(f"/knowledge/{created['id']}/file-url?kind=original").json_body["data"]["url"]
    redeemed = api.client.http.get(urlsplit(grant).path)
    assert redeemed.status_code == 302, redeemed.json_body
    assert urlsplit(str(redeemed.headers["Location"])).netloc != f"127.0.0.1:{lab_endpoint.port}"
    hits = api.post(
        f"/knowledge-bases/{plain_kb['id']}/hybrid-search", {"query_text": "neap tides", "match_count": 3}
    )
    assert hits.status_code == 200 and hits.json_body["data"][0]["knowledge_id"] == created["id"]


def test_the_dummy_backend_fails_a_document_with_a_clear_permanent_reason(
    api: Api, runtime: LocalRuntime, backends: Services
) -> None:
    kb = api.create_kb(storage_backend="void")
    created = api.upload(kb["id"], "gone.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert knowledge["error_code"] == "storage_not_retained"
    assert "keeps no files" in knowledge["error_message"]
    assert api.get(f"/knowledge/{created['id']}/file-url?kind=original").status_code == 404


def test_an_unknown_backend_is_refused_with_a_stable_code(api: Api, backends: Services) -> None:
    response = api.post("/knowledge-bases", {"name": "nowhere", "storage_backend": "nope"})
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == "unknown_storage_backend"
    kb = api.create_kb()
    assert kb["storage_backend"] == ""
    changed = _put_kb(api, kb["id"], {"storage_backend": "nope"})
    assert changed.status_code == 400 and changed.json_body["error"]["code"] == "unknown_storage_backend"
    openapi = api.client.http.get("/api/v1/openapi.json").json_body
    schemas = json.dumps(openapi)
    assert "storage_backend" in schemas and "invalid_storage_backend" in schemas
