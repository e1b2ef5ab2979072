"""The delivery lanes' score on the DynamoDB adapter (the webhooks table on moto, provisioned from the
template): up per failure to the cap, down per delivered try to 0, no write for a healthy webhook."""

from __future__ import annotations

import pytest
from service.webhook_lane_contract import WebhookLaneContract

from chalicelib.bootstrap import Services
from chalicelib.ports import WebhookRepo


class TestDynamoWebhookLanes(WebhookLaneContract):
    @pytest.fixture
    def hooks(self, module_services: Services) -> WebhookRepo:
        return module_services.webhooks
