"""FAQ entries on moto's DynamoDB through the public path: the list cursor's shape, tags in use, an update
racing a delete (the conditional row write), and two creates adding one question (the reservations)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.domain.faq import FaqEntry
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate

from .conftest import V1, Api


def entry(question: str, **extra: Any) -> dict[str, Any]:
    return {"standard_question": question, "answers": [f"answer to {question}"], **extra}


def send(api: Api, method: str, path: str, body: Any = None) -> Any:
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    call = getattr(api.client.http, method)
    if body is None:
        return call(f"{V1}{path}", headers=headers)
    return call(f"{V1}{path}", headers=headers, body=json.dumps(body))


def test_a_cursor_that_is_no_entry_id_is_400_invalid_query(api: Api) -> None:
    kb = api.create_kb(type="faq")
    created = api.post(f"/knowledge-bases/{kb['id']}/faq/entries", entry("q one"))
    assert created.status_code == 201, created.json_body
    for cursor in ("~x", "%C3%A9", "zzz"):
        response = api.get(f"/knowledge-bases/{kb['id']}/faq/entries?cursor={cursor}")
        assert response.status_code == 400, response.json_body
        assert response.json_body["error"]["code"] == "invalid_query"
    first = api.get(f"/knowledge-bases/{kb['id']}/faq/entries?cursor={created.json_body['data']['id']}")
    assert first.status_code == 200 and first.json_body["data"] == {"items": [], "next_cursor": ""}


def test_tags_list_only_the_tags_entries_use(api: Api) -> None:
    kb = api.create_kb(type="faq")
    base = f"/knowledge-bases/{kb['id']}/faq"
    first = api.post(f"{base}/entries", entry("q one", tags=["obsolete", "shared"])).json_body["data"]
    api.post(f"{base}/entries", entry("q two", tags=["shared"]))
    changed = send(api, "put", f"{base}/entries/{first['id']}", {"tags": ["current"]})
    assert changed.status_code == 200, changed.json_body
    assert api.get(f"{base}/tags").json_body["data"] == ["current", "shared"]
    assert send(api, "delete", f"{base}/entries/{first['id']}").status_code == 200
    assert api.get(f"{base}/tags").json_body["data"] == ["shared"]


def test_an_update_racing_a_delete_is_404_and_leaves_no_row(
    api: Api, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = api.create_kb(type="faq")
    created = entries.create_entry(
        services, kb["tenant_id"], kb["id"], FaqEntryRequest(standard_question="q?", answers=["a"])
    )
    real_write = entries.FaqIndex.write

    def write(self: entries.FaqIndex, items: Sequence[tuple[FaqEntry, Sequence[str]]]) -> None:
        entries.delete_entry(services, kb["tenant_id"], kb["id"], created.id)  # the DELETE lands now
        real_write(self, items)

    monkeypatch.setattr(entries.FaqIndex, "write", write)
    with pytest.raises(AppError) as raised:
        entries.update_entry(
            services, kb["tenant_id"], kb["id"], created.id, FaqEntryUpdate(similar_questions=["new?"])
        )
    assert raised.value.status == 404 and raised.value.code == "faq_entry_not_found"
    assert services.faq.get_entry(kb["id"], created.id) is None


def test_two_creates_adding_one_question_at_once_make_one_entry(
    api: Api, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = api.create_kb(type="faq")
    barrier = threading.Barrier(2)
    real_check = entries._check

    def check_then_wait(deps: Any, checked: FaqEntry) -> None:
        real_check(deps, checked)
        with contextlib.suppress(threading.BrokenBarrierError):  # the other one was refused before
            barrier.wait(timeout=5)

    monkeypatch.setattr(entries, "_check", check_then_wait)
    results: list[Any] = []

    def create(answer: str) -> None:
        request = FaqEntryRequest(standard_question="Same question?", answers=[answer])
        try:
            results.append(entries.create_entry(services, kb["tenant_id"], kb["id"], request))
        except AppError as error:
            results.append(error)

    threads = [threading.Thread(target=create, args=(a,)) for a in ("a1", "a2")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    codes = sorted(r.code for r in results if isinstance(r, AppError))
    assert codes == ["faq_question_conflict"], results
    assert len(list(entries.all_entries(services, kb["id"]))) == 1
