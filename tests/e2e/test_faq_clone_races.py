"""An FAQ clone racing writers of its target, on the DynamoDB adapters (moto): an edit of a kept entry made
after the clone's plan is kept (the sync writes only over the row as the plan read it), and a target deleted
after the plan is left with no entry and no counted bytes (tests/service/test_faq_clone_target_races.py has
the other races on the fakes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import chalicelib.faq.clone as faq_clone
from chalicelib.bootstrap import Services
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryUpdate
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_faq import entry, task
from .test_faq_clone import _add


def _after_the_plan(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    real_plan = faq_clone.plan_faq_clone
    ran: list[bool] = []

    def plan_then(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        if not ran:
            ran.append(True)
            meanwhile()
        return plan

    monkeypatch.setattr(faq_clone, "plan_faq_clone", plan_then)


def _used(services: Services, tenant_id: str) -> int:
    tenant = services.tenants.get(tenant_id)
    assert tenant is not None
    return tenant.storage_used


def _clone(api: Api, runtime: LocalRuntime, source_id: str, target_id: str) -> dict[str, Any]:
    response = api.post(f"/knowledge-bases/{source_id}/clone", {"target_kb_id": target_id})
    assert response.status_code == 202, response.json_body
    runtime.drain(timeout=120)
    return task(api, response.json_body["data"]["task_id"])


def test_an_edit_made_after_the_plan_survives_the_sync(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    source, target = api.create_kb(type="faq"), api.create_kb(type="faq")
    _add(api, source["id"], entry("Where is the office?", "Main street 1.", tags=["hq"]))
    mine = _add(api, target["id"], entry("Where is the office?", "Main street 1."))
    edit = FaqEntryUpdate(answers=["Harbour road 42."], similar_questions=["office address"])
    _after_the_plan(
        monkeypatch,
        lambda: entries.update_entry(services, target["tenant_id"], target["id"], mine["id"], edit),
    )
    done = _clone(api, runtime, source["id"], target["id"])
    row = services.faq.get_entry(target["id"], mine["id"])
    assert row is not None and (row.answers, row.similar_questions) == (edit.answers, edit.similar_questions)
    assert done["status"] == "partial"
    counted = sum(e.counted_bytes for kb in (source, target) for e in entries.all_entries(services, kb["id"]))
    assert _used(services, target["tenant_id"]) == counted


def test_a_target_deleted_after_the_plan_keeps_no_copy(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    source, target = api.create_kb(type="faq"), api.create_kb(type="faq")
    for i in range(3):
        _add(api, source["id"], entry(f"How do I reset router {i}?", f"Hold button {i}.", tags=["net"]))
    before = _used(services, source["tenant_id"])

    def delete_target() -> None:
        lifecycle.run(services, delete_kb(services, target["tenant_id"], target["id"]).id)

    _after_the_plan(monkeypatch, delete_target)
    done = _clone(api, runtime, source["id"], target["id"])
    assert services.kbs.get(target["id"]) is None
    assert done["status"] == "partial" and faq_clone.TARGET_CLOSED in " ".join(done["errors"].values())
    assert list(entries.all_entries(services, target["id"])) == []
    assert services.faq.tags(target["id"]) == []
    assert _used(services, source["tenant_id"]) == before
