"""An FAQ knowledge base's entries indexed before its indexing was switched off ('for new documents only')
keep their index entries; an entry's delete, or the knowledge base's, removes them whatever it indexes now
(the removals were skipped once it indexed nothing, and the entries stayed in the engine for good)."""

from __future__ import annotations

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import Tenant
from chalicelib.faq import entries
from chalicelib.ports import IndexSpace

from .faq_support import faq_kb_named
from .test_faq_import_reservations import create

OFF = {"vector_enabled": False, "keyword_enabled": False, "wiki_enabled": True}


@pytest.mark.parametrize("removal", ["entry", "knowledge base"])
def test_entries_indexed_before_indexing_was_switched_off_go(
    deps: Services, tenant: Tenant, removal: str
) -> None:
    from chalicelib.commands import UpdateKnowledgeBase
    from chalicelib.operations.knowledge_bases import update_kb

    kb = faq_kb_named(deps, tenant, "faq")
    entry = create(deps, kb, "how much can the harbour crane lift?")
    space = IndexSpace.of(deps.embedding_model())
    assert deps.engine().count(space, kb.id) > 0
    update_kb(
        deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(summary_model_id="chat-test", indexing_strategy=OFF)
    )
    off = deps.kbs.get(kb.id)
    assert off is not None and not off.indexing_strategy.needs_embedding
    if removal == "entry":
        entries.delete_entry(deps, kb.tenant_id, kb.id, entry.id)
    else:
        assert entries.purge_kb(deps, kb.id) == 1
    assert deps.engine().count(space, kb.id) == 0  # on HEAD: 1, left in the engine
