"""A move of well-tagged documents through the public path (moto DynamoDB, SQS and S3).

POST /knowledge/move had stored every document's tag names in the task's params: its one DynamoDB item. 40
documents with 100 tags of 100 characters each (all within the API's limits: 200 ids, 100 tags a document,
500 a knowledge base, names up to 100) made an item over DynamoDB's 400 KB, and the request answered 500.
Each item now reads its document's names in the source as it runs, and keeps them in the files bucket only
while its row crosses."""

from __future__ import annotations

import uuid
from typing import Any

from chalicelib.bootstrap import Services
from chalicelib.domain.tags import Tag
from chalicelib.domain.types import Knowledge, KnowledgeType, ParseStatus
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

DOCUMENTS = 40
TAGS = 100


def _tagged_rows(services: Services, kb: dict[str, Any], documents: int, tags: list[Tag]) -> list[str]:
    """Completed rows (no chunks: nothing to index), each tagged with every tag."""
    ids = []
    for i in range(documents):
        row = Knowledge(
            id=str(uuid.uuid4()),
            tenant_id=kb["tenant_id"],
            kb_id=kb["id"],
            type=KnowledgeType.MANUAL,
            title=f"note {i}",
            parse_status=ParseStatus.COMPLETED,
            tag_ids=[t.id for t in tags],
        )
        services.knowledge.insert(row)
        ids.append(row.id)
    return ids


def _tags(services: Services, kb: dict[str, Any], count: int, length: int) -> list[Tag]:
    tags = []
    for i in range(count):
        name = f"{i:03d}-" + "x" * (length - 4)
        tag = Tag(id=str(uuid.uuid4()), tenant_id=kb["tenant_id"], kb_id=kb["id"], name=name)
        services.tags.create(tag, 500)
        tags.append(tag)
    return tags


def _move(api: Api, source: dict[str, Any], target: dict[str, Any], ids: list[str]) -> str:
    response = api.post(
        "/knowledge/move", {"source_kb_id": source["id"], "target_kb_id": target["id"], "ids": ids}
    )
    assert response.status_code == 202, response.json_body
    return str(response.json_body["data"]["task_id"])


def test_a_move_of_documents_with_a_hundred_long_tags_each_is_accepted(api: Api, services: Services) -> None:
    source, target = api.create_kb(), api.create_kb()
    ids = _tagged_rows(services, source, DOCUMENTS, _tags(services, source, TAGS, 100))
    task_id = _move(api, source, target, ids)  # was 500: the task's item over 400 KB
    task = api.get(f"/tasks/{task_id}")
    assert task.status_code == 200 and task.json_body["data"]["total"] == DOCUMENTS, task.json_body


def test_the_items_carry_the_tags_and_keep_nothing_behind(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    from chalicelib.tasks.move_clone import TAG_NAMES_PREFIX

    source, target = api.create_kb(), api.create_kb()
    tags = _tags(services, source, 5, 100)
    ids = _tagged_rows(services, source, 3, tags)
    task_id = _move(api, source, target, ids)
    runtime.drain(timeout=300)
    task = api.get(f"/tasks/{task_id}").json_body["data"]
    assert (task["status"], task["succeeded"]) == ("completed", len(ids)), task
    by_name = {t.name: t.id for t in services.tags.list_kb(target["id"])}
    assert sorted(by_name) == sorted(t.name for t in tags)
    for knowledge_id in ids:
        row = services.knowledge.get(knowledge_id)
        assert row is not None and row.kb_id == target["id"]
        assert row.tag_ids == [by_name[t.name] for t in tags]
    listed = api.get(f"/knowledge-bases/{target['id']}/knowledge?tag_id={by_name[tags[-1].name]}")
    assert listed.status_code == 200, listed.json_body
    data = listed.json_body["data"]
    items = data["items"] if isinstance(data, dict) else data
    assert sorted(item["id"] for item in items) == sorted(ids)
    # what the items kept while their rows crossed is gone
    assert services.inbox.list_keys(TAG_NAMES_PREFIX, 1000) == []
