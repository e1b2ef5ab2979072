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


def test_a_null_setting_leaves_it_as_it_is(deps: Services, tenant: Tenant) -> None:
    """`{"ocr_languages": null}` was a 500 (schemathesis, WEKNORA_FUZZ_SEED=3), and a null str setting was
    stored as None where the code reads a str."""
    from chalicelib.operations.knowledge_bases import update_kb

    kb = new_kb(deps, tenant, "nulls")
    set_up = UpdateKnowledgeBase(ocr_languages=["kor"], asr_language="ko", spreadsheet_layout="rows")
    update_kb(deps, tenant.id, kb.id, set_up)
    nulls = {
        name: None
        for name in (
            "ocr_languages",
            "asr_language",
            "spreadsheet_layout",
            "storage_backend",
            "summary_model_id",
        )
    }
    changed, task = update_kb(deps, tenant.id, kb.id, UpdateKnowledgeBase.model_validate(nulls))
    assert task is None
    assert (changed.ocr_languages, changed.asr_language, changed.spreadsheet_layout) == (
        ["kor"],
        "ko",
        "rows",
    )
    assert (changed.storage_backend, changed.summary_model_id) == ("", "")
    stored = deps.kbs.get(kb.id)
    assert stored is not None and stored.ocr_languages == ["kor"] and stored.spreadsheet_layout == "rows"
