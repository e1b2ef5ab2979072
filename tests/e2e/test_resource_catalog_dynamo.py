"""The resource catalog's contract on the DynamoDB adapter (moto: the resources table of
infra/template.json)."""

from __future__ import annotations

import pytest
from service.resource_contract import ResourceContract

from chalicelib.bootstrap import Services
from chalicelib.ports import ResourceCatalog


class TestDynamoResourceCatalog(ResourceContract):
    @pytest.fixture
    def catalog(self, module_services: Services) -> ResourceCatalog:
        return module_services.resources
