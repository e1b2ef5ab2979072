"""GET /knowledge/{id}/file-url (issue 24) on the in-memory adapters: links to the original and to the
current attempt's parsed Markdown, a 404 `file_not_found` where there is no such file, and a `local://`
store (which cannot sign) served through a signed copy in the bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import LocalFileStore, RoutingFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ManualRequest
from chalicelib.domain.errors import NotFound
from chalicelib.domain.types import KnowledgeBase

from .conftest import MAIN_STAGES, TEXT, drain, upload


def _link(deps: Services, tenant_id: str, knowledge_id: str, kind: str) -> dict[str, object]:
    from chalicelib.commands import FileUrlQuery
    from chalicelib.operations.chunks import file_url

    return file_url(deps, tenant_id, knowledge_id, FileUrlQuery.model_validate({"kind": kind}))


def test_links_to_the_original_and_the_parsed_markdown(deps: Services, kb: KnowledgeBase) -> None:
    files = deps.files.default  # type: ignore[attr-defined]
    assert isinstance(files, MemoryFileStore)
    created = upload(deps, kb, "notes.md", TEXT)
    with pytest.raises(NotFound) as early:  # not parsed yet
        _link(deps, kb.tenant_id, created.id, "parsed")
    assert early.value.code == "file_not_found"
    original = _link(deps, kb.tenant_id, created.id, "original")
    assert files.get_presigned(str(original["url"])) == TEXT
    assert original["file_name"] == "notes.md" and original["expires_in"] == 900
    drain(deps, MAIN_STAGES)
    parsed = _link(deps, kb.tenant_id, created.id, "parsed")
    assert files.get_presigned(str(parsed["url"])).decode().startswith("# Lighthouses")
    with pytest.raises(NotFound) as foreign:
        _link(deps, "another-tenant", created.id, "original")
    assert foreign.value.code == "knowledge_not_found"


def test_hand_written_text_has_no_original(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.create import create_manual

    manual = create_manual(deps, kb.tenant_id, kb.id, ManualRequest(content="# Note\n\ntext"))
    with pytest.raises(NotFound) as none:
        _link(deps, kb.tenant_id, manual.id, "original")
    assert none.value.code == "file_not_found"


def test_a_local_store_is_served_through_a_signed_copy_in_the_bucket(
    deps: Services, kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deps, "files", RoutingFileStore(LocalFileStore(tmp_path / "files")))
    created = upload(deps, kb, "notes.md", TEXT)
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    first = _link(deps, kb.tenant_id, created.id, "original")
    assert inbox.get_presigned(str(first["url"])) == TEXT
    _link(deps, kb.tenant_id, created.id, "original")  # a second link rewrites the same copy
    assert inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/") == [
        f"downloads/{kb.tenant_id}/{created.id}/original-{created.attempt}"
    ]
    drain(deps, MAIN_STAGES)
    parsed = _link(deps, kb.tenant_id, created.id, "parsed")
    assert inbox.get_presigned(str(parsed["url"])).decode().startswith("# Lighthouses")
    # deleting the knowledge deletes the copies too
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, kb.tenant_id, created.id)
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(created.id) is None
    assert inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/") == []
