"""The stored reports' contract on the DynamoDB adapter (moto): the assertions the in-memory fake passes."""

from __future__ import annotations

from service.report_store_contract import check_kb_pages, check_report_store

from chalicelib.bootstrap import Services


def test_the_dynamodb_report_store_keeps_the_contract(module_services: Services) -> None:
    check_report_store(module_services.usage)


def test_the_dynamodb_usage_pages_keep_the_contract(module_services: Services) -> None:
    check_kb_pages(module_services.usage)
