"""`GET /knowledge-bases/{id}/graph` stays under Lambda's 6 MB response (JSON, non-ASCII escaped): an entity
every document of a big knowledge base names lists every chunk and document naming it, and so may its 200
neighbours. Past its budget every node's and relation's lists keep their first GRAPH_LIST_CAP items, then
the last neighbours, then the last relations are left out; `truncated` says so."""

from __future__ import annotations

import json

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import GraphQuery
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import enrichment_outputs

HUB = "港口"


def _facts(deps: Services, kb: KnowledgeBase, documents: int, neighbours: int) -> None:
    for d in range(documents):
        chunk = f"doc{d}-a1-00000"
        entities = [(HUB, [f"属性{d}"], chunk)]
        entities += [(f"起重机{n}", [f"属性{d}"], chunk) for n in range(neighbours)]
        relations = [(HUB, "拥有", f"起重机{n}", chunk) for n in range(neighbours)]
        deps.graph.add(kb.id, f"doc{d}", entities, relations)


def test_a_graph_answer_within_its_budget_is_whole(deps: Services, kb: KnowledgeBase) -> None:
    _facts(deps, kb, documents=3, neighbours=4)
    answer = enrichment_outputs.graph(deps, kb.tenant_id, kb.id, GraphQuery(entity=HUB))
    assert answer["truncated"] is False and len(answer["relations"]) == len(answer["neighbours"]) == 4
    assert len(answer["entity"]["knowledge_ids"]) == 3


def test_past_its_budget_the_lists_are_cut_then_the_last_neighbours_go(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _facts(deps, kb, documents=12, neighbours=8)
    whole = enrichment_outputs.graph(deps, kb.tenant_id, kb.id, GraphQuery(entity=HUB))
    assert len(whole["entity"]["chunk_ids"]) == 12 and len(whole["neighbours"]) == 8
    monkeypatch.setattr(enrichment_outputs, "GRAPH_LIST_CAP", 2, raising=False)

    def capped(item: dict[str, object]) -> dict[str, object]:
        return {k: v[:2] if isinstance(v, list) and k != "name" else v for k, v in item.items()}

    three = {
        "entity": capped(whole["entity"]),
        "relations": [capped(r) for r in whole["relations"]],
        "neighbours": [capped(n) for n in whole["neighbours"][:3]],
        "truncated": True,
    }
    budget = len(json.dumps(three)) + 2
    monkeypatch.setattr(enrichment_outputs, "GRAPH_MAX_BYTES", budget, raising=False)

    cut = enrichment_outputs.graph(deps, kb.tenant_id, kb.id, GraphQuery(entity=HUB))
    assert cut == three and len(json.dumps(cut)) <= budget
