"""The FaqRepo contract on the DynamoDB adapter (the faq table on moto, provisioned from the template)."""

from __future__ import annotations

import pytest
from service.faq_repo_contract import FaqRepoContract

from chalicelib.bootstrap import Services
from chalicelib.ports import FaqRepo


class TestDynamoFaqRepo(FaqRepoContract):
    @pytest.fixture
    def faq(self, module_services: Services) -> FaqRepo:
        return module_services.faq
