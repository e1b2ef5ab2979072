"""`POST /chunker/preview` stays under Lambda's 6 MB response (JSON, non-ASCII escaped): 500 chunks of 7,500
CJK characters, or their parents of up to 32,000, pass it. Past its budget the last chunks are left out with
the parents only they name; `truncated` says so and the totals still count everything."""

from __future__ import annotations

import json

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkingSettings, ChunkPreviewRequest
from chalicelib.domain.types import Tenant
from chalicelib.operations import chunk_preview

TEXT = "\n\n".join(f"## Part {n}\n\n" + "港口的起重机每天早上装卸集装箱。" * 8 for n in range(12))


def _preview(deps: Services, tenant: Tenant, **config: object) -> dict[str, object]:
    settings = ChunkingSettings.model_validate(config)
    request = ChunkPreviewRequest(text=TEXT, chunking_config=settings)
    return chunk_preview.preview_chunks(deps, tenant.id, request)


def test_a_preview_past_its_byte_budget_leaves_its_last_chunks_out(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _preview(deps, tenant, chunk_size=150, chunk_overlap=0)
    chunks = whole["chunks"]
    assert isinstance(chunks, list) and len(chunks) >= 10 and whole["truncated"] is False
    budget = len(json.dumps({k: v for k, v in whole.items() if k != "chunks"})) + 3 * max(
        len(json.dumps(c)) + 1 for c in chunks
    )
    monkeypatch.setattr(chunk_preview, "PREVIEW_MAX_BYTES", budget, raising=False)

    cut = _preview(deps, tenant, chunk_size=150, chunk_overlap=0)
    assert cut["truncated"] is True and cut["total_chunks"] == whole["total_chunks"]
    assert 3 <= len(cut["chunks"]) < len(chunks) and cut["chunks"] == chunks[: len(cut["chunks"])]
    assert len(json.dumps(cut)) <= budget + 100


def test_with_parents_the_kept_chunks_keep_the_parents_they_name(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"enable_parent_child": True, "parent_chunk_size": 400, "child_chunk_size": 100}
    whole = _preview(deps, tenant, **config)
    parents = whole["parents"]
    assert isinstance(parents, list) and len(parents) >= 4 and whole["truncated"] is False
    monkeypatch.setattr(chunk_preview, "PREVIEW_MAX_BYTES", len(json.dumps(whole)) // 2, raising=False)

    cut = _preview(deps, tenant, **config)
    assert cut["truncated"] is True and cut["total_parents"] == whole["total_parents"]
    kept, named = cut["chunks"], cut["parents"]
    assert isinstance(kept, list) and isinstance(named, list) and 1 <= len(kept) < len(whole["chunks"])
    assert named == parents[: len(named)] and len(named) == max(c["parent_index"] for c in kept) + 1
    assert len(json.dumps(cut)) <= len(json.dumps(whole)) // 2 + 100
