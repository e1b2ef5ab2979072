"""What a search answers when a service it needs says no, at the route (in-memory adapters).

The query's embedding: the document search called the model directly and the FAQ search's embedding path
raised stage errors, so a throttled, failing or refusing provider was a 500 `internal_error` on both. Both
now embed through the cache and backoff of the pipeline (`services/indexing.embed_query`, one mapping): 503
`embedding_unavailable` (with the provider's wait, when it named one) or 503 `embedding_refused`, never the
provider's words. OpenSearch refusing the BM25 query (a 400) was a 500 with the server's reason in the log; it
is a 400 `query_too_complex`, its reason nowhere.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Sequence
from types import SimpleNamespace
from typing import Any, Literal

import numpy as np
import pytest
from opensearchpy import OpenSearch, Transport
from opensearchpy.exceptions import RequestError

from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import KnowledgeBase
from chalicelib.observability import SERVICE
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import EmbeddingModel, ModelThrottled, ModelUnavailable
from chalicelib.ports.models import ModelAuthError, UnknownModel

SECRET_WORDS = "SECRET-PROVIDER-WORDS"


class _Captured(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        extras = {k: v for k, v in vars(record).items() if k not in ("msg", "args")}
        self.lines.append(f"{record.getMessage()} {extras}")


@pytest.fixture
def logged() -> Iterator[list[str]]:
    """Every line the project's logger writes (its message, extra fields and exception text)."""
    handler, project_logger = _Captured(), logging.getLogger(SERVICE)  # the Powertools logger's own
    project_logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        project_logger.removeHandler(handler)


class _Model:
    """The knowledge base's model, counting calls; `error` makes every embedding fail with it."""

    def __init__(self, inner: EmbeddingModel, error: Exception | None = None) -> None:
        self._inner, self.error, self.calls = inner, error, 0
        self.model_id, self.dimensions = inner.model_id, inner.dimensions
        self.max_input_chars = inner.max_input_chars

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self._inner.embed(texts)


def _knowledge_base(deps: Services, kb_type: Literal["document", "faq"]) -> tuple[str, KnowledgeBase]:
    from chalicelib.operations.knowledge_bases import create_kb

    tenant, secret = create_tenant_with_key(deps, "acme")
    return secret, create_kb(deps, tenant.id, CreateKnowledgeBase(name="handbook", type=kb_type))


def _model(deps: Services, kb: KnowledgeBase, error: Exception | None = None) -> _Model:
    name = kb.embedding_model_id or deps.settings.default_embedding_model
    model = _Model(deps.embedding_model(kb.embedding_model_id), error)
    deps._embedders[name] = model
    return model


def _search(deps: Services, secret: str, kb: KnowledgeBase, **body: Any) -> tuple[int, dict[str, Any]]:
    from chalicelib.api import routes

    request = SimpleNamespace(
        headers={"x-api-key": secret},
        raw_body=json.dumps({"query_text": "harbour lamp", **body}).encode(),
        method="POST",
        uri_params={"kb_id": kb.id},
    )
    response = routes.hybrid_search(deps, request, kb.id)  # type: ignore[arg-type]
    answer = response.body if isinstance(response.body, dict) else json.loads(response.body)
    return response.status_code, answer


@pytest.mark.parametrize("kb_type", ["document", "faq"])
@pytest.mark.parametrize(
    ("error", "code", "details"),
    [
        (
            ModelThrottled(f"429 {SECRET_WORDS}", retry_after=60.0),
            "embedding_unavailable",
            {"retry_after": 60.0},
        ),
        (ModelThrottled(f"429 {SECRET_WORDS}"), "embedding_unavailable", None),
        (ModelUnavailable(f"provider 503 {SECRET_WORDS}"), "embedding_unavailable", None),
        (ModelAuthError(f"key sk-{SECRET_WORDS} invalid"), "embedding_refused", None),
        (UnknownModel(f"no model {SECRET_WORDS}"), "embedding_refused", None),
    ],
    ids=["throttled-with-wait", "throttled", "unavailable", "auth", "unknown-model"],
)
def test_a_query_the_model_cannot_embed_is_a_503_without_the_providers_words(
    deps: Services,
    logged: list[str],
    kb_type: Literal["document", "faq"],
    error: Exception,
    code: str,
    details: dict[str, Any] | None,
) -> None:
    secret, kb = _knowledge_base(deps, kb_type)
    model = _model(deps, kb, error)
    status, answer = _search(deps, secret, kb)
    assert (status, answer["error"]["code"]) == (503, code)
    assert answer["error"].get("details") == details
    assert SECRET_WORDS not in json.dumps(answer)
    assert model.calls >= 1
    # the operator learns which model failed and how, never what the provider said
    assert any(
        "embedding for an API request failed" in line and type(error).__name__ in line for line in logged
    )
    assert not [line for line in logged if SECRET_WORDS in line]


def test_a_failing_provider_is_tried_again_before_the_answer(deps: Services) -> None:
    """The pipeline's backoff: a provider that fails once, then answers, answers the search."""
    secret, kb = _knowledge_base(deps, "document")
    model = _model(deps, kb)
    inner = model.embed

    def once_unavailable(texts: Sequence[str]) -> Any:
        if model.calls == 0:
            model.calls += 1
            raise ModelUnavailable("provider 503")
        return inner(texts)

    model.embed = once_unavailable  # type: ignore[method-assign]
    status, _answer = _search(deps, secret, kb)
    assert status == 200 and model.calls == 2


@pytest.mark.parametrize("kb_type", ["document", "faq"])
def test_the_query_is_embedded_through_the_cache(deps: Services, kb_type: Literal["document", "faq"]) -> None:
    secret, kb = _knowledge_base(deps, kb_type)
    model = _model(deps, kb)
    for _ in range(3):
        status, _answer = _search(deps, secret, kb)
        assert status == 200
    assert model.calls == 1


class _Refusing(Transport):
    """OpenSearch refusing the BM25 query as it refuses one of over 1,024 clauses; kNN answers."""

    def perform_request(  # type: ignore[override]
        self, method: str, url: str, params: Any = None, body: Any = None, **_: Any
    ) -> Any:
        if method == "HEAD":
            return True
        if "knn" in body["query"]:
            return {"hits": {"hits": []}}
        raise RequestError(
            400,
            "search_phase_execution_exception",
            {
                "error": {
                    "root_cause": [{"type": "query_shard_exception", "reason": f"failed: {SECRET_WORDS}"}],
                    "caused_by": {"type": "too_many_clauses", "reason": "maxClauseCount is set to 1024"},
                },
                "status": 400,
            },
        )


def test_a_query_opensearch_refuses_is_a_400_without_its_reason(deps: Services, logged: list[str]) -> None:
    secret, kb = _knowledge_base(deps, "document")
    name = kb.retrieval_engine or deps.settings.retrieval_engine
    client = OpenSearch(hosts=[{"host": "example.invalid", "port": 9200}], transport_class=_Refusing)
    embedded = deps.engine(name)
    deps._engines[name] = OpenSearchEngine(client)
    try:
        status, answer = _search(deps, secret, kb, query_text="harbour lamp")
    finally:
        deps._engines[name] = embedded
    assert (status, answer["error"]["code"]) == (400, "query_too_complex")
    assert SECRET_WORDS not in json.dumps(answer)
    assert not [line for line in logged if SECRET_WORDS in line or "maxClauseCount" in line]


def test_the_vector_of_a_query_the_model_reads_is_the_models(deps: Services) -> None:
    """Through the cache, the vector is still the model's own (a keyword-free check of the route's list)."""
    from chalicelib.services.embedding_runs import embed_query

    _secret, kb = _knowledge_base(deps, "document")
    model = _model(deps, kb)
    direct = model._inner.embed(["harbour lamp"])[0]
    assert np.allclose(embed_query(deps, kb.tenant_id, model, "harbour lamp"), direct)
    assert np.allclose(embed_query(deps, kb.tenant_id, model, "harbour lamp"), direct)  # the cached one
