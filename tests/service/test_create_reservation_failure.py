"""A create whose reservation of the tenant's document place is not answered (the tenants table throttled,
unreachable): the object already saved is removed, as it is when the quota refuses the place, instead of
staying in the documents' store with no row and no count (a presigned upload's every retry left another)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import ManualRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations.create import FileUpload, create_from_file, create_manual

from .conftest import TEXT


class Throttled(Exception):
    pass


def _throttled(*_args: object, **_kwargs: object) -> bool:
    raise Throttled("ProvisionedThroughputExceeded")


@pytest.mark.parametrize("path", ["file", "manual"])
def test_a_reservation_not_answered_leaves_no_object_behind(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    monkeypatch.setattr(deps.tenants, "reserve_document", _throttled)
    with pytest.raises(Throttled):  # a 500/503 to the client, or the uploads message retried
        if path == "file":
            create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=TEXT, file_name="a.md"))
        else:
            create_manual(deps, kb.tenant_id, kb.id, ManualRequest(content="# Notes\n\nSome text."))
    assert files.keys(f"{kb.tenant_id}/") == []
    assert rows.page_by_kb(kb.id, limit=100) == []
