"""Found by an audit of the plan and the chunking stage: an optional table summary's busy model does not
fail the plan (and with it an indexed document), the chunk limit names the sizes that apply, and image chunks
number after every text chunk a document may have."""

from __future__ import annotations

from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkingSettings, CreateKnowledgeBase
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import ModelThrottled, ModelUnavailable
from chalicelib.stages import postprocess
from chalicelib.stages.chunking import MAX_CHUNKS_PER_DOCUMENT
from chalicelib.stages.embedding import MAX_DESCRIBED_IMAGES
from chalicelib.stages.enrichment import SUMMARY_SEQ
from chalicelib.stages.multimodal import IMAGE_SEQ_BASE

from .conftest import chunked, drain, task_body, upload

CSV = ("name,qty,price\n" + "".join(f"item{i},{i},{i * 1.5}\n" for i in range(50))).encode()


@pytest.mark.parametrize("error", [ModelUnavailable("upstream down"), ModelThrottled("slow down")])
def test_a_busy_chat_model_skips_the_table_summary_and_the_plan_goes_on(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
    error: Exception,
) -> None:
    import chalicelib.enrich.tables as tables

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="t", summary_model_id=CHAT))
        knowledge = upload(deps, kb, "stock.csv", CSV)
        drain(deps)

        def busy(*_: Any, **__: Any) -> Any:
            raise error

        monkeypatch.setattr(tables, "summarise", busy)
        queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
        queue.deliver("postprocess", postprocess.handle, deps)
    # answered at once, not deferred past the state's timeout into a failure answer that fails the document
    assert not queue.waiting("postprocess")
    (answer,) = workflow.answers_to("plan-token")
    assert answer.succeeded


def test_the_chunk_limit_names_the_parent_child_sizes_when_they_apply(deps: Services, tenant: Tenant) -> None:
    settings = ChunkingSettings(chunk_size=7500, enable_parent_child=True, child_chunk_size=16)
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="pc", chunking_config=settings))
    text = "".join(f"Line {i} says the keeper trims the wick.\n" for i in range(5000))
    row = deps.knowledge.get(chunked(deps, kb, "notes.md", text).id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_message.endswith("use a larger child_chunk_size or parent_chunk_size")


def test_image_chunks_number_after_every_text_chunk_a_document_may_have() -> None:
    images = 2 * MAX_DESCRIBED_IMAGES  # an OCR and a caption chunk for each described image
    assert MAX_CHUNKS_PER_DOCUMENT <= IMAGE_SEQ_BASE and IMAGE_SEQ_BASE + images <= SUMMARY_SEQ
