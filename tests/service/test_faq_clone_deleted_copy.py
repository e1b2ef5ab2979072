"""A clone's copy deleted through the API between the clone's two writes (the unindexed row, then the row
marked indexed) stays deleted: the second write is conditional on the row the first wrote (as an import's,
`save_indexed`). Before, a plain put recreated the row with its counted bytes after the delete had given them
back, so the tenant's storage quota counted less than it holds (a later delete gave the bytes back again),
and the copy came back with its index entries as if the delete never happened."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries
from chalicelib.faq.index import FaqIndex

from .faq_support import faq_kb_named
from .test_faq_import_reservations import clone_into, create
from .test_faq_storage_counting import used


def test_a_copy_deleted_between_the_clones_two_writes_stays_deleted(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = faq_kb_named(deps, tenant, "mirror")
    create(deps, faq_kb, "Where is the office?", "On the quay.")
    kept = create(deps, faq_kb, "Is there parking?", "Behind the harbour master's house.")
    before = used(deps, target)  # the source's entries only
    real_write_all = FaqIndex.write_all
    deleted: list[str] = []

    def write_all_then_delete(index: FaqIndex, written: Sequence[FaqEntry]) -> None:
        real_write_all(index, written)
        if index.kb.id == target.id and not deleted:  # the copies are indexed: an API delete of one
            victim = next(e for e in written if e.standard_question == "Where is the office?")
            entries.delete_entry(deps, tenant.id, target.id, victim.id)
            deleted.append(victim.id)

    monkeypatch.setattr(FaqIndex, "write_all", write_all_then_delete)
    view = clone_into(deps, faq_kb, target)
    monkeypatch.undo()

    assert view["status"] == "completed" and deleted
    assert deps.faq.get_entry(target.id, deleted[0]) is None  # not recreated
    (copy,) = entries.all_entries(deps, target.id)
    assert copy.standard_question == kept.standard_question and copy.indexed
    assert used(deps, target) == before + copy.counted_bytes  # what the target holds, counted once
    hits = deps.engine(target.retrieval_engine).count(FaqIndex(deps, target).space(), target.id, deleted[0])
    assert hits == 0  # no index entries of the deleted copy left to answer a search
