"""The knowledge graph's names, relations and attributes are the model's words, shown as written (the graph
API, the console): their active HTML (scripts, event handlers, script URLs) goes before they are stored, as
for every other text a model writes (`domain.markup`). A name that was only active HTML is no name: neither
its entity nor a relation naming it is stored. A name is cleaned before it is keyed, so one that differs from
another only by active markup is the same entity. They were stored as the model wrote them."""

from __future__ import annotations

import json

from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import Tenant
from chalicelib.enrich.graph import parse
from chalicelib.ports import GraphNeighbourhood

from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401

SCRIPT = "<script>alert(2)</script>"
IMG = '<img src="x" onerror="alert(1)">'
LINK = '<a href="javascript:alert(3)">site</a>'


def _inert(text: str) -> bool:
    return all(bad not in text.lower() for bad in ("onerror", "<script", "alert(", "javascript:"))


def _shown(found: GraphNeighbourhood) -> list[str]:
    """Every text of a neighbourhood that the API shows."""
    nodes = [n for n in [found.entity, *found.neighbours] if n is not None]
    return [*(n.name for n in nodes), *(a for n in nodes for a in n.attributes)] + [
        text for e in found.edges for text in (e.source, e.relation, e.target)
    ]


def test_the_graph_keeps_none_of_the_models_active_html(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    llm.replies["graph"] = json.dumps(
        [
            {"passage": 1, "entity": f"Keeper{SCRIPT}", "entity_attributes": [f"trims wicks {IMG}", SCRIPT]},
            {"passage": 1, "entity": "Keeper", "entity_attributes": [f"see the {LINK}"]},
            {"passage": 1, "entity": f"Lamp{SCRIPT}", "entity_attributes": "bright"},
            {"passage": 1, "entity": f"{IMG}Horn", "entity_attributes": f"{LINK} loud"},
            {"passage": 1, "entity": SCRIPT, "entity_attributes": ["nothing else"]},
            {"passage": 1, "entity1": "Keeper", "entity2": f"Lamp{SCRIPT}", "relation": f"trims{SCRIPT}"},
            {"passage": 1, "entity1": "Keeper", "entity2": SCRIPT, "relation": "fears"},
            {"passage": 1, "entity1": "Keeper", "entity2": "Lamp", "relation": SCRIPT},
        ]
    )
    assert run_subtask(deps, knowledge, "g", planned_subtask("graph.0")) == []
    keeper = deps.graph.neighbourhood(kb.id, "Keeper")
    assert keeper.entity is not None and keeper.entity.name == "Keeper"
    assert "trims wicks" in " ".join(keeper.entity.attributes)
    assert [(e.source, e.relation, e.target) for e in keeper.edges] == [("Keeper", "trims", "Lamp")]
    assert [n.name for n in keeper.neighbours] == ["Lamp"]
    horn = deps.graph.neighbourhood(kb.id, '<img src="x">Horn')
    assert horn.entity is not None and horn.entity.attributes == ["<a>site</a> loud"]
    texts = _shown(keeper) + _shown(horn)
    assert texts and all(_inert(t) for t in texts), texts
    assert all(t.strip() for t in texts)  # nothing stored empty
    assert deps.graph.neighbourhood(kb.id, SCRIPT).entity is None
    assert deps.graph.neighbourhood(kb.id, "").entity is None


def test_a_name_that_is_only_active_html_is_left_out() -> None:
    reply = json.dumps(
        [
            {"passage": 1, "entity": SCRIPT},
            {"passage": 1, "entity": "Lamp", "entity_attributes": [SCRIPT, "bright"]},
            {"passage": 1, "entity1": "Lamp", "entity2": f" {SCRIPT} ", "relation": "lights"},
            {"passage": 1, "entity1": "Lamp", "entity2": "Keeper", "relation": f"<script>x</script>{SCRIPT}"},
        ]
    )
    [found] = parse(reply, 1, [])
    assert [(e.name, e.attributes) for e in found.entities] == [("Lamp", ["bright"])]
    assert found.relations == []
