"""Enrichment of an attempt that a reparse superseded while its model call ran (found by an audit): what it
writes after the new attempt cleaned up (its embedding start removes other attempts' entries) is taken
back, so no old page or table summary stays in search for good."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.enrich.wiki as wiki_pages
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.types import Tenant
from chalicelib.ports import IndexSpace
from chalicelib.tasks.reparse import reparse

from .conftest import drain
from .test_wiki_stage import deliver_wiki, llm, waiting_for_its_pages, wiki_kb  # noqa: F401


def test_wiki_pages_of_an_attempt_superseded_meanwhile_are_taken_back(
    deps: Services,
    tenant: Tenant,
    llm: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = wiki_kb(deps, tenant)
    first = waiting_for_its_pages(
        deps, kb, "notes.md", "# Lighthouses\n\n" + "The keeper logs the weather at dawn. " * 30
    )
    pages_for = wiki_pages.pages_for

    def reparsed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(wiki_pages, "pages_for", pages_for)
        reparse(deps, kb.tenant_id, first.id, ReparseRequest())
        drain(deps)  # attempt 2 parsed, chunked and embedded while attempt 1's pages were being written
        return pages_for(*args, **kwargs)

    monkeypatch.setattr(wiki_pages, "pages_for", reparsed_meanwhile)
    deliver_wiki(deps)
    row = deps.knowledge.get(first.id)
    assert row is not None and row.attempt == 2
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    old = f"{first.id}-a1-"
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, first.id)
    assert [e.chunk_id for e in entries if e.chunk_id.startswith(old)] == []
    assert [c.id for c in deps.chunks.list(first.id) if c.id.startswith(old)] == []
