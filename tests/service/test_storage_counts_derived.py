"""A document counts on its tenant's storage quota what it stores: its file and what its parse stored (the
fetched or extracted images, the parsed Markdown), not its file alone. A 1 KB Markdown file linking 30
remote images had the resolver store each of them while only the kilobyte counted."""

from __future__ import annotations

import io
import random
from dataclasses import dataclass

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Stage, StageMessage

from .conftest import drain, upload
from .test_move_clone import clone, completed, run_lifecycle

IMAGES = 30
GALLERY = (
    "# Gallery\n\n" + "\n\n".join(f"![p{i}](https://photos.example/{i}.png)" for i in range(IMAGES))
).encode()


@dataclass
class _Resp:
    body: bytes
    content_type: str = "image/png"


class _Photos:
    """The remote server: an incompressible PNG per URL, the same bytes for the same URL and `side`."""

    timeout = 15.0

    def __init__(self) -> None:
        self.side = 120
        self.served = 0

    def with_timeout(self, t: float) -> _Photos:
        return self

    def get(self, url: str, headers: dict[str, str] | None = None) -> _Resp:
        self.served += 1
        noise = random.Random(f"{url}/{self.side}").randbytes(self.side * self.side * 3)
        out = io.BytesIO()
        Image.frombytes("RGB", (self.side, self.side), noise).save(out, "PNG")
        return _Resp(out.getvalue())


@pytest.fixture
def photos(monkeypatch: pytest.MonkeyPatch) -> _Photos:
    import chalicelib.parsers.images as images

    server = _Photos()
    monkeypatch.setattr(images, "remote_image_client", lambda allow: server)
    return server


def images_stored(files: MemoryFileStore, tenant_id: str) -> int:
    """The bytes of the tenant's stored images (the parse's exports; one document per test)."""
    return sum(
        len(data) for key, (data, _) in files._objects.items() if key.startswith(f"{tenant_id}/exports/")
    )


def markdown_stored(deps: Services, row: Knowledge) -> int:
    key = parsed_markdown_key(row.tenant_id, row.id, row.attempt)
    return deps.files.size(deps.files.backend(row.storage_backend).url_for(key))


def used(deps: Services, tenant_id: str) -> int:
    tenant = deps.tenants.get(tenant_id)
    assert tenant is not None
    return tenant.storage_used


def row_of(deps: Services, knowledge_id: str) -> Knowledge:
    row = deps.knowledge.get(knowledge_id)
    assert row is not None
    return row


def delete(deps: Services, row: Knowledge) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, row.tenant_id, row.id)
    run_lifecycle(deps)
    assert deps.knowledge.get(row.id) is None


def test_a_documents_fetched_images_and_markdown_count_and_its_delete_gives_them_back(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, photos: _Photos
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.parse_status in (ParseStatus.PROCESSING, ParseStatus.COMPLETED) and photos.served == IMAGES
    images = images_stored(files, kb.tenant_id)
    assert images > 100 * len(GALLERY)
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + images == used(deps, kb.tenant_id)
    delete(deps, row)
    assert used(deps, kb.tenant_id) == 0  # given back once


def test_images_past_the_storage_quota_fail_the_document_and_count_nothing_more(
    deps: Services, kb: KnowledgeBase, photos: _Photos
) -> None:
    # the file fits, not its images
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=10_000, document_quota=0)
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.parse_status == ParseStatus.FAILED and row.error_code == SpanErrorCode.QUOTA_EXCEEDED.value
    assert row.storage_size == len(GALLERY) == used(deps, kb.tenant_id)  # the file, counted at upload
    delete(deps, row)
    assert used(deps, kb.tenant_id) == 0


def test_a_reparse_counts_its_own_images_and_gives_the_earlier_ones_back(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, photos: _Photos
) -> None:
    from chalicelib.tasks.reparse import reparse

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    first = row_of(deps, created.id).storage_size
    photos.side = 60  # the server's photos shrank since
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps)
    row = row_of(deps, created.id)
    assert row.attempt == 2 and row.processed_at is not None
    counted = len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)
    assert row.storage_size == counted == used(deps, kb.tenant_id) < first


def test_redelivered_docreader_and_embedding_messages_count_nothing_twice(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, photos: _Photos
) -> None:
    from chalicelib.stages import docreader

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    again = StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=1)
    docreader.run(deps, again)  # at least once: the same message, before chunking ran
    drain(deps)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    row = row_of(deps, created.id)
    counted = len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)
    assert row.storage_size == counted == used(deps, kb.tenant_id)
    from chalicelib.services.stage_queue import enqueue

    enqueue(deps, Stage.EMBEDDING, again)  # and the embedding message once more
    drain(deps)
    assert row_of(deps, created.id).storage_size == counted == used(deps, kb.tenant_id)


def test_a_clone_counts_the_copied_images_and_markdown(
    deps: Services, kb: KnowledgeBase, photos: _Photos
) -> None:
    source = completed(deps, kb, "gallery.md", GALLERY)
    assert source.storage_size > 100 * len(GALLERY)
    started = clone(deps, kb)
    run_lifecycle(deps)
    copies = deps.knowledge.page_by_kb(started["target_kb_id"], limit=10)
    assert [copy.storage_size for copy in copies] == [source.storage_size]
    assert used(deps, kb.tenant_id) == 2 * source.storage_size
