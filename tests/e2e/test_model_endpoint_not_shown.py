"""The operator's model endpoint never reaches a tenant: a knowledge base names a catalog entry
("remote-embed"), whose spec carries the operator's host, port and parameters
(`openai/internal-emb@http://127.0.0.1:PORT/v1#dim=8`); the spans a tenant reads show the model only.
(Found by a review: the embedding stage's outputs carried the whole spec.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from scripted_llm import EMBEDDING_DIM, ScriptedLLM

from chalicelib.domain.metering import shown_model_id


@pytest.fixture
def remote_embedding(services: Any) -> Iterator[ScriptedLLM]:
    from chalicelib.settings import ModelCatalog

    with ScriptedLLM() as server:
        models = services.settings.models
        entries = {kind: dict(offered) for kind, offered in models.catalog.entries.items()}
        spec = f"openai/internal-emb@{server.base_url}#dim={EMBEDDING_DIM}"
        entries.setdefault("embedding", {})["remote-embed"] = spec
        services.settings = replace(services.settings, models=replace(models, catalog=ModelCatalog(entries)))
        services.models = None  # the registry is rebuilt with the new catalog (and its allowed hosts)
        yield server


def test_a_spec_shows_its_provider_and_model_only() -> None:
    assert shown_model_id("openai/internal-emb@http://10.0.0.5:8080/v1#dim=8") == "openai/internal-emb"
    assert shown_model_id("local/minilm") == "local/minilm"


def test_spans_do_not_show_the_operators_model_endpoint(
    api: Any, runtime: Any, remote_embedding: Any
) -> None:
    kb = api.create_kb(embedding_model_id="remote-embed")
    up = api.upload(kb["id"], "note.md", b"# Note\n\nSome text about harbours and ships.\n")
    assert up.status_code == 200, up.json_body
    knowledge_id = up.json_body["data"]["id"]
    runtime.drain(timeout=180)
    assert api.knowledge(knowledge_id)["parse_status"] == "completed"
    spans = api.get(f"/knowledge/{knowledge_id}/spans")
    assert spans.status_code == 200
    text = json.dumps(spans.json_body)
    assert '"model": "openai/internal-emb"' in text  # the embedding stage's outputs still name the model
    host = remote_embedding.base_url.split("//", 1)[1].split("/", 1)[0]
    assert host not in text and "#dim=" not in text
