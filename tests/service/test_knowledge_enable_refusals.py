"""Switching a document on or off (`PUT /knowledge/{id}` with `enable_status`) when the index says no.

On OpenSearch an entry deleted between the switch's scan and its update (a chunk deleted, a reparse) came
back as a failed `update` item: IndexWriteError, which the edit route did not answer, so a 500. Such an entry
is nothing to switch; a write the index does refuse is the chunk edit's 503 `index_refused`, without the
engine's words, and leaves the row as it was.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from opensearchpy import OpenSearch, Transport

from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import EnableStatus, Knowledge, ParseStatus
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import IndexWriteError

from .conftest import MAIN_STAGES, drain, upload


class _Vanished(Transport):
    """The scan still sees an entry that a concurrent delete removed before the update landed."""

    def perform_request(  # type: ignore[override]
        self, method: str, url: str, params: Any = None, body: Any = None, **_: Any
    ) -> Any:
        if method == "HEAD":
            return True
        if url.endswith("/_search"):
            return {"hits": {"hits": [{"_id": "c1", "_source": {"is_enabled": True}, "sort": ["c1"]}]}}
        assert url.endswith("/_bulk"), url
        missing = {"type": "document_missing_exception", "reason": "[c1]: document missing"}
        return {"errors": True, "items": [{"update": {"_id": "c1", "status": 404, "error": missing}}]}


def _completed(deps: Services) -> tuple[str, Knowledge]:
    from chalicelib.operations.knowledge_bases import create_kb

    tenant, secret = create_tenant_with_key(deps, "acme")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="handbook"))
    created = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    return secret, row


def _disable(deps: Services, secret: str, knowledge: Knowledge) -> tuple[int, dict[str, Any]]:
    from chalicelib.api import routes

    request = SimpleNamespace(
        headers={"x-api-key": secret},
        raw_body=json.dumps({"enable_status": "disabled"}).encode(),
        method="PUT",
        uri_params={"knowledge_id": knowledge.id},
    )
    response = routes.edit_knowledge(deps, request, knowledge.id)  # type: ignore[arg-type]
    answer = response.body if isinstance(response.body, dict) else json.loads(response.body)
    return response.status_code, answer


def test_disabling_a_document_whose_entry_vanished_meanwhile_succeeds(deps: Services) -> None:
    secret, knowledge = _completed(deps)
    name = deps.settings.retrieval_engine
    embedded = deps.engine(name)
    client = OpenSearch(hosts=[{"host": "example.invalid", "port": 9200}], transport_class=_Vanished)
    deps._engines[name] = OpenSearchEngine(client)
    try:
        status, answer = _disable(deps, secret, knowledge)
    finally:
        deps._engines[name] = embedded
    assert status == 200, answer
    assert answer["data"]["enable_status"] == EnableStatus.DISABLED.value
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.enable_status == EnableStatus.DISABLED


def test_a_switch_the_index_refuses_is_a_503_and_changes_nothing(
    deps: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret, knowledge = _completed(deps)
    engine = deps.engine(deps.settings.retrieval_engine)

    def refuse(*_: Any) -> int:  # as OpenSearchEngine._bulk raises it for a refused update
        raise IndexWriteError("bulk: 1 of 1 actions failed; first update c1: 400 SERVER-SAID mapper_parsing")

    monkeypatch.setattr(engine, "set_enabled", refuse)
    status, answer = _disable(deps, secret, knowledge)
    assert (status, answer["error"]["code"]) == (503, "index_refused")
    assert "SERVER-SAID" not in json.dumps(answer)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED  # a retry switches again
