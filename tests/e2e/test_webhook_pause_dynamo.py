"""The delivery breaker's WebhookRepo contract on the DynamoDB adapter (the webhooks table on moto,
provisioned from the template): failures in a row, the pause, one probe per interval."""

from __future__ import annotations

import pytest
from service.webhook_pause_contract import WebhookPauseContract

from chalicelib.bootstrap import Services
from chalicelib.ports import WebhookRepo


class TestDynamoWebhookPause(WebhookPauseContract):
    @pytest.fixture
    def hooks(self, module_services: Services) -> WebhookRepo:
        return module_services.webhooks
