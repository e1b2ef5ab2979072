"""The graph port's contract on the DynamoDB adapter (moto)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service.graph_contract import GraphContract

from chalicelib.bootstrap import get_deps, set_deps
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import GraphRepo


@pytest.fixture(scope="module")
def dynamo_graph(_runtime: LocalRuntime) -> Iterator[GraphRepo]:
    _runtime.reset(clear_state=True)
    set_deps(None)
    yield get_deps().graph
    set_deps(None)


class TestDynamoGraph(GraphContract):
    @pytest.fixture
    def graph(self, dynamo_graph: GraphRepo) -> GraphRepo:
        return dynamo_graph
