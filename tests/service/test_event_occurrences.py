"""One event per real change, none lost and none merged: a refreshed summary, a move (to both knowledge
bases' subscribers), a reparse; the README's event table and the webhook schema say what the code sends."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.events import EVENT_DETAIL_SCHEMA, EVENT_TYPES, Event
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.webhooks import CreateWebhookRequest
from chalicelib.services.dispatch import request_summary_refresh
from chalicelib.stages import enrichment, postprocess
from chalicelib.tasks.move_clone import move_one
from chalicelib.tasks.reparse import reparse

from .conftest import TEXT, drain, task_body, upload
from .test_events import run
from .test_move_clone import clone, completed, move, new_kb, run_lifecycle
from .test_webhooks import Receiver, drain_webhooks, hook_on

README = Path(__file__).resolve().parents[2] / "README.md"


def published(deps: Services) -> list[Event]:
    assert isinstance(deps.events, MemoryEventPublisher)
    return deps.events.published


def valid(event: Event) -> None:
    jsonschema.validate(dict(event.detail), EVENT_DETAIL_SCHEMA, cls=jsonschema.Draft202012Validator)


def test_a_refreshed_summary_is_a_second_event_and_its_webhook_is_posted_again(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook_on(deps, kb, "Summary Completed")
    knowledge = upload(deps, kb)
    drain(deps)
    run(deps, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    summary = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=summary))
    drain_webhooks(deps)
    assert len(receiver.posts) == 1

    row = deps.knowledge.get(knowledge.id)
    assert row is not None and request_summary_refresh(deps, row)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.deliver("enrichment", enrichment.handle, deps)
    drain_webhooks(deps)

    summaries = [e for e in published(deps) if e.type.value == "Summary Completed"]
    assert len(summaries) == 2  # same attempt, same status (and here the same text): two changes all the same
    assert len({e.event_id for e in summaries}) == 2
    assert len(receiver.posts) == 2


def test_a_move_announces_knowledge_moved_to_the_source_and_the_target_once(
    deps: Services, kb: KnowledgeBase, tenant: Tenant
) -> None:
    target = new_kb(deps, tenant, "target")
    hook_on(deps, kb, "Knowledge Moved")
    hook_on(deps, target, "Knowledge Moved")
    doc = completed(deps, kb, "tides.md", TEXT)
    before = len(published(deps))
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)

    moved = [e for e in published(deps)[before:] if e.type.value == "Knowledge Moved"]
    assert [e.kb_id for e in moved] == [kb.id, target.id]
    for event in moved:
        valid(event)
        assert event.detail["knowledge_id"] == doc.id and event.detail["status"] == "completed"
        assert (event.detail["from_kb_id"], event.detail["to_kb_id"]) == (kb.id, target.id)
        assert event.detail["task_id"] == task.id
    assert len({e.event_id for e in moved}) == 2
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    assert sorted(b["kb_id"] for b in queue.bodies("webhooks")) == sorted([kb.id, target.id])

    # a redelivery that finishes the item announces the same ids (a consumer and the webhooks drop them)
    stored = deps.tasks.get(task.id)
    assert stored is not None
    move_one(deps, stored, doc.id)
    again = [e for e in published(deps)[before:] if e.type.value == "Knowledge Moved"][2:]
    assert [e.event_id for e in again] == [e.event_id for e in moved]

    # moved back by another task: new ids
    back = len(published(deps))
    move(deps, target, kb, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    returned = [e for e in published(deps)[back:] if e.type.value == "Knowledge Moved"]
    assert len(returned) == 2 and not {e.event_id for e in returned} & {e.event_id for e in moved}


def test_a_reparse_is_announced_and_a_move_in_reparse_mode_announces_both(
    deps: Services, kb: KnowledgeBase, tenant: Tenant
) -> None:
    doc = completed(deps, kb, "tides.md", TEXT)
    before = len(published(deps))
    reparse(deps, tenant.id, doc.id, ReparseRequest())
    started = [e for e in published(deps)[before:] if e.detail["knowledge_id"] == doc.id]
    assert [e.type.value for e in started] == ["Knowledge Reparse Started"]
    valid(started[0])
    assert (started[0].detail["status"], started[0].detail["attempt"], started[0].kb_id) == (
        "pending",
        2,
        kb.id,
    )

    drain(deps)
    rows = deps.knowledge
    row = rows.get(doc.id)
    assert row is not None
    from chalicelib.adapters.memory import MemoryKnowledgeRepo

    assert isinstance(rows, MemoryKnowledgeRepo)
    rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
    target = new_kb(deps, tenant, "target")
    before = len(published(deps))
    move(deps, kb, target, [doc.id], "reparse")
    run_lifecycle(deps)
    about = [(e.type.value, e.kb_id) for e in published(deps)[before:] if e.detail["knowledge_id"] == doc.id]
    assert about[:3] == [
        ("Knowledge Moved", kb.id),
        ("Knowledge Moved", target.id),
        ("Knowledge Reparse Started", target.id),
    ]
    assert [t for t, _ in about].count("Knowledge Reparse Started") == 1


def _readme_statuses() -> dict[str, str]:
    """detail-type → the README event table's `status` cell (a row naming two types gives both)."""
    section = README.read_text(encoding="utf-8").split("### Events and webhooks", 1)[1]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name] = cells[2]
        elif rows and not line.startswith("|"):
            break
    return rows


def test_the_readme_table_lists_every_type_and_a_clones_created_status(
    deps: Services, kb: KnowledgeBase
) -> None:
    statuses = _readme_statuses()
    assert set(statuses) == set(EVENT_TYPES)
    completed(deps, kb, "a.md", TEXT)
    before = len(published(deps))
    clone(deps, kb, name="copy")
    run_lifecycle(deps)
    created = {e.detail["status"] for e in published(deps)[before:] if e.type.value == "Knowledge Created"}
    assert created
    for status in created:
        assert f"`{status}`" in statuses["Knowledge Created"]


def test_the_webhook_schema_lists_the_event_types_the_api_takes() -> None:
    import app as app_module
    from chalicelib.api.openapi import build_document

    schema = build_document(app_module.app)["components"]["schemas"]["CreateWebhookRequest"]
    assert schema["properties"]["event_types"]["items"]["enum"] == list(EVENT_TYPES)
    assert CreateWebhookRequest.model_json_schema()["properties"]["event_types"]["items"]["enum"] == list(
        EVENT_TYPES
    )
