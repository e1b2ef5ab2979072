"""The WebhookRepo contract on the in-memory fake."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryWebhookRepo
from chalicelib.ports import WebhookRepo

from .webhook_repo_contract import WebhookRepoContract


class TestMemoryWebhookRepo(WebhookRepoContract):
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        return MemoryWebhookRepo()
