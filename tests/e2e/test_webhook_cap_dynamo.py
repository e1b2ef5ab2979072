"""The webhooks cap on the DynamoDB adapter (moto): the count item `meta` of the knowledge base's partition
is the condition of the create's transaction, a delete gives its place back once, the last delete leaves no
item, and rows from before the count are counted exactly once, even when a create or a delete comes
between that count and its write. Then through the API, under the functions' packaged IAM roles."""

from __future__ import annotations

import uuid
from typing import Any

from service.webhook_repo_contract import make_hook

from chalicelib.adapters.dynamo.webhooks import META, DynamoWebhookRepo
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations.webhooks import MAX_WEBHOOKS_PER_KB as CAP

from .conftest import V1, Api


def _repo(module_services: Services) -> DynamoWebhookRepo:
    repo = module_services.webhooks
    assert isinstance(repo, DynamoWebhookRepo)
    return repo


def _count_item(repo: DynamoWebhookRepo, kb_id: str) -> int | None:
    items = list(repo.model.query(kb_id, repo.model.key == META, consistent_read=True))
    return int(items[0].hook_count) if items else None


def _legacy_rows(repo: DynamoWebhookRepo, kb_id: str, n: int) -> list[str]:
    """Webhooks written before the count existed: rows with no `meta` item."""
    hooks = [make_hook(kb_id) for _ in range(n)]
    for hook in hooks:
        repo.put(hook)
    return [h.id for h in hooks]


def test_creates_stop_at_the_cap_and_a_delete_gives_its_place_back_once(module_services: Services) -> None:
    repo, kb_id = _repo(module_services), f"kb-{uuid.uuid4()}"
    made = [make_hook(kb_id) for _ in range(CAP)]
    assert all(repo.create(hook, CAP) for hook in made)
    assert _count_item(repo, kb_id) == CAP
    assert not repo.create(make_hook(kb_id), CAP)
    assert len(repo.list_kb(kb_id)) == CAP
    assert repo.delete(kb_id, made[0].id)
    assert not repo.delete(kb_id, made[0].id)  # sent again: nothing more given back
    assert _count_item(repo, kb_id) == CAP - 1
    assert repo.create(make_hook(kb_id), CAP)
    assert not repo.create(make_hook(kb_id), CAP)
    for hook in repo.list_kb(kb_id):  # as a knowledge base's delete does: no item left behind
        assert repo.delete(kb_id, hook.id)
    assert _count_item(repo, kb_id) is None and repo.list_kb(kb_id) == []
    assert repo.create(make_hook(kb_id), CAP) and _count_item(repo, kb_id) == 1


def test_rows_from_before_the_count_are_counted_once(module_services: Services) -> None:
    repo, kb_id = _repo(module_services), f"kb-{uuid.uuid4()}"
    legacy = _legacy_rows(repo, kb_id, CAP + 3)  # past the cap: the race the count closes
    assert not repo.create(make_hook(kb_id), CAP) and _count_item(repo, kb_id) is None
    for hook_id in legacy[:4]:  # deletes while nothing is counted give nothing back
        assert repo.delete(kb_id, hook_id)
    assert _count_item(repo, kb_id) is None
    assert repo.create(make_hook(kb_id), CAP)
    assert _count_item(repo, kb_id) == CAP == len(repo.list_kb(kb_id))
    assert not repo.create(make_hook(kb_id), CAP)


def test_a_delete_between_the_first_count_and_its_write_is_not_counted(module_services: Services) -> None:
    repo, kb_id = _repo(module_services), f"kb-{uuid.uuid4()}"
    legacy = _legacy_rows(repo, kb_id, CAP - 1)
    real_list = repo.list_kb
    calls: list[int] = []

    def list_then_a_delete(kb: str) -> list[Any]:
        found = real_list(kb)
        if not calls:  # another request deletes a counted row before this create writes
            assert repo.delete(kb, legacy[0])
        calls.append(len(found))
        return found

    repo.list_kb = list_then_a_delete  # type: ignore[method-assign]
    try:
        assert repo.create(make_hook(kb_id), CAP)
    finally:
        repo.list_kb = real_list  # type: ignore[method-assign]
    assert calls == [CAP - 1, CAP - 2]  # the first write failed its checks: counted again
    assert _count_item(repo, kb_id) == CAP - 1 == len(repo.list_kb(kb_id))
    assert repo.create(make_hook(kb_id), CAP)
    assert not repo.create(make_hook(kb_id), CAP)


def test_two_first_counts_at_once_write_one(module_services: Services) -> None:
    repo, kb_id = _repo(module_services), f"kb-{uuid.uuid4()}"
    _legacy_rows(repo, kb_id, CAP - 1)
    real_list = repo.list_kb
    answers: list[bool] = []

    def list_then_another_create(kb: str) -> list[Any]:
        found = real_list(kb)
        if not answers:  # another request counts the same rows and writes first
            answers.append(False)
            answers.append(repo.create(make_hook(kb), CAP))
        return found

    repo.list_kb = list_then_another_create  # type: ignore[method-assign]
    try:
        late = repo.create(make_hook(kb_id), CAP)
    finally:
        repo.list_kb = real_list  # type: ignore[method-assign]
    assert answers == [False, True] and not late
    assert _count_item(repo, kb_id) == CAP == len(repo.list_kb(kb_id))


def test_the_cap_through_the_api_and_a_knowledge_base_delete(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    path = f"/knowledge-bases/{kb['id']}/webhooks"
    body = {"url": "https://93.184.216.34/hook", "event_types": ["Knowledge Completed"]}
    made = [api.post(path, body) for _ in range(CAP)]
    assert [r.status_code for r in made] == [201] * CAP, made[-1].json_body
    refused = api.post(path, body)
    assert refused.status_code == 400 and refused.json_body["error"]["code"] == "too_many_webhooks"
    first = made[0].json_body["data"]["id"]
    headers = {"X-API-Key": api.api_key}
    assert api.client.http.delete(f"{V1}{path}/{first}", headers=headers).status_code in (200, 204)
    assert api.client.http.delete(f"{V1}{path}/{first}", headers=headers).status_code == 404
    assert api.post(path, body).status_code == 201
    assert api.post(path, body).status_code == 400
    assert api.client.http.delete(f"{V1}/knowledge-bases/{kb['id']}", headers=headers).status_code < 300
    runtime.drain(timeout=120)
    repo = _repo(services)
    assert repo.list_kb(kb["id"]) == [] and _count_item(repo, kb["id"]) is None
