"""The WebhookRepo contract on the DynamoDB adapter (the webhooks table on moto, provisioned from the
template)."""

from __future__ import annotations

import pytest
from service.webhook_repo_contract import WebhookRepoContract

from chalicelib.bootstrap import Services
from chalicelib.ports import WebhookRepo


class TestDynamoWebhookRepo(WebhookRepoContract):
    @pytest.fixture
    def hooks(self, module_services: Services) -> WebhookRepo:
        return module_services.webhooks
