"""Move knowledge between knowledge bases, and clone a knowledge base (spec §1.25): the request side.

A request checks what it can up front (tenant, knowledge bases, compatibility: 400 before any work; a
re-embed of either knowledge base under way: 409, and one whose task died is settled, not waited for),
records a durable task and queues it; the lifecycle worker (`tasks/move_clone.py`, `tasks/clone.py`) does
the work item by item, and checks compatibility again there.
"""

from __future__ import annotations

import copy
import uuid
from dataclasses import replace
from typing import Any

from chalicelib.commands import CloneKnowledgeBaseRequest, MoveKnowledgeRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.types import KnowledgeBase, Task, TaskKind, utcnow
from chalicelib.operations.knowledge_bases import require_room_for_a_kb
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import require_kb, require_whole_tenant
from chalicelib.tasks import new_task, start_task
from chalicelib.tasks.move_clone import check_compatible
from chalicelib.tasks.reembed import settle_dead_reembed


def move(deps: Dependencies, tenant_id: str, request: MoveKnowledgeRequest) -> Task:
    source = settle_dead_reembed(deps, require_kb(deps, tenant_id, request.source_kb_id))
    target = settle_dead_reembed(deps, require_kb(deps, tenant_id, request.target_kb_id))
    check_compatible(deps, source, target, same_engine=request.mode == "reuse_vectors")
    ids = list(dict.fromkeys(request.ids))
    from_backends: dict[str, str] = {}
    attempts: dict[str, int] = {}  # what a move overtaken by a later one carries on (tasks/move_clone.py)
    for knowledge_id in ids:  # every id must name a row of this tenant in the source: all or nothing
        row = deps.knowledge.get(knowledge_id)
        if row is None or row.tenant_id != tenant_id or row.kb_id != source.id:
            raise NotFound(
                f"knowledge {knowledge_id} not found in knowledge base {source.id}",
                code="knowledge_not_found",
            )
        attempts[row.id] = row.attempt
        if row.storage_backend != target.storage_backend:  # its objects follow it (tasks/move_across.py)
            from_backends[row.id] = row.storage_backend
    task = new_task(
        tenant_id,
        TaskKind.MOVE,
        target.id,
        ids,
        source_kb_id=source.id,
        mode=request.mode,
        # no tag names: each item reads its document's as it runs (tasks/move_clone.py `_keep_tag_names`);
        # every document's in the task's one item was over DynamoDB's 400 KB for well-tagged documents
        from_backends=from_backends,
        attempts=attempts,
    )
    return start_task(deps, task)


def clone_kb(
    deps: Dependencies, tenant_id: str, kb_id: str, request: CloneKnowledgeBaseRequest
) -> dict[str, Any]:
    source = settle_dead_reembed(deps, require_kb(deps, tenant_id, kb_id))
    if request.target_kb_id is not None:
        if request.name is not None:
            raise BadRequest("give either target_kb_id or name, not both", code="invalid_body")
        target = settle_dead_reembed(deps, require_kb(deps, tenant_id, request.target_kb_id))
        check_compatible(deps, source, target, same_engine=True)
    else:
        require_whole_tenant()  # a new knowledge base, which a key limited to some would not reach
        name = request.name or f"{source.name} (copy)"
        if deps.kbs.by_name(tenant_id, name) is not None:
            raise Conflict(f"a knowledge base named {name!r} exists", code="duplicate_kb_name")
        target = _new_kb_like(source, name)
        check_compatible(deps, source, target, same_engine=True)  # the source must not be re-embedding
        require_room_for_a_kb(deps, tenant_id)
        deps.kbs.put(target)
    task = start_task(deps, new_task(tenant_id, TaskKind.CLONE_KB, target.id, [], source_kb_id=source.id))
    return {"task_id": task.id, "target_kb_id": target.id}


def _new_kb_like(source: KnowledgeBase, name: str) -> KnowledgeBase:
    """A new knowledge base with the source's settings and none of its runtime state: no re-embed under way
    (that is the source's task), a version of its own, active, created now."""
    now = utcnow()
    return replace(
        copy.deepcopy(source),
        id=str(uuid.uuid4()),
        name=name,
        reembed_to={},
        version=0,
        status="active",
        created_at=now,
        updated_at=now,
    )
