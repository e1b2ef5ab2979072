"""The public path under test: the Chalice test client → S3/DynamoDB on moto → real SQS messages drained
by the local event-source pollers → real Step Functions executions on moto's interpreter → the index."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client
from infra.iam_policy import RoleBook, package_stack
from project_paths import ROOT
from scripted_llm import ScriptedLLM, use_models

from chalicelib.bootstrap import Services, get_deps, set_deps
from chalicelib.local.aws_calls import CallLog
from chalicelib.local.moto_server import shared_moto_server
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations.tenants import create_tenant_with_key, ensure_local_tenant
from chalicelib.settings import get_settings

API_KEY = "test-key-tenant-a"
V1 = "/api/v1"


def load_app() -> Any:
    import app as app_module

    return app_module.app


@pytest.fixture(scope="session")
def _runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRuntime]:
    runtime = LocalRuntime(
        load_app,
        ROOT / "infra" / "template.json",
        retry_delay_seconds=0,
        state_dir=tmp_path_factory.mktemp("state"),
        server=shared_moto_server(),
        stage="local",
        project_dir=ROOT,
        # documents in the bucket, as on AWS (infra/template.json), so their S3 calls are tested and logged
        # the wiki's 30 s debounce waits in real time here: a second keeps the ops coalesced by the queue
        env={
            "WEKNORA_STORAGE": "s3",
            "WEKNORA_WIKI_INGEST_DELAY_SECONDS": "1",
            "WEKNORA_WIKI_FINALIZE_DELAY_SECONDS": "1",
        },
    )
    runtime.start(background=False)
    # Settings read before the runtime set the stack's environment (a module imported at collection,
    # e.g. observability) would name the wrong bucket and queues: read them again.
    get_settings.cache_clear()
    yield runtime
    runtime.stop()


@pytest.fixture(scope="session")
def _aws_calls() -> Iterator[CallLog]:
    calls = CallLog().start()
    yield calls
    calls.stop()


@pytest.fixture(scope="session")
def _roles(_runtime: LocalRuntime, tmp_path_factory: pytest.TempPathFactory) -> RoleBook:
    """Each function's role as `make package` deploys it, resolved against this runtime's resources."""
    packaged = package_stack(tmp_path_factory.mktemp("package"))
    return RoleBook(packaged, _runtime.resources, _runtime.parameters, _runtime.region)


@pytest.fixture
def runtime(_runtime: LocalRuntime, _aws_calls: CallLog, _roles: RoleBook) -> Iterator[LocalRuntime]:
    _runtime.reset(clear_state=True)
    set_deps(None)  # adapters hold state-dir handles: rebuild them for this test
    _aws_calls.take()
    yield _runtime
    set_deps(None)
    # every AWS call a function made in this test is one its own role in the packaged template allows
    denied = _roles.denied(_aws_calls.take())
    assert not denied, "calls the functions' IAM roles do not allow:\n" + "\n".join(denied)


@pytest.fixture
def services(runtime: LocalRuntime) -> Services:
    return get_deps()


@pytest.fixture(scope="module")
def module_services(_runtime: LocalRuntime) -> Iterator[Services]:
    """One reset for a module whose tests work on fresh ids (the repository contracts share the tables)."""
    _runtime.reset(clear_state=True)
    set_deps(None)
    yield get_deps()
    set_deps(None)


class Api:
    """The HTTP API through Chalice's test client, with one tenant's key."""

    def __init__(self, client: Client, api_key: str):
        self.client = client
        self.api_key = api_key

    def _headers(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {"X-API-Key": self.api_key, **(extra or {})}

    def get(self, path: str) -> Any:
        return self.client.http.get(f"{V1}{path}", headers=self._headers())

    def post(self, path: str, body: Any = None) -> Any:
        data = json.dumps(body if body is not None else {})
        return self.client.http.post(
            f"{V1}{path}", headers=self._headers({"Content-Type": "application/json"}), body=data
        )

    def upload(self, kb_id: str, name: str, data: bytes, fields: dict[str, str] | None = None) -> Any:
        body, content_type = multipart({"file": (name, data)}, fields or {})
        return self.client.http.post(
            f"{V1}/knowledge-bases/{kb_id}/knowledge/file",
            headers=self._headers({"Content-Type": content_type}),
            body=body,
        )

    def create_kb(self, name: str | None = None, **settings: Any) -> dict[str, Any]:
        response = self.post("/knowledge-bases", {"name": name or f"kb-{uuid.uuid4().hex[:8]}", **settings})
        assert response.status_code == 201, response.json_body
        return dict(response.json_body["data"])

    def knowledge(self, knowledge_id: str) -> dict[str, Any]:
        response = self.get(f"/knowledge/{knowledge_id}")
        assert response.status_code == 200, response.json_body
        return dict(response.json_body["data"])


def hold_in_finalizing(api: Api, runtime: LocalRuntime, knowledge_id: str) -> None:
    """Runs every stage but enrichment until the row is `finalizing`, so its enrichment work stays queued
    (polling every queue could finish the enrichment inside one round and skip the state)."""
    ingest = [p for p in runtime.pollers if not p.function_name.endswith("-enrichment_task")]
    assert len(ingest) == len(runtime.pollers) - 1
    for _ in range(80):
        for poller in ingest:
            poller.poll_once(wait_time_seconds=0)
        if api.knowledge(knowledge_id)["parse_status"] == "finalizing":
            return
    raise AssertionError(f"{knowledge_id} never reached finalizing: {api.knowledge(knowledge_id)}")


def multipart(files: dict[str, tuple[str, bytes]], fields: dict[str, str]) -> tuple[bytes, str]:
    boundary = f"----weknora{uuid.uuid4().hex}"
    parts = []
    for name, value in fields.items():
        parts.append(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        )
    for name, (file_name, data) in files.items():
        head = (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{file_name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n"
        )
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


@pytest.fixture
def client(runtime: LocalRuntime) -> Iterator[Client]:
    with Client(runtime.app, stage_name="local", project_dir=str(ROOT)) as test_client:
        yield test_client


@pytest.fixture
def api(client: Client, services: Services) -> Api:
    ensure_local_tenant(services, API_KEY)
    return Api(client, API_KEY)


@pytest.fixture
def other_api(client: Client, services: Services) -> Api:
    _, key = create_tenant_with_key(services, "tenant-b")
    return Api(client, key)


@pytest.fixture
def llm(services: Services) -> Iterator[ScriptedLLM]:
    """The scripted chat, vision and embedding servers as the stack's models (a module may script its own)."""
    with ScriptedLLM() as scripted:
        use_models(services, scripted)
        yield scripted
