"""The copy of an S3 event that loses to its twin meets the tenant's quota the twin just used: it finishes
quietly (it had recorded a storage_quota_exceeded refusal against the document's own id)."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.create import accept_uploaded_object

from .conftest import TEXT
from .test_presigned_upload_expiry_and_twin_events import landed


def test_the_twin_event_meeting_the_quota_its_twin_used_records_no_refusal(
    deps: Services,
    kb: KnowledgeBase,
    inbox: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deps.tenants.set_quotas(kb.tenant_id, len(TEXT) + 10, 0)  # room for one copy of the file
    knowledge_id, key = landed(deps, kb, inbox)
    original = deps.tenants.get
    winners: list[Any] = []

    def other_copy_first(tenant_id: str) -> Any:
        if not winners:
            winners.append(None)
            winners[0] = accept_uploaded_object(deps, key)
        return original(tenant_id)

    import chalicelib.operations.create as create

    real_gate = create._gate_file

    def gate(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(deps.tenants, "get", other_copy_first)
        try:
            return real_gate(*args, **kwargs)
        finally:
            monkeypatch.setattr(deps.tenants, "get", original)

    monkeypatch.setattr(create, "_gate_file", gate)
    assert accept_uploaded_object(deps, key) is None
    assert winners and winners[0] is not None and rows.get(knowledge_id) is not None
    result = inbox.url_for(upload_result_key(knowledge_id))
    print(
        "refusal recorded:",
        inbox.exists(result) and inbox.read(result),
        "intent left:",
        inbox.exists(inbox.url_for(upload_intent_key(knowledge_id))),
    )
    assert not inbox.exists(result)
