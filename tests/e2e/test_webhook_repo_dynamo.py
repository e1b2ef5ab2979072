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


def test_a_webhooks_read_the_table_did_not_answer_is_service_unreachable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every announcement reads the knowledge base's webhooks: a throttled read is ServiceUnreachable, which
    the announcement logs and goes on from (services/events.py); a refusal stays the table's own error."""
    from botocore.exceptions import ClientError
    from pynamodb.exceptions import QueryError

    from chalicelib.adapters.dynamo.webhooks import DynamoWebhookRepo
    from chalicelib.ports import ServiceUnreachable

    class Table:
        class key:
            @staticmethod
            def startswith(prefix: str) -> str:
                return prefix

        answer = "ThrottlingException"

        @classmethod
        def query(cls, *args: object, **kwargs: object) -> list[object]:
            error = ClientError({"Error": {"Code": cls.answer, "Message": "server words"}}, "Query")
            raise QueryError("Failed to query items", cause=error)

    repo = DynamoWebhookRepo(Table)
    with pytest.raises(ServiceUnreachable) as raised:
        repo.list_kb("kb")
    assert "server words" not in str(raised.value)
    Table.answer = "AccessDeniedException"
    with pytest.raises(QueryError):
        repo.list_kb("kb")
