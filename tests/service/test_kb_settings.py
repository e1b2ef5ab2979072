"""Issue 24: `PUT /knowledge-bases/{id}` with `apply_to: reparse` on the in-memory adapters, through the
lifecycle queue's real handler."""

from __future__ import annotations

from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkingSettings, UpdateKnowledgeBase
from chalicelib.domain.types import TaskStatus, Tenant

from .conftest import drain, upload
from .test_move_clone import CRANES, TIDES, completed, new_kb, run_lifecycle


def test_a_reparse_takes_the_documents_there_at_the_change_and_not_those_uploaded_after(
    deps: Services, tenant: Tenant
) -> None:
    from chalicelib.operations.knowledge_bases import update_kb

    kb = new_kb(deps, tenant, "harbour")
    before = completed(deps, kb, "tides.md", TIDES)
    body = UpdateKnowledgeBase(
        chunking_config=ChunkingSettings(chunk_size=120, chunk_overlap=0), apply_to="reparse"
    )
    changed, task = update_kb(deps, tenant.id, kb.id, body)
    assert task is not None and changed.chunking_config.chunk_size == 120
    after = upload(deps, changed, "cranes.md", CRANES)  # already parsed with the new settings
    drain(deps)
    run_lifecycle(deps)
    drain(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED and done.items == [before.id]
    assert deps.knowledge.get(before.id).attempt == 2  # type: ignore[union-attr]
    assert deps.knowledge.get(after.id).attempt == 1  # type: ignore[union-attr]
