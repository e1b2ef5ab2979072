"""The local stack as the benches that go through it start it: moto in server mode, the template
provisioned, the app's handlers behind the local pollers (driven by the caller: `drain` or
`start_workers`)."""

from __future__ import annotations

import atexit
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from chalicelib.ports import Dependencies, EmbeddingModel

ROOT = Path(__file__).resolve().parents[1]


def load_app() -> Any:
    import app

    return app.app


def start_local_stack(state_dir: Path, **options: Any) -> Any:
    """A started LocalRuntime (no retry delay) as `make run` has it: moto in a process of its own (AWS's
    services do not share the pipeline's cores either) and LOCAL_CONCURRENCY invocations per stage queue;
    `options` go to LocalRuntime."""
    from chalicelib.bootstrap import set_deps
    from chalicelib.local.cli import LOCAL_CONCURRENCY
    from chalicelib.local.runtime import LocalRuntime
    from chalicelib.settings import get_settings

    # a bench measures the pipeline, not the tenant's request limit (its uploads and polls come in bursts)
    os.environ.setdefault("WEKNORA_TENANT_REQUESTS_PER_SECOND", "0")
    runtime = LocalRuntime(
        load_app,
        ROOT / "infra" / "template.json",
        retry_delay_seconds=0,
        state_dir=state_dir,
        separate_moto_process=True,
        stage="local",
        project_dir=ROOT,
        **{"concurrency": LOCAL_CONCURRENCY, **options},
    )
    atexit.register(runtime.stop)
    runtime.start(background=False)
    get_settings.cache_clear()  # the runtime set the stack's environment: read the settings again
    set_deps(None)  # and build the adapters anew (another stack of this process had another endpoint)
    return runtime


@runtime_checkable
class _WarmsUp(Protocol):
    def warm_up(self) -> None: ...


def warmed_embedding_model(deps: Dependencies) -> EmbeddingModel:
    """The stack's default embedding model, loaded (with workers: the worker processes started), so the
    first timed call does not pay for it. The local stack's models (MiniLM, pooled or not) all have
    `warm_up`; the port does not, since a hosted model has nothing to load."""
    model = deps.embedding_model("")
    if not isinstance(model, _WarmsUp):
        raise TypeError(f"{type(model).__name__} has no warm_up(); the bench needs a local model")
    model.warm_up()
    return model


def new_tenant_kb(client: Any, name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """A fresh tenant's key headers and a knowledge base named `name`, made through the API (the Chalice
    test client of the started stack): each run's documents stand apart from earlier runs'."""
    import uuid

    from chalicelib.bootstrap import get_deps
    from chalicelib.operations.tenants import create_tenant_with_key

    _, key = create_tenant_with_key(get_deps(), f"bench-{uuid.uuid4().hex[:6]}")
    headers = {"X-API-Key": key}
    kb = client.http.post(
        "/api/v1/knowledge-bases",
        headers={**headers, "Content-Type": "application/json"},
        body=json.dumps({"name": name}),
    ).json_body["data"]
    return headers, kb
