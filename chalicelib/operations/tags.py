"""Tags of a knowledge base: create, rename, delete (a durable task that removes the tag from its knowledge
first), list. A document's tags and their relations: services/tagging.py.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from chalicelib.commands import CreateTagRequest, UpdateTagRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.tags import MAX_TAGS_PER_KB, Tag, TagCapReached, TagNameTaken
from chalicelib.domain.types import Task, TaskKind, utcnow
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import require_kb
from chalicelib.services.tagging import DELETING
from chalicelib.tasks import new_task, start_task

#: a delete mark (the tag's `updated_at` when it was marked) older than this is taken for a delete that died
#: (its task never started, or failed): the next create or rename to the name starts the delete again.
#: Longer than a lifecycle delivery runs (15 min); a redrive of a delete still running only repeats its work.
DELETE_MARK_STALE = timedelta(minutes=20)


def _name_taken(deps: Dependencies, kb_id: str, error: TagNameTaken) -> Conflict:
    """A live tag's name: 409 `duplicate_tag_name` with its id. The name of a tag being deleted stays taken
    until its delete task has finished (the task then deletes the tag and its name): 409
    `tag_name_being_released`, naming no tag (the deleted one is nothing to read, rename or assign). A mark
    left by a delete that died is redriven here, so the name is freed soon after."""
    holder = deps.tags.get(kb_id, error.existing_id)
    if holder is None or holder.status == DELETING:  # (None: its delete ended just now)
        if holder is not None and utcnow() - holder.updated_at > DELETE_MARK_STALE:
            _start_delete(deps, holder)
        return Conflict(
            "a tag of that name is being deleted; its name is free once the delete has finished",
            code="tag_name_being_released",
        )
    return Conflict(
        f"a tag of that name already exists ({error.existing_id})",
        code="duplicate_tag_name",
        data={"id": error.existing_id},
    )


def create_tag(deps: Dependencies, tenant_id: str, kb_id: str, request: CreateTagRequest) -> Tag:
    kb = require_kb(deps, tenant_id, kb_id)
    tag = Tag(id=str(uuid.uuid4()), tenant_id=tenant_id, kb_id=kb.id, name=request.name, color=request.color)
    try:
        deps.tags.create(tag, MAX_TAGS_PER_KB)
    except TagNameTaken as error:
        raise _name_taken(deps, kb.id, error) from None
    except TagCapReached:
        raise BadRequest(
            f"a knowledge base holds at most {MAX_TAGS_PER_KB} tags", code="too_many_tags"
        ) from None
    return tag


def list_tags(deps: Dependencies, tenant_id: str, kb_id: str) -> list[Tag]:
    kb = require_kb(deps, tenant_id, kb_id)
    return [t for t in deps.tags.list_kb(kb.id) if t.status != DELETING]


def get_tag(deps: Dependencies, tenant_id: str, kb_id: str, tag_id: str) -> Tag:
    kb = require_kb(deps, tenant_id, kb_id)
    tag = deps.tags.get(kb.id, tag_id)
    if tag is None or tag.tenant_id != kb.tenant_id or tag.status == DELETING:
        raise NotFound(f"tag {tag_id} not found", code="tag_not_found")
    return tag


def update_tag(deps: Dependencies, tenant_id: str, kb_id: str, tag_id: str, request: UpdateTagRequest) -> Tag:
    get_tag(deps, tenant_id, kb_id, tag_id)
    try:
        updated = deps.tags.update(kb_id, tag_id, name=request.name, color=request.color)
    except TagNameTaken as error:
        raise _name_taken(deps, kb_id, error) from None
    if updated is None:
        raise NotFound(f"tag {tag_id} not found", code="tag_not_found")
    return updated


def delete_tag(deps: Dependencies, tenant_id: str, kb_id: str, tag_id: str) -> Task:
    """The tag disappears at once (lists, new assignments); the task takes it off its knowledge, then
    deletes it. A tag already marked is deleted again (a delete that failed after its mark is retried: the
    work is idempotent, a second task of a delete still running only repeats it)."""
    kb = require_kb(deps, tenant_id, kb_id)
    tag = deps.tags.get(kb.id, tag_id)
    if tag is None or tag.tenant_id != kb.tenant_id:
        raise NotFound(f"tag {tag_id} not found", code="tag_not_found")
    return _start_delete(deps, tag)


def _start_delete(deps: Dependencies, tag: Tag) -> Task:
    """Marks the tag deleting (again: a fresh mark, so a redrive is not repeated at once) and starts its
    delete task."""
    deps.tags.update(tag.kb_id, tag.id, status=DELETING)
    return start_task(deps, new_task(tag.tenant_id, TaskKind.DELETE_TAG, tag.kb_id, [], tag_id=tag.id))


# ---------------------------------------------------------------- a document's tags
