"""Index entries are reused (a `reuse_vectors` move, a clone) only between knowledge bases whose indexes hold
the same kind of entries: with vectors, keyword-only, or none (`index_entries`). Else 400
`indexing_strategy_mismatch` before anything is written; a move can reparse instead.

Before, `check_compatible` compared the type, the model and the engine only: a reuse move into a knowledge
base that indexes nothing left the document's entries in the source's index for good (its delete cleans the
target), and one from such a knowledge base into one that indexes left a completed document that no search
finds (none without vectors into one that searches vectors finds it by them either)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import IndexingStrategySettings
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import IndexingStrategy, KnowledgeBase, TaskStatus, Tenant

from .conftest import drain
from .test_move_clone import TIDES, clone, completed, model, move, new_kb, run_lifecycle, search, space  # noqa: F401

KEYWORD_ONLY = IndexingStrategySettings(vector_enabled=False, keyword_enabled=True)


def _indexing_nothing(deps: Services, kb: KnowledgeBase) -> KnowledgeBase:
    """A knowledge base that builds a graph only (set on its row: its chat model is never called here)."""
    strategy = IndexingStrategy(vector_enabled=False, keyword_enabled=False, graph_enabled=True)
    updated = deps.kbs.update(replace(kb, indexing_strategy=strategy))
    assert updated is not None
    return updated


def _refused(deps: Services, source: KnowledgeBase, target: KnowledgeBase, doc_id: str) -> dict[str, str]:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    with pytest.raises(BadRequest) as raised:
        move(deps, source, target, [doc_id], "reuse_vectors")
    assert raised.value.code == "indexing_strategy_mismatch", raised.value.message
    assert not queue.waiting("lifecycle")  # no task
    return dict(raised.value.data)


def test_a_reuse_move_into_a_knowledge_base_that_indexes_nothing_is_refused_and_changes_nothing(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    target = _indexing_nothing(deps, new_kb(deps, tenant, "graph only"))
    doc = completed(deps, kb, "tides.md", TIDES)
    assert deps.engine().count(space(deps), kb.id, doc.id) > 0
    assert _refused(deps, kb, target, doc.id) == {"source": "entries with vectors", "target": "nothing"}
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == kb.id
    assert deps.engine().count(space(deps), kb.id, doc.id) > 0  # untouched


def test_a_reuse_move_from_a_knowledge_base_that_indexes_nothing_or_without_vectors_is_refused(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    keyword = new_kb(deps, tenant, "keyword", indexing_strategy=KEYWORD_ONLY)
    doc = completed(deps, keyword, "tides.md", TIDES)
    assert _refused(deps, keyword, kb, doc.id) == {
        "source": "keyword-only entries",
        "target": "entries with vectors",
    }
    # a knowledge base indexing nothing now (its pipeline wants a chat model: switched after the document)
    graph = new_kb(deps, tenant, "graph")
    other = completed(deps, graph, "cranes.md", TIDES + b"\nCranes.\n")
    assert _refused(deps, _indexing_nothing(deps, graph), kb, other.id)["source"] == "nothing"


def test_entries_of_one_kind_move_whatever_else_differs_and_a_reparse_crosses_kinds(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    """Vectors with keyword search or without: the same entries. A reparse rebuilds under the target's."""
    vectors_only = new_kb(
        deps,
        tenant,
        "vectors",
        indexing_strategy=IndexingStrategySettings(vector_enabled=True, keyword_enabled=False),
    )
    doc = completed(deps, kb, "tides.md", TIDES)
    task = move(deps, kb, vectors_only, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED, done
    assert deps.engine().count(space(deps), vectors_only.id, doc.id) > 0
    keyword = new_kb(deps, tenant, "keyword", indexing_strategy=KEYWORD_ONLY)
    move(deps, vectors_only, keyword, [doc.id], "reparse")
    run_lifecycle(deps)
    drain(deps)
    assert deps.engine().count(space(deps), vectors_only.id, doc.id) == 0
    assert deps.engine().count(space(deps), keyword.id, doc.id) > 0
    assert [h["knowledge_id"] for h in search(deps, keyword, "spring tides")][:1] == [doc.id]


def test_a_strategy_changed_after_the_request_fails_the_item_and_moves_nothing(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    _indexing_nothing(deps, target)
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED
    assert "index entries cannot be reused" in done.errors[doc.id]
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == kb.id
    assert deps.engine().count(space(deps), kb.id, doc.id) > 0


def test_a_clone_into_a_knowledge_base_of_other_entries_is_refused(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    """A clone copies entries as a reuse move carries them: none from a knowledge base that indexes nothing
    (the copies would be completed and never found), none that lack the vectors the target searches."""
    completed(deps, kb, "tides.md", TIDES)
    keyword = new_kb(deps, tenant, "keyword", indexing_strategy=KEYWORD_ONLY)
    with pytest.raises(BadRequest) as raised:
        clone(deps, keyword, target_kb_id=kb.id)
    assert raised.value.code == "indexing_strategy_mismatch"
    assert clone(deps, kb, name="same kind")["target_kb_id"]  # a new clone takes the source's settings
