"""The graph port's contract on the in-memory fake (the same assertions run on DynamoDB in tests/e2e)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryGraphRepo
from chalicelib.ports import GraphRepo

from .graph_contract import GraphContract


class TestMemoryGraph(GraphContract):
    @pytest.fixture
    def graph(self) -> GraphRepo:
        return MemoryGraphRepo()
