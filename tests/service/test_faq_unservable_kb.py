"""An FAQ knowledge base that can no longer be served (the operator withdrew its embedding model from
WEKNORA_MODELS, or its engine): its writes answer as its search does, 409 `knowledge_base_unusable`, and
leave nothing behind; an entry can still be deleted (its index entries left in place, as a document's
clean-up does); an import queued before fails at once with the reason, not after every try."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries as faq
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqImportRequest
from chalicelib.faq.importing import start_import

from .test_faq import drain, entries_of, task_view

UNSERVABLE = pytest.mark.parametrize(
    "unusable",
    [{"embedding_model_id": "openai/withdrawn-model"}, {"retrieval_engine": "solr"}],
    ids=["model withdrawn", "engine unknown"],
)


def _withdraw(deps: Services, kb: KnowledgeBase, unusable: dict[str, str]) -> KnowledgeBase:
    changed = replace(kb, **unusable)
    deps.kbs.put(changed)
    return changed


def _used(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_used


@UNSERVABLE
def test_a_create_is_409_and_leaves_no_row_behind(
    deps: Services, faq_kb: KnowledgeBase, unusable: dict[str, str]
) -> None:
    _withdraw(deps, faq_kb, unusable)
    with pytest.raises(AppError) as raised:
        faq.create_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            FaqEntryRequest(standard_question="Opening hours", answers=["9-5"]),
        )
    assert (raised.value.status, raised.value.code) == (409, "knowledge_base_unusable")
    assert entries_of(deps, faq_kb) == {} and _used(deps, faq_kb) == 0


@UNSERVABLE
def test_an_update_is_409_and_a_delete_still_removes_the_entry(
    deps: Services, faq_kb: KnowledgeBase, unusable: dict[str, str]
) -> None:
    made = faq.create_entry(
        deps, faq_kb.tenant_id, faq_kb.id, FaqEntryRequest(standard_question="Opening hours", answers=["9-5"])
    )
    _withdraw(deps, faq_kb, unusable)
    with pytest.raises(AppError) as raised:
        faq.update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            made.id,
            FaqEntryUpdate(similar_questions=["when are you open"]),
        )
    assert (raised.value.status, raised.value.code) == (409, "knowledge_base_unusable")
    assert entries_of(deps, faq_kb)["Opening hours"].similar_questions == []
    faq.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id)
    assert entries_of(deps, faq_kb) == {} and _used(deps, faq_kb) == 0


@UNSERVABLE
def test_an_import_is_409_when_it_starts(
    deps: Services, faq_kb: KnowledgeBase, unusable: dict[str, str]
) -> None:
    _withdraw(deps, faq_kb, unusable)
    with pytest.raises(AppError) as raised:
        start_import(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            FaqImportRequest(entries=[{"standard_question": "Parking", "answers": ["free"]}]),
        )
    assert (raised.value.status, raised.value.code) == (409, "knowledge_base_unusable")
    assert deps.faq.get_lease(faq_kb.id) is None


@UNSERVABLE
def test_an_import_queued_before_fails_at_its_first_try_with_the_reason(
    deps: Services, faq_kb: KnowledgeBase, unusable: dict[str, str]
) -> None:
    task = start_import(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqImportRequest(entries=[{"standard_question": "Parking", "answers": ["free"]}]),
    )
    _withdraw(deps, faq_kb, unusable)
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "failed"
    reason = view["progress"]["error"]
    assert ("withdrawn-model" in reason) if "embedding_model_id" in unusable else ("solr" in reason)
    assert entries_of(deps, faq_kb) == {} and _used(deps, faq_kb) == 0
    assert deps.faq.get_lease(faq_kb.id) is None
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    assert queue.retried == [] and queue.dead_letters("faq-import") == []  # failed at its first try
