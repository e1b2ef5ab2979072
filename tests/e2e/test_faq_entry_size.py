"""An FAQ entry that DynamoDB could not store as one item (400 KB) on moto: refused before anything is
written (413 `faq_entry_too_large`), and its question stays free; the adapter maps the store's own refusal
to the port's EntryWriteFailed."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.faq import FaqEntry

from .conftest import Api

BIG = ["答" * 19_000 for _ in range(10)]  # within the request's lengths: 570 KB as UTF-8, 1.1 MB stored


def error_code(response: Any) -> str:
    return str((response.json_body.get("error") or {}).get("code", ""))


def test_an_entry_over_the_item_limit_is_413_and_its_question_stays_free(api: Api) -> None:
    kb = api.create_kb(type="faq")
    path = f"/knowledge-bases/{kb['id']}/faq/entries"
    response = api.post(path, {"standard_question": "big", "answers": BIG})
    assert (response.status_code, error_code(response)) == (413, "faq_entry_too_large")
    assert api.get(path).json_body["data"]["items"] == []
    small = api.post(path, {"standard_question": "big", "answers": ["short"]})
    assert small.status_code == 201, small.json_body


def test_the_store_refusing_an_item_is_entry_write_failed(services: Services) -> None:
    from chalicelib.ports.faq import EntryWriteFailed

    entry = FaqEntry(
        id=str(uuid.uuid4()), kb_id=f"kb-{uuid.uuid4()}", tenant_id="t", standard_question="big", answers=BIG
    )
    with pytest.raises(EntryWriteFailed) as failed:
        services.faq.put_entry(entry, None)
    # the store's message (it may quote the item) stays out of the port error and its chain
    assert str(failed.value) == f"FAQ entry {entry.id} was not written (ValidationException)"
    assert failed.value.__cause__ is None and failed.value.__suppress_context__
