"""A model whose JSON reply spells a lone surrogate itself (`"Keeper \\ud83d"` written by the model: six plain
characters to the adapter, a lone surrogate once the reply's JSON is read) ends in a stored result: the
table summary is stored and the plan made, the graph's entity stored, each with one paid call. Before,
the first store raised UnicodeEncodeError: the plan task failed (and with it the document), the graph
subtask failed after four paid calls."""

from __future__ import annotations

import json
from typing import Any

from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.stages import postprocess

from .conftest import drain, task_body, upload
from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401
from .test_table_summary_once import CSV

LONE = "\ud83d"


class EscapingTable(ScriptedLLM):
    def _table(self, system: str, user: str, body: dict[str, Any]) -> str:
        # json.dumps writes the surrogate as `\ud83d`: the model spelled it in its own JSON
        return json.dumps({"description": f"Stock list {LONE} of the shop.", "columns": []})


def test_a_table_reply_whose_json_spells_a_lone_surrogate(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    with EscapingTable() as scripted:
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


def test_a_graph_reply_whose_json_spells_a_lone_surrogate(
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
    llm.replies["graph"] = json.dumps(items)  # the model's own JSON holds the escape
    assert run_subtask(deps, knowledge, "g", planned_subtask("graph.0")) == []
    assert llm.kinds().count("graph") == 1
    assert deps.graph.neighbourhood(kb.id, "Keeper \ufffd").entity is not None
