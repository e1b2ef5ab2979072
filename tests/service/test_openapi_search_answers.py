"""The search operation's OpenAPI entry says what the route answers: each refusal it gives (a knowledge base
being deleted or no longer servable, the index or the embedding model down or refusing) is driven through
the HTTP API and its code must be in the document's response for that status, and the hits of a real search
(a document knowledge base's and an FAQ one's) must match the documented hit schema field for field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import jsonschema
import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import IndexUnavailable, ModelUnavailable
from chalicelib.ports.index import IndexRefused
from chalicelib.ports.models import ModelAuthError

from .conftest import drain

V1 = "/api/v1"
SEARCH = "/knowledge-bases/{kb_id}/hybrid-search"
TEXT = "# Harbour\n\nThe harbour lamp is lit at dusk by the keeper, who trims its wick each morning.\n"


class Caller:
    def __init__(self, deps: Services, client: Client) -> None:
        self.deps, self.client = deps, client
        _tenant, self.key = create_tenant_with_key(deps, "searcher")

    def send(self, method: str, path: str, body: Any = None) -> Any:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        data = b"" if body is None else json.dumps(body).encode()
        return self.client.http.request(method, V1 + path, headers=headers, body=data)

    def created(self, path: str, body: Any) -> str:
        answer = self.send("POST", path, body)
        assert answer.status_code < 300, answer.json_body
        return str(answer.json_body["data"]["id"])

    def search(self, kb_id: str, query: str, **options: Any) -> Any:
        return self.send("POST", SEARCH.format(kb_id=kb_id), {"query_text": query, **options})


@pytest.fixture
def caller(deps: Services, client: Client) -> Caller:
    return Caller(deps, client)


def _search_operation(client: Client) -> tuple[dict[str, Any], dict[str, Any]]:
    document = client.http.get(f"{V1}/openapi.json").json_body
    return document, document["paths"][V1 + SEARCH]["post"]


def _code(answer: Any) -> str:
    return str((answer.json_body.get("error") or {}).get("code", ""))


class _Failing:
    """An embedding model whose every call fails with `error`."""

    def __init__(self, inner: Any, error: Exception) -> None:
        self.model_id, self.dimensions = inner.model_id, inner.dimensions
        self.max_input_chars, self.error = inner.max_input_chars, error

    def embed(self, texts: Sequence[str]) -> Any:
        raise self.error


def test_every_refusal_the_search_route_answers_is_in_the_openapi_document(
    deps: Services, caller: Caller, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb_id = caller.created("/knowledge-bases", {"name": "docs"})
    kb = deps.kbs.get(kb_id)
    assert kb is not None
    model_name = kb.embedding_model_id or deps.settings.default_embedding_model
    model, engine = deps.embedding_model(kb.embedding_model_id), deps.engine(kb.retrieval_engine)
    answers: dict[str, Any] = {}

    # the model failing (a query of its own each time: the query cache must not answer it)
    for expected, error in (
        ("embedding_unavailable", ModelUnavailable("provider 503")),
        ("embedding_refused", ModelAuthError("bad key")),
    ):
        monkeypatch.setitem(deps._embedders, model_name, _Failing(model, error))
        answers[expected] = caller.search(kb_id, f"harbour lamp {expected}")
    monkeypatch.setitem(deps._embedders, model_name, model)

    # the index failing
    for expected, index_error in (
        ("index_unavailable", IndexUnavailable("down")),
        ("index_refused", IndexRefused(403, "security_exception")),
    ):

        def failing(*_args: Any, _error: Exception = index_error, **_kw: Any) -> Any:
            raise _error

        monkeypatch.setattr(engine, "hybrid_search", failing)
        answers[expected] = caller.search(kb_id, "harbour lamp")
    monkeypatch.undo()

    # a knowledge base that cannot be served any more (its model withdrawn), then one being deleted
    deps.kbs.put(replace(kb, embedding_model_id="openai/withdrawn-model"))
    answers["knowledge_base_unusable"] = caller.search(kb_id, "harbour lamp")
    deps.kbs.put(kb)
    assert caller.send("DELETE", f"/knowledge-bases/{kb_id}").status_code == 202
    answers["kb_deleting"] = caller.search(kb_id, "harbour lamp")

    assert {code: (a.status_code, _code(a)) for code, a in answers.items()} == {
        "embedding_unavailable": (503, "embedding_unavailable"),
        "embedding_refused": (503, "embedding_refused"),
        "index_unavailable": (503, "index_unavailable"),
        "index_refused": (503, "index_refused"),
        "knowledge_base_unusable": (409, "knowledge_base_unusable"),
        "kb_deleting": (409, "kb_deleting"),
    }
    _document, operation = _search_operation(client)
    undocumented = [
        f"{a.status_code} {_code(a)}"
        for a in answers.values()
        if _code(a) not in operation["responses"].get(str(a.status_code), {}).get("description", "")
    ]
    assert not undocumented, undocumented


def _hit_schemas(document: dict[str, Any], operation: dict[str, Any]) -> list[dict[str, Any]]:
    """The documented schemas a hit may have: the success answer's `data` is an array of them."""
    schemas = document["components"]["schemas"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = schemas[schema["$ref"].rsplit("/", 1)[1]]
        return schema

    success = operation["responses"]["200"]["content"]["application/json"]["schema"]
    data = next(
        (
            part["properties"]["data"]
            for part in success.get("allOf", [])
            if "data" in part.get("properties", {})
        ),
        None,
    )
    assert data is not None, f"the search answer's data is undocumented: {success}"
    hits = resolved(data)
    assert hits.get("type") == "array", hits
    items = resolved(hits["items"])
    return [resolved(choice) for choice in items.get("anyOf", [items])]


def _validate(document: dict[str, Any], operation: dict[str, Any], answer: Any) -> None:
    """The whole answer against the documented success schema (its $refs resolved in the document)."""
    schema = {
        "components": document["components"],
        **operation["responses"]["200"]["content"]["application/json"]["schema"],
    }
    jsonschema.validate(answer.json_body, schema, cls=jsonschema.Draft202012Validator)


def test_the_search_answer_documents_the_fields_of_its_hits(
    deps: Services, caller: Caller, client: Client
) -> None:
    kb_id = caller.created("/knowledge-bases", {"name": "docs"})
    caller.created(f"/knowledge-bases/{kb_id}/knowledge/manual", {"title": "Harbour", "content": TEXT})
    caller.created(f"/knowledge-bases/{kb_id}/knowledge/manual", {"title": "Copy", "content": TEXT})
    faq_id = caller.created("/knowledge-bases", {"name": "faq", "type": "faq"})
    caller.created(
        f"/knowledge-bases/{faq_id}/faq/entries",
        {
            "standard_question": "When is the harbour lamp lit?",
            "similar_questions": ["harbour lamp hours"],
            "answers": ["At dusk."],
            "tags": ["harbour"],
        },
    )
    drain(deps)
    document, operation = _search_operation(client)
    documented = [set(schema["properties"]) for schema in _hit_schemas(document, operation)]

    answers = {
        "document": caller.search(kb_id, "harbour lamp wick"),
        "document, copies folded": caller.search(kb_id, "harbour lamp wick", collapse_copies=True),
        "faq": caller.search(faq_id, "harbour lamp"),
    }
    for name, answer in answers.items():
        assert answer.status_code == 200, (name, answer.json_body)
        hits = answer.json_body["data"]
        assert hits, name
        for hit in hits:
            assert set(hit) in documented, (name, sorted(hit), documented)
        _validate(document, operation, answer)
    folded = answers["document, copies folded"].json_body["data"]
    assert any(hit["copies"] for hit in folded), folded  # the copies' own fields are checked too
