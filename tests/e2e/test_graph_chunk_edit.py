"""An edit of a chunk's text through the public path (PUT /knowledge/{id}/chunks/{chunk}) on moto: the graph
facts read from its old text leave the knowledge base's graph, the other chunks' stay, and the new text's are
read on the enrichment queue. The scripted model names a passage's capitalised words as its entities."""

from __future__ import annotations

import json
from typing import Any

from scripted_llm import CHAT, ScriptedLLM

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

EDITED = "The Keeper tends the Lamp at night, and every night the old keeper climbs the stairs slowly."
KEPT = "The Lamp lights the Quay for every ship that comes in late from the open sea after dark."
NEW = "The Ferry calls at the Quay each morning, and the crew unloads the mail and the bread."


def _graph(api: Api, kb_id: str, entity: str) -> dict[str, Any]:
    response = api.get(f"/knowledge-bases/{kb_id}/graph?entity={entity}")
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def _triples(found: dict[str, Any]) -> list[tuple[str, str, str]]:
    return sorted((r["source"], r["relation"], r["target"]) for r in found["relations"])


def test_an_edited_chunks_old_facts_leave_the_graph_and_its_new_ones_come(
    api: Api, runtime: LocalRuntime, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(
        summary_model_id=CHAT,
        chunking_config={"chunk_size": 120, "chunk_overlap": 0},
        indexing_strategy={"graph_enabled": True},
    )
    created = api.upload(kb["id"], "lamp.md", f"{EDITED}\n\n{KEPT}\n".encode()).json_body["data"]
    runtime.drain(timeout=300)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    chunks = api.get(f"/knowledge/{created['id']}/chunks?limit=10").json_body["data"]["items"]
    edited = next(c for c in chunks if "Keeper" in c["content"])
    kept = next(c for c in chunks if "Quay" in c["content"])
    assert edited["id"] != kept["id"]
    lamp = _graph(api, kb["id"], "Lamp")["entity"]
    assert lamp is not None and sorted(lamp["chunk_ids"]) == sorted([edited["id"], kept["id"]])

    response = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}/chunks/{edited['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps({"content": NEW}),
    )
    assert response.status_code == 200, response.json_body
    runtime.drain(timeout=300)

    assert _graph(api, kb["id"], "Keeper")["entity"] is None  # only the old text named it
    lamp_now = _graph(api, kb["id"], "Lamp")
    assert lamp_now["entity"] is not None and lamp_now["entity"]["chunk_ids"] == [kept["id"]]
    assert _triples(lamp_now) == [("Lamp", "related_to", "Quay")]  # the kept chunk's relation stays
    ferry = _graph(api, kb["id"], "Ferry")["entity"]
    assert ferry is not None and ferry["chunk_ids"] == [edited["id"]]
    quay = _graph(api, kb["id"], "Quay")
    assert quay["entity"] is not None and sorted(quay["entity"]["chunk_ids"]) == sorted(
        [edited["id"], kept["id"]]
    )
    assert _triples(quay) == [("Ferry", "related_to", "Quay"), ("Lamp", "related_to", "Quay")]
