"""GET /knowledge/{id}/file-url and GET /r/{token} (issue 24) on the in-memory adapters: a link is a grant
on the file's entry in the resource catalog; redeeming it redirects to a signed GET of the original or the
current attempt's parsed Markdown. 404 `file_not_found` where there is no such file, 404 `grant_not_found`
for a token never issued, 410 `grant_expired` / `resource_deleted`; a `local://` store (which cannot sign)
is served through a signed copy in the bucket."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import LocalFileStore, RoutingFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ManualRequest
from chalicelib.domain.errors import AppError, NotFound
from chalicelib.domain.resources import resource_id_for, token_hash
from chalicelib.domain.types import KnowledgeBase
from chalicelib.services import resources

from .conftest import MAIN_STAGES, TEXT, drain, upload

BASE = "https://api.example.test/v1"


def _link(deps: Services, tenant_id: str, knowledge_id: str, kind: str) -> dict[str, object]:
    from chalicelib.commands import FileUrlQuery
    from chalicelib.operations.file_links import file_url

    return file_url(deps, tenant_id, knowledge_id, FileUrlQuery.model_validate({"kind": kind}), BASE)


def _token(link: dict[str, object]) -> str:
    url = str(link["url"])
    assert url.startswith(f"{BASE}/r/")
    return url.removeprefix(f"{BASE}/r/")


def _follow(deps: Services, link: dict[str, object], store: MemoryFileStore | None = None) -> bytes:
    files = store or deps.files.default  # type: ignore[attr-defined]  # the routing store's default
    assert isinstance(files, MemoryFileStore)
    return files.get_presigned(resources.redeem(deps, _token(link)).location)


def _refused(deps: Services, token: str) -> AppError:
    with pytest.raises(AppError) as refused:
        resources.redeem(deps, token)
    return refused.value


def test_links_to_the_original_and_the_parsed_markdown(deps: Services, kb: KnowledgeBase) -> None:
    created = upload(deps, kb, "notes.md", TEXT)
    with pytest.raises(NotFound) as early:  # not parsed yet
        _link(deps, kb.tenant_id, created.id, "parsed")
    assert early.value.code == "file_not_found"
    original = _link(deps, kb.tenant_id, created.id, "original")
    assert _follow(deps, original) == TEXT
    assert original["file_name"] == "notes.md" and original["expires_in"] == 900
    row = deps.knowledge.get(created.id)
    assert row is not None and original["resource"] == row.to_dict()["file_resource"]
    assert str(original["resource"]).startswith("resource://") and len(str(original["resource"])) == 33
    drain(deps, MAIN_STAGES)
    parsed = _link(deps, kb.tenant_id, created.id, "parsed")
    assert _follow(deps, parsed).decode().startswith("# Lighthouses")
    with pytest.raises(NotFound) as foreign:
        _link(deps, "another-tenant", created.id, "original")
    assert foreign.value.code == "knowledge_not_found"


def test_registration_is_idempotent_and_tokens_are_stored_hashed(deps: Services, kb: KnowledgeBase) -> None:
    created = upload(deps, kb, "notes.md", TEXT)
    first = _link(deps, kb.tenant_id, created.id, "original")
    second = _link(deps, kb.tenant_id, created.id, "original")
    assert first["resource"] == second["resource"] and first["url"] != second["url"]
    assert [r.id for r in deps.resources.owned_by(created.id)] == [first["resource"]]
    token = _token(first)
    grant = deps.resources.get_grant(token_hash(token))
    assert grant is not None and token not in repr(grant)
    assert deps.resources.get_grant(token) is None  # the plain token is no key


def test_unknown_expired_and_deleted_grants_are_refused(deps: Services, kb: KnowledgeBase) -> None:
    unknown = _refused(deps, "no-such-token")
    assert (unknown.status, unknown.code) == (404, "grant_not_found")
    assert _refused(deps, "").code == "grant_not_found"
    created = upload(deps, kb, "notes.md", TEXT)
    link = _link(deps, kb.tenant_id, created.id, "original")
    token = _token(link)
    grant = deps.resources.get_grant(token_hash(token))
    assert grant is not None
    deps.resources.put_grant(replace(grant, expires_at=datetime.now(UTC) - timedelta(seconds=1)))
    expired = _refused(deps, token)
    assert (expired.status, expired.code) == (410, "grant_expired")
    live = _link(deps, kb.tenant_id, created.id, "original")
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, kb.tenant_id, created.id)
    deps.knowledge.mark_deleting(created.id)  # as the delete task begins: its links are released first
    resources.release_owner(deps, created.id)
    with pytest.raises(NotFound) as deleting:  # asked for while the delete runs: gone from use at once
        _link(deps, kb.tenant_id, created.id, "original")
    assert deleting.value.code == "knowledge_not_found"
    row = deps.knowledge.get(created.id)  # and a file registered again meanwhile is not brought back
    assert row is not None and row.file_path
    late = resources.register_file(deps, row, "original", row.file_path, 0, "notes.md")
    assert _refused(deps, resources.create_grant(deps, late, 60)[0]).code == "resource_deleted"
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(created.id) is None
    gone = _refused(deps, _token(live))
    assert (gone.status, gone.code) == (410, "resource_deleted")
    resource = deps.resources.get(str(live["resource"]))
    assert resource is not None and resource.deleted


def test_a_reparse_retires_the_old_markdown_links(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks.reparse import reparse

    created = upload(deps, kb, "notes.md", TEXT)
    drain(deps, MAIN_STAGES)
    old = _link(deps, kb.tenant_id, created.id, "parsed")
    original = _link(deps, kb.tenant_id, created.id, "original")
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    assert _refused(deps, _token(old)).code == "resource_deleted"
    assert _follow(deps, original) == TEXT  # the original is not replaced by a reparse
    drain(deps, MAIN_STAGES)
    new = _link(deps, kb.tenant_id, created.id, "parsed")
    assert new["resource"] != old["resource"]
    assert _follow(deps, new).decode().startswith("# Lighthouses")


def test_a_superseded_attempts_late_markdown_does_not_retire_the_current_one(
    deps: Services, kb: KnowledgeBase
) -> None:
    """Attempt 1's docreader passed its liveness check, then a reparse ran attempt 2 to the end before
    attempt 1 registered its Markdown: the newer attempt's link keeps working, the late one is retired."""
    from chalicelib.commands import ReparseRequest
    from chalicelib.domain.storage_keys import parsed_markdown_key
    from chalicelib.services.storage import files_of
    from chalicelib.tasks.reparse import reparse

    created = upload(deps, kb, "notes.md", TEXT)
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps, MAIN_STAGES)
    current = _link(deps, kb.tenant_id, created.id, "parsed")
    first = replace(created, attempt=1)
    late_url = files_of(deps, first).url_for(parsed_markdown_key(kb.tenant_id, created.id, 1))
    late = resources.register_written(deps, first, resources.ROLE_PARSED, late_url, 10, 1)
    assert late.deleted
    assert _follow(deps, current).decode().startswith("# Lighthouses")


def test_the_pipeline_registers_each_file_as_it_writes_it(deps: Services, kb: KnowledgeBase) -> None:
    """The original at upload, the parsed Markdown and each extracted image when the docreader stores them,
    before any link is asked for; a redelivered docreader message finds the same resources for the same
    files (the ids derive from the URLs)."""
    from .test_move_clone import png_markdown

    created = upload(deps, kb, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    (original,) = deps.resources.owned_by(created.id)
    assert (original.id, original.url, original.role) == (
        resource_id_for(created.file_path),
        created.file_path,
        "original",
    )
    assert original.size == created.file_size and original.file_name == "bread.md" and not original.deleted
    queue = deps.queue
    [docreader] = queue.bodies("docreader")  # type: ignore[attr-defined]
    drain(deps, MAIN_STAGES)
    queue.send_raw("docreader", docreader)  # a redelivery of the stage that wrote the files
    drain(deps, ("docreader",))
    registered = deps.resources.owned_by(created.id)
    by_role = {role: [r for r in registered if r.role == role] for role in ("original", "parsed", "image")}
    assert len(by_role["original"]) == len(by_role["parsed"]) == 1, registered
    (parsed,) = by_role["parsed"]
    assert parsed.attempt == 1 and parsed.file_name == "bread.md" and parsed.content_type == "text/markdown"
    assert parsed.size == len(deps.files.read(parsed.url)) and "/parsed/attempt-1.md" in parsed.url
    # the redelivered run stores its figure under the same key (named by document, attempt and bytes): one
    # object, one resource
    store = deps.files.default  # type: ignore[attr-defined]
    stored = {store.url_for(key) for key in store.keys(f"{kb.tenant_id}/exports/")}
    assert len(stored) == 1 and {r.url for r in by_role["image"]} == stored and len(by_role["image"]) == 1
    for image in by_role["image"]:
        assert image.content_type == "image/png" and image.size == len(deps.files.read(image.url))
    assert any(image.url in deps.files.read(parsed.url).decode() for image in by_role["image"])
    # a link asked for now finds the file's resource, not a new one
    link = _link(deps, kb.tenant_id, created.id, "parsed")
    assert link["resource"] == parsed.id and deps.resources.owned_by(created.id) == registered
    assert _follow(deps, link).decode().startswith("# Sourdough")


def test_a_clone_registers_its_copies_files(deps: Services, kb: KnowledgeBase) -> None:
    from .test_move_clone import clone, completed, png_markdown, run_lifecycle

    source = completed(deps, kb, "bread.md", png_markdown("Sourdough", "A starter is flour and wild yeast."))
    started = clone(deps, kb, name="copy of handbook")
    run_lifecycle(deps)
    (copy,) = deps.knowledge.page_by_kb(started["target_kb_id"], limit=10)
    assert copy.id != source.id
    roles = sorted(r.role for r in deps.resources.owned_by(copy.id) if not r.deleted)
    assert roles == ["image", "original", "parsed"]
    assert resource_id_for(copy.file_path) in {r.id for r in deps.resources.owned_by(copy.id)}


def test_the_resource_id_is_stable_and_url_safe() -> None:
    one = resource_id_for("s3://bucket/t/k/1.pdf")
    assert one == resource_id_for("s3://bucket/t/k/1.pdf") != resource_id_for("s3://bucket/t/k/2.pdf")
    tail = one.removeprefix("resource://")
    assert len(tail) == 22 and all(ch.isalnum() or ch in "-_" for ch in tail)


def test_hand_written_text_has_no_original(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.create import create_manual

    manual = create_manual(deps, kb.tenant_id, kb.id, ManualRequest(content="# Note\n\ntext"))
    with pytest.raises(NotFound) as none:
        _link(deps, kb.tenant_id, manual.id, "original")
    assert none.value.code == "file_not_found"
    assert manual.to_dict()["file_resource"] is None


def test_a_local_store_is_served_through_a_signed_copy_in_the_bucket(
    deps: Services, kb: KnowledgeBase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(deps, "files", RoutingFileStore(LocalFileStore(tmp_path / "files")))
    created = upload(deps, kb, "notes.md", TEXT)
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    first = _link(deps, kb.tenant_id, created.id, "original")
    assert _follow(deps, first, inbox) == TEXT
    assert _follow(deps, _link(deps, kb.tenant_id, created.id, "original"), inbox) == TEXT
    assert inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/") == [
        f"downloads/{kb.tenant_id}/{created.id}/original-0"  # a second link rewrites the same copy
    ]
    drain(deps, MAIN_STAGES)
    parsed = _link(deps, kb.tenant_id, created.id, "parsed")
    assert _follow(deps, parsed, inbox).decode().startswith("# Lighthouses")
    # deleting the knowledge deletes the copies too
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, kb.tenant_id, created.id)
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(created.id) is None
    assert inbox.keys(f"downloads/{kb.tenant_id}/{created.id}/") == []
