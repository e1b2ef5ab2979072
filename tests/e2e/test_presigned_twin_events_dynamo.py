"""Two copies of one presigned upload's S3 event handled at once, on DynamoDB (moto): the copy that loses
the insert to the row of its own id finishes quietly, whether that row is still pending or already failed
(the adapter had retried the claim's take-over five times and raised), and leaves the row's object."""

from __future__ import annotations

from typing import Any

import pytest
import requests

from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations.create import accept_uploaded_object
from chalicelib.ports import DuplicateKnowledge

from .conftest import Api
from .stored import stored_keys

TEXT = b"# Tides\n\nThe harbour master posts the tide table each morning.\n"


@pytest.mark.parametrize("winner_state", ["pending", "failed"])
def test_the_copy_of_an_event_losing_the_insert_to_its_own_id_finishes_quietly(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch, winner_state: str
) -> None:
    kb = api.create_kb()
    grant = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "tides.md"}
    ).json_body["data"]
    knowledge_id, key = grant["knowledge_id"], grant["key"]
    requests.put(grant["upload_url"], data=TEXT, timeout=30)
    repo = services.knowledge
    insert = repo.insert
    winners: list[Any] = []

    def other_copy_first(knowledge: Any) -> None:
        if not winners:
            winners.append(None)
            winners[0] = accept_uploaded_object(services, key)
            if winner_state == "failed":  # e.g. its first stage could not be enqueued
                assert repo.mark_failed(knowledge_id, None, "enqueue failed", "enqueue_failed")
        insert(knowledge)

    monkeypatch.setattr(repo, "insert", other_copy_first)
    assert accept_uploaded_object(services, key) is None
    assert winners[0] is not None
    row = repo.get(knowledge_id)
    assert row is not None and row.file_path and services.files.exists(row.file_path)
    stored = stored_keys(services.files, f"{row.tenant_id}/{knowledge_id}/")
    assert len(stored) == 1 and row.file_path.endswith(stored[0])  # the loser's own copy is gone
    assert not services.inbox.exists(services.inbox.url_for(upload_result_key(knowledge_id)))
    assert not services.inbox.exists(services.inbox.url_for(upload_intent_key(knowledge_id)))
    tenant = services.tenants.get(row.tenant_id)
    assert tenant is not None and (tenant.document_count, tenant.storage_used) == (1, len(TEXT))


def test_an_insert_of_an_id_whose_failed_row_holds_the_claim_names_that_row(
    api: Api, services: Services
) -> None:
    from service.repo_contract import key, row

    repo = services.knowledge
    doc = row(dedupe_key=key())
    repo.insert(doc)
    assert repo.mark_failed(doc.id, None, "boom", "boom")
    with pytest.raises(DuplicateKnowledge) as duplicate:  # not five take-over tries and a RuntimeError
        repo.insert(doc)
    assert duplicate.value.existing.id == doc.id
