"""An FAQ search answers an entry only for a question the entry has: an index entry a failed write could
not take back (the engine did not answer) is left behind by design, and the search must pass over it."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries as faq
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate
from chalicelib.ports import IndexUnavailable
from chalicelib.ports.faq import EntryWriteFailed

from .test_faq import index_count, search


def _once(target: Any, name: str, error: Exception) -> None:
    """`target.name` raises `error` on its next call, then is itself again."""
    real = getattr(target, name)

    def failing(*args: Any, **kwargs: Any) -> Any:
        setattr(target, name, real)
        raise error

    setattr(target, name, failing)


def test_a_question_an_update_failed_to_add_never_finds_the_entry(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    made = faq.create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Opening hours", answers=["9 to 5"]),
    )
    # the update's new question is indexed, its row write fails, and the engine does not answer the take-back
    _once(deps.faq, "put_entry", EntryWriteFailed("throttled"))
    _once(deps.engine(faq_kb.retrieval_engine), "delete_by_ids", IndexUnavailable("timed out"))
    with pytest.raises(AppError) as raised:
        faq.update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            made.id,
            FaqEntryUpdate(similar_questions=["when is the shop open"]),
        )
    assert raised.value.status == 503
    assert index_count(deps, faq_kb, made.id) == 2  # the left-behind index entry (the premise)
    assert faq.get_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id).similar_questions == []
    hits = search(deps, faq_kb, "when is the shop open")
    assert all(hit["matched_question"] in ("Opening hours",) for hit in hits), hits
    assert all(hit["matched_question"] != "when is the shop open" for hit in hits)
