"""The graph port's contract on the DynamoDB adapter (moto)."""

from __future__ import annotations

import pytest
from service.graph_contract import GraphContract

from chalicelib.bootstrap import Services
from chalicelib.ports import GraphRepo


class TestDynamoGraph(GraphContract):
    @pytest.fixture
    def graph(self, module_services: Services) -> GraphRepo:
        return module_services.graph
