"""The FaqRepo contract on the DynamoDB adapter (the faq table on moto, provisioned from the template)."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from service.faq_repo_contract import FaqRepoContract

from chalicelib.bootstrap import Services
from chalicelib.ports import FaqRepo


class TestDynamoFaqRepo(FaqRepoContract):
    @pytest.fixture
    def faq(self, module_services: Services) -> FaqRepo:
        return module_services.faq


def test_no_query_has_a_between_whose_lower_bound_is_above_the_upper(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DynamoDB refuses such a Query (ValidationException: a 500 for the API); moto does not check it."""
    from pynamodb.connection.base import Connection

    sent: list[dict[str, Any]] = []
    real = Connection.dispatch

    def dispatch(self: Connection, operation_name: str, operation_kwargs: dict[str, Any]) -> Any:
        if operation_name == "Query":
            sent.append(operation_kwargs)
        return real(self, operation_name, operation_kwargs)

    monkeypatch.setattr(Connection, "dispatch", dispatch)
    kb_id = f"kb-{uuid.uuid4()}"
    for after in ("", "~x", "~", "\u00e9", "0"):
        assert module_services.faq.page_entries(kb_id, after, 5) == ([], "")
    for query in sent:
        between = re.search(r"BETWEEN (:\w+) AND (:\w+)", query["KeyConditionExpression"])
        if between:
            values = query["ExpressionAttributeValues"]
            low, high = (values[name]["S"] for name in between.groups())
            assert low.encode() <= high.encode(), query
    assert sent, "no Query was sent"


def test_the_keyed_mark_stored_before_key_rules_were_numbered_is_rule_one(module_services: Services) -> None:
    """Knowledge bases keyed under rule 1 (C++ reserved as C) carry the item `keyed`: it does not vouch for
    rule 2, so their first write re-keys them (chalicelib/faq/keyed.py)."""
    from chalicelib.adapters.dynamo.faq import DynamoFaqRepo

    faq = module_services.faq
    assert isinstance(faq, DynamoFaqRepo)
    kb_id = f"kb-{uuid.uuid4()}"
    model = faq.model
    model(kb_id, "keyed").save()  # as the adapter wrote it before
    assert faq.entries_keyed(kb_id, 1) is True
    assert faq.entries_keyed(kb_id, 2) is False
    faq.mark_entries_keyed(kb_id, 2)
    assert faq.entries_keyed(kb_id, 2) is True
    faq.clear_questions(kb_id)
    assert list(model.query(kb_id)) == []
