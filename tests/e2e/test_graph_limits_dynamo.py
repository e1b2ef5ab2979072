"""The graph within DynamoDB's limits on the DynamoDB adapter (moto): the contract, a refusal the adapter
classifies, and facts written under a whole long name before names were cut, still found."""

from __future__ import annotations

import uuid

import pytest
from service.graph_limits_contract import GraphLimitsContract

from chalicelib.adapters.dynamo import graph as dynamo_graph
from chalicelib.adapters.dynamo.graph import DynamoGraphRepo, _graph_key
from chalicelib.bootstrap import Services
from chalicelib.domain.graph import entity_key
from chalicelib.ports import GraphRepo
from chalicelib.ports.graph import GraphWriteRefused


class TestDynamoGraphLimits(GraphLimitsContract):
    @pytest.fixture
    def graph(self, module_services: Services) -> GraphRepo:
        return module_services.graph

    @pytest.fixture
    def chunk_id_cap(self, monkeypatch: pytest.MonkeyPatch) -> int:
        monkeypatch.setattr(dynamo_graph, "GRAPH_MAX_CHUNK_IDS", 25)
        return 25


def _repo(services: Services) -> DynamoGraphRepo:
    repo = services.graph
    assert isinstance(repo, DynamoGraphRepo)
    return repo


def test_a_write_dynamodb_refuses_is_a_graph_write_refused(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cut in ("graph_name", "graph_relation"):  # as if names were not cut
        monkeypatch.setattr(dynamo_graph, cut, str)
    monkeypatch.setattr(dynamo_graph, "graph_name_part", entity_key)
    with pytest.raises(GraphWriteRefused) as refused:
        _repo(module_services).add("kb-refused", "k", [], [("甲" * 200, "关" * 100, "乙" * 200, "k-a1-c0")])
    assert refused.value.code == "graph_write_refused"


def test_facts_stored_under_a_whole_long_name_before_are_still_found(module_services: Services) -> None:
    repo, kb, k = _repo(module_services), f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    m, name, other = repo.model, "甲" * 200, "乙"  # 600 bytes: written whole, as before
    c = f"{k}-a1-c0"
    m(kb, _graph_key("n", entity_key(name), k), knowledge_id=k, name=name, chunk_ids={c}).save()
    for key, a, b in (("e", name, other), ("r", other, name)):
        m(
            kb,
            _graph_key(key, entity_key(a), "near", entity_key(b), k),
            knowledge_id=k,
            name=a,
            other=b,
            relation="near",
            chunk_ids={c},
        ).save()
    near = repo.neighbourhood(kb, name)
    assert near.entity is not None and near.entity.name == name
    assert [(e.source, e.relation, e.target) for e in near.edges] == [(name, "near", other)]
