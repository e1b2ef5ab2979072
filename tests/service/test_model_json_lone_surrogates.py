"""A model whose JSON reply spells a lone surrogate itself (`"Keeper \\ud83d"` written by the model: six plain
characters to the adapter, a lone surrogate once the reply's JSON is read) ends in a stored result: the
graph's entity is stored with one paid call (a table reply that does the same: test_model_reply_lone_surrogates).
Before, the first store raised UnicodeEncodeError: the graph subtask failed after four paid calls."""

from __future__ import annotations

import json

from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import Tenant

from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401

LONE = "\ud83d"


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
