"""An FAQ knowledge base whose embedding model or engine can no longer be served (the operator withdrew it from
WEKNORA_MODELS) answers its search as a document knowledge base does: 409 `knowledge_base_unusable`, through
the one rule (`services/usable.py`). Before, the FAQ search asked for the model directly, so the unknown model
escaped as a 500."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"


def _search(client: Client, key: str, kb_id: str, **options: Any) -> Any:
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    body = json.dumps({"query_text": "opening hours", **options}).encode()
    return client.http.request(
        "POST", f"{V1}/knowledge-bases/{kb_id}/hybrid-search", headers=headers, body=body
    )


@pytest.mark.parametrize("retriever", [None, "keyword", "vector"])
@pytest.mark.parametrize(
    "unusable",
    [{"embedding_model_id": "openai/withdrawn-model"}, {"retrieval_engine": "solr"}],
    ids=["model withdrawn", "engine unknown"],
)
def test_an_faq_search_on_an_unservable_knowledge_base_is_a_409_like_the_document_search(
    deps: Services, client: Client, retriever: str | None, unusable: dict[str, str]
) -> None:
    _tenant, key = create_tenant_with_key(deps, "faq-searcher")
    answers = {}
    for kind in ("document", "faq"):
        headers = {"X-API-Key": key, "Content-Type": "application/json"}
        created = client.http.post(
            f"{V1}/knowledge-bases",
            headers=headers,
            body=json.dumps({"name": kind, "type": kind}).encode(),
        )
        assert created.status_code == 201, created.json_body
        kb = deps.kbs.get(created.json_body["data"]["id"])
        assert kb is not None
        deps.kbs.put(replace(kb, **unusable))
        options = {} if retriever is None else {"retriever": retriever}
        answer = _search(client, key, kb.id, **options)
        answers[kind] = (answer.status_code, (answer.json_body.get("error") or {}).get("code"))
    assert answers["faq"] == answers["document"] == (409, "knowledge_base_unusable")
