"""The stored reports' contract on the DynamoDB adapter (moto): the assertions the in-memory fake passes."""

from __future__ import annotations

from service.report_store_contract import check_report_store

from chalicelib.bootstrap import Services


def test_the_dynamodb_report_store_keeps_the_contract(module_services: Services) -> None:
    check_report_store(module_services.usage)
