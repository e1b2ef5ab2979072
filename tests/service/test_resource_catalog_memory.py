"""The resource catalog's contract on the in-memory fake (the same assertions run on DynamoDB in tests/e2e)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryResourceCatalog
from chalicelib.ports import ResourceCatalog

from .resource_contract import ResourceContract


class TestMemoryResourceCatalog(ResourceContract):
    @pytest.fixture
    def catalog(self) -> ResourceCatalog:
        return MemoryResourceCatalog()
