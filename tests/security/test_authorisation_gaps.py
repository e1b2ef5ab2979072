"""Authorisation gaps an audit found, each through the public path: what a key may not reach answers as a
missing id does, whatever state the id is in."""

from __future__ import annotations

import json
import uuid

from e2e.conftest import Api

from chalicelib.bootstrap import Services
from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.local.runtime import LocalRuntime


def _limited_key(services: Services, tenant_id: str, kb_ids: tuple[str, ...]) -> str:
    record, secret = ApiKey.issue(tenant_id, f"limited-{uuid.uuid4().hex[:6]}", Scope.ADMIN, kb_ids)
    services.api_keys.put(record)
    return secret


def test_a_pending_upload_of_another_knowledge_base_is_not_found_to_a_limited_key(
    api: Api, services: Services
) -> None:
    """A presigned upload not yet arrived answers `upload_pending` to its tenant; a key limited to another
    knowledge base of the same tenant gets the 404 a missing id gets (the upload's existence, and the
    reason it was rejected, are the other knowledge base's)."""
    elsewhere, own = api.create_kb(), api.create_kb()
    granted = api.post(f"/knowledge-bases/{elsewhere['id']}/knowledge/upload-url", {"file_name": "x.md"})
    assert granted.status_code == 201, granted.json_body
    knowledge_id = granted.json_body["data"]["knowledge_id"]
    pending = api.get(f"/knowledge/{knowledge_id}")
    assert (pending.status_code, pending.json_body["error"]["code"]) == (404, "upload_pending")

    limited = Api(api.client, _limited_key(services, elsewhere["tenant_id"], (own["id"],)))
    answer = limited.get(f"/knowledge/{knowledge_id}")
    assert (answer.status_code, answer.json_body["error"]["code"]) == (404, "knowledge_not_found")
    # the knowledge base it names is still reachable to a key that covers it
    covering = Api(api.client, _limited_key(services, elsewhere["tenant_id"], (elsewhere["id"],)))
    assert covering.get(f"/knowledge/{knowledge_id}").json_body["error"]["code"] == "upload_pending"


def test_a_clone_task_is_not_found_to_a_key_limited_to_its_target_alone(api: Api, services: Services) -> None:
    """A move's or a clone's task is kept under its target, and its params and errors name the source's
    knowledge base and documents: a key limited to the target read them (a key that could not have started
    it). It answers as a missing task; a key that covers both, or the tenant's, reads it."""
    source, target = api.create_kb(), api.create_kb()
    cloned = api.post(f"/knowledge-bases/{source['id']}/clone", {"target_kb_id": target["id"]})
    assert cloned.status_code == 202, cloned.json_body
    task_id = cloned.json_body["data"]["task_id"]
    assert api.get(f"/tasks/{task_id}").status_code == 200
    tenant_id = source["tenant_id"]
    target_only = Api(api.client, _limited_key(services, tenant_id, (target["id"],)))
    answer = target_only.get(f"/tasks/{task_id}")
    assert (answer.status_code, answer.json_body["error"]["code"]) == (404, "task_not_found")
    both = Api(api.client, _limited_key(services, tenant_id, (source["id"], target["id"])))
    assert both.get(f"/tasks/{task_id}").status_code == 200


def test_a_copys_spans_do_not_name_its_source_document(
    api: Api, services: Services, runtime: LocalRuntime
) -> None:
    """A clone's copies are read by keys of the target knowledge base: their spans named the source document
    (`cloned from knowledge <id>`, `cloned_from`) that such a key may not see (a review found it)."""
    source, target = api.create_kb(), api.create_kb()
    up = api.upload(source["id"], "tides.md", b"# Tides\n\nSpring tides follow the full and the new moon.\n")
    assert up.status_code in (200, 201, 202), up.json_body
    source_doc = up.json_body["data"]["id"]
    runtime.drain(timeout=120)
    cloned = api.post(f"/knowledge-bases/{source['id']}/clone", {"target_kb_id": target["id"]})
    assert cloned.status_code == 202, cloned.json_body
    runtime.drain(timeout=180)
    target_only = Api(api.client, _limited_key(services, source["tenant_id"], (target["id"],)))
    listed = target_only.get(f"/knowledge-bases/{target['id']}/knowledge").json_body["data"]
    copies = listed if isinstance(listed, list) else next(v for v in listed.values() if isinstance(v, list))
    (copy,) = copies
    trace = target_only.get(f"/knowledge/{copy['id']}/spans").json_body["data"]["trace"]
    assert trace and source_doc not in json.dumps(trace)
