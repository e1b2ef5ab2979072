"""A docreader retry whose remote image server answers other bytes (a photo re-encoded, a counter) stores its
images under other names (an image is named by its bytes), and the retry's manifest replaces the first try's:
the first try's images are listed by no manifest. The resource catalog recorded each as it was stored, so the
document's delete and the removal of the attempt's outputs still find them."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.stages import docreader
from chalicelib.tasks.reparse import reparse

from .conftest import drain, upload
from .test_storage_counts_derived import (  # noqa: F401 (photos: a fixture)
    GALLERY,
    _Photos,
    delete,
    images_stored,
    markdown_stored,
    photos,
    row_of,
)


def first_try_fails_after_its_images(monkeypatch: pytest.MonkeyPatch, server: _Photos) -> None:
    """The first try stores its images and Markdown, then the store does not answer; the retry's images
    come back from the server as other bytes."""
    real = docreader.resources.register_written
    failed = []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if args[2] == docreader.resources.ROLE_PARSED and not failed:
            failed.append(True)
            server.side = 100
            raise ConnectionError("DynamoDB did not answer")
        return real(*args, **kwargs)

    monkeypatch.setattr(docreader.resources, "register_written", flaky)


def test_a_retrys_first_images_go_with_the_documents_delete(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first_try_fails_after_its_images(monkeypatch, photos)
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.processed_at is not None  # indexed, with the retry's images
    delete(deps, row)
    assert images_stored(files, kb.tenant_id) == 0


def test_a_retrys_first_images_go_once_a_reparse_is_indexed(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first_try_fails_after_its_images(monkeypatch, photos)
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps)
    row = row_of(deps, created.id)
    assert (row.attempt, row.processed_at is not None) == (2, True)
    # what is stored is what the row counts: the earlier attempt's images went, the first try's too
    assert images_stored(files, kb.tenant_id) == row.storage_size - row.file_size - markdown_stored(deps, row)
