"""The security suites drive the public path: the same fixtures as the end-to-end tests."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

import pytest
import requests
from e2e.conftest import (  # noqa: F401
    API_KEY,
    Api,
    _aws_calls,
    _roles,
    _runtime,
    api,
    client,
    other_api,
    runtime,
    services,
)

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations.tenants import ensure_local_tenant


@dataclass
class Served:
    base: str

    def fresh_ids(self) -> dict[str, str]:
        """A new knowledge base and knowledge of the caller (a fuzzed DELETE may remove the last ones)."""
        headers = {"X-API-Key": API_KEY}
        kb = requests.post(
            f"{self.base}/api/v1/knowledge-bases",
            json={"name": f"fuzz-{uuid.uuid4().hex[:8]}"},
            headers=headers,
            timeout=30,
        )
        assert kb.status_code == 201, kb.text
        kb_id = kb.json()["data"]["id"]
        manual = requests.post(
            f"{self.base}/api/v1/knowledge-bases/{kb_id}/knowledge/manual",
            json={"content": "# fuzz\n\ntext", "status": "draft"},
            headers=headers,
            timeout=30,
        )
        assert manual.status_code == 200, manual.text
        return {"kb_id": kb_id, "knowledge_id": manual.json()["data"]["id"]}


OPERATOR_KEY = "fuzz-operator-key"
#: the schemathesis runs' bounds: examples per operation (stateless) or scenarios (stateful), and the seed
MAX_EXAMPLES = int(os.environ.get("WEKNORA_FUZZ_EXAMPLES", "25"))
FUZZ_SEED = os.environ.get("WEKNORA_FUZZ_SEED")


@pytest.fixture
def served(runtime: LocalRuntime, services: Services) -> Iterator[Served]:  # noqa: F811
    ensure_local_tenant(services, API_KEY)
    if "operator_key" in {f.name for f in fields(services.settings)}:  # the admin routes are fuzzed too
        services.settings = replace(services.settings, operator_key=OPERATOR_KEY)
    # thousands of requests a minute: a fuzz of every route, not a test of the tenant's request limit
    services.settings = replace(services.settings, tenant_requests_per_second=0)
    base = runtime.serve_http("127.0.0.1", 0, access_log=False)
    try:
        yield Served(base)
    finally:
        runtime.stop_http()
