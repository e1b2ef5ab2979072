"""Which store a document's objects are written to: its storage backend's (Knowledge.storage_backend, set
from its knowledge base at creation). Reads by URL need no such choice: `deps.files` routes each URL to
the backend it names."""

from __future__ import annotations

from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies, FileStore


def files_of(deps: Dependencies, knowledge: Knowledge) -> FileStore:
    """The document's backend's store: where its source, Markdown, manifest, ranges and images go, and
    where a key of its (`parsed_markdown_key`, …) is looked up."""
    return deps.files.backend(knowledge.storage_backend)
