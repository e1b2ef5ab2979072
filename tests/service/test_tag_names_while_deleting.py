"""A tag's name while the tag is being deleted (the in-memory adapters): the delete is a task (the tag is
marked deleting, its relations go, then the tag), and until it has finished the name is not free. A create
or a rename to it is a 409 saying the name is being released, never a conflict naming the deleted tag; once
the task has finished, the name makes a new tag."""

from __future__ import annotations

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, UpdateTagRequest
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import KnowledgeBase

from .test_move_clone import run_lifecycle


def test_a_name_whose_tag_is_being_deleted_is_a_409_until_the_delete_ends(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.tags import create_tag, delete_tag, list_tags, update_tag

    old = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    other = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Blue"))
    delete_tag(deps, kb.tenant_id, kb.id, old.id)  # its task has not run yet

    with pytest.raises(Conflict) as created:
        create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name=" red "))
    with pytest.raises(Conflict) as renamed:
        update_tag(deps, kb.tenant_id, kb.id, other.id, UpdateTagRequest(name="RED"))
    for raised in (created, renamed):
        assert raised.value.status == 409 and raised.value.code == "tag_name_being_released"
        assert old.id not in str(raised.value.data or "") and old.id not in raised.value.message
    assert [t.name for t in list_tags(deps, kb.tenant_id, kb.id)] == ["Blue"]

    run_lifecycle(deps)  # the delete ends
    new = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="red"))
    assert new.id != old.id and deps.tags.get(kb.id, old.id) is None
    assert [t.id for t in list_tags(deps, kb.tenant_id, kb.id)] == [other.id, new.id]
    with pytest.raises(Conflict) as taken:  # a live tag's name is still a plain duplicate
        update_tag(deps, kb.tenant_id, kb.id, other.id, UpdateTagRequest(name="Red"))
    assert taken.value.code == "duplicate_tag_name" and taken.value.data == {"id": new.id}
