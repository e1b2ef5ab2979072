"""A model reply whose JSON spells a lone surrogate (`\\ud83d`: a server cut an emoji's UTF-16 pair) ends in a
stored result, through the real adapter and the scripted server's wire format. It passed every cleaner and
raised UnicodeEncodeError at the first store: a data table's summary failed the plan task (the state machine
then fails the document), a caption took the image's good OCR text down with it after four paid tries, and
a summary, questions or graph subtask failed after four paid calls each."""

from __future__ import annotations

import json
from typing import Any

import pytest
from scripted_llm import CHAT, VISION, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, KnowledgeBase, SummaryStatus, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.stages import multimodal, postprocess

from .conftest import drain, task_body, upload
from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401
from .test_multimodal_active_content import _described
from .test_table_summary_once import CSV

#: the first half of an emoji's surrogate pair: the scripted server's JSON spells it `\ud83d`
LONE = "\ud83d"


class LoneTable(ScriptedLLM):
    def _table(self, system: str, user: str, body: dict[str, Any]) -> str:
        # the reply's JSON holds the character itself: the wire's JSON escapes it as the server's would
        return json.dumps(
            {"description": f"Stock list {LONE} of the shop.", "columns": []}, ensure_ascii=False
        )


class EscapingTable(ScriptedLLM):
    def _table(self, system: str, user: str, body: dict[str, Any]) -> str:
        # json.dumps writes the surrogate as `\ud83d`: the model spelled it in its own JSON (six plain
        # characters to the adapter, a lone surrogate once the reply's JSON is read)
        return json.dumps({"description": f"Stock list {LONE} of the shop.", "columns": []})


@pytest.mark.parametrize("replying", [LoneTable, EscapingTable])
def test_a_table_summary_with_a_lone_surrogate_is_stored_and_the_plan_is_made(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    replying: type[ScriptedLLM],
) -> None:
    with replying() as scripted:
        use_models(deps, scripted)
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="t", summary_model_id=CHAT))
        knowledge = upload(deps, kb, "stock.csv", CSV)
        drain(deps)
        queue.send_raw("postprocess", task_body(knowledge, "plan"))
        for _ in range(5):
            if not queue.waiting("postprocess"):
                break
            queue.deliver("postprocess", postprocess.handle, deps)
        assert scripted.kinds().count("table") == 1
    [answer] = workflow.answers_to("plan")
    assert answer.succeeded
    [summary] = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TABLE_SUMMARY]
    assert "Stock list \ufffd of the shop." in summary.content


class LoneCaption(ScriptedLLM):
    def _caption(self, system: str, user: str, body: dict[str, Any]) -> str:
        return f"A ferry at the quay {LONE} under an orange sky."


class _Ocr:
    name = "scripted-ocr"

    def recognize(self, data: bytes, languages: object = None) -> str:
        return "Harbour notice: the ferry leaves at dusk."

    def with_languages(self, languages: object) -> _Ocr:
        return self


def test_a_caption_with_a_lone_surrogate_is_stored_with_the_images_ocr_text(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with LoneCaption() as scripted:
        use_models(deps, scripted)
        monkeypatch.setattr(deps, "ocr", lambda: _Ocr())
        texts = _described(deps, kb, files, queue, monkeypatch, vlm=VISION, ocr_engine="tesseract")
        for _ in range(5):  # a failed delivery comes back: each one a paid call
            if not queue.waiting("multimodal"):
                break
            queue.deliver("multimodal", multimodal.handle, deps)
        assert scripted.kinds().count("caption") == 1
    assert (
        " ".join(texts[ChunkType.IMAGE_CAPTION].split()) == "A ferry at the quay \ufffd under an orange sky."
    )
    assert texts[ChunkType.IMAGE_OCR] == "Harbour notice: the ferry leaves at dusk."


def test_a_summary_with_a_lone_surrogate_is_stored(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    llm.replies["summary"] = f"The keeper logs weather at dawn and dusk {LONE}. Fog horns sound twice."
    assert run_subtask(deps, knowledge, "s", planned_subtask("summary")) == []
    assert llm.kinds().count("summary") == 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    [summary] = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.SUMMARY]
    assert "dusk \ufffd. Fog horns" in summary.content


def test_questions_with_a_lone_surrogate_are_stored(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    llm.replies["questions"] = (
        f"1. When does the keeper log the weather {LONE}?\n2. How often does the horn sound?"
    )
    assert run_subtask(deps, knowledge, "q", planned_subtask("questions.0")) == []
    assert llm.kinds().count("questions") == 1
    chunks = deps.chunks.list(knowledge.id)
    asked = [q for c in chunks if c.chunk_type == ChunkType.TEXT for q in c.metadata.get("questions") or []]
    assert any("weather \ufffd?" in str(q) for q in asked), asked


def test_a_graph_with_a_lone_surrogate_is_stored(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    items = [
        {"passage": 1, "entity": f"Keeper {LONE}", "entity_attributes": ["logs"]},
        {"passage": 1, "entity": "Harbour", "entity_attributes": ["fog"]},
    ]
    llm.replies["graph"] = json.dumps(items, ensure_ascii=False)  # the wire's JSON escapes the surrogate
    assert run_subtask(deps, knowledge, "g", planned_subtask("graph.0")) == []
    assert llm.kinds().count("graph") == 1
    assert deps.graph.neighbourhood(kb.id, "Keeper \ufffd").entity is not None
