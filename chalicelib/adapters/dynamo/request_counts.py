"""The tenants' request counts in DynamoDB: one item per tenant and window (`{tenant_id}#{window_start}`),
counted by one conditional UpdateItem per request and removed by the table's TTL once the window is over."""

from __future__ import annotations

from typing import Any

from pynamodb.attributes import NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import UpdateError
from pynamodb.models import Model

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.adapters.dynamo.tables import _condition_failed
from chalicelib.domain.errors import provider_code
from chalicelib.ports import ServiceUnreachable
from chalicelib.settings import Settings


def build_request_count_model(settings: Settings) -> type[Any]:
    class RequestCountItem(Model):
        class Meta:
            table_name = settings.table("request-counts")
            region = settings.region

        window_key = UnicodeAttribute(hash_key=True)
        requests = NumberAttribute()
        #: the table's TTL attribute (epoch seconds)
        expires_at = NumberAttribute()

    return RequestCountItem


class DynamoRequestCounter:
    def __init__(self, model: type[Any]):
        self.model = model

    def count(self, tenant_id: str, window_start: int, limit: int, expires_at: int) -> bool:
        m = self.model
        try:
            m(f"{tenant_id}#{window_start}").update(
                actions=[m.requests.add(1), m.expires_at.set(expires_at)],
                condition=m.requests.does_not_exist() | (m.requests < limit),
            )
        except UpdateError as error:
            if _condition_failed(error):
                return False
            if error.cause is not None and is_transient(error.cause):
                code = provider_code(error.cause_response_code) or type(error.cause).__name__
                raise ServiceUnreachable(f"DynamoDB (request counts) did not answer ({code})") from None
            raise
        return True
