"""The wiki repository's ops on both adapters (DynamoDB on moto, the in-memory fake): a claimed op is held
from other claims until it is finished or released, and a release touches only its own attempt's op."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.bootstrap import Services, memory_deps
from chalicelib.ports import WikiOp, WikiPageRecord, WikiRepo


@pytest.fixture(params=["dynamo", "memory"])
def wiki(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[WikiRepo]:
    if request.param == "dynamo":
        services: Services = request.getfixturevalue("module_services")
        yield services.wiki
    else:
        yield memory_deps(index_dir=tmp_path / "index").wiki


def test_a_released_op_is_claimed_again_and_only_its_own_attempt_is_released(wiki: WikiRepo) -> None:
    kb_id, knowledge_id = f"kb-{uuid.uuid4().hex[:8]}", str(uuid.uuid4())
    wiki.put_op(WikiOp(kb_id, knowledge_id, 1, "token-1"))
    assert [op.token for op in wiki.claim_ops(kb_id, 5, 600)] == ["token-1"]
    assert wiki.claim_ops(kb_id, 5, 600) == []  # held by its claim
    wiki.release_op(kb_id, knowledge_id, 2)  # another attempt's release leaves it claimed
    assert wiki.claim_ops(kb_id, 5, 600) == []
    wiki.release_op(kb_id, knowledge_id, 1)
    assert wiki.pending(kb_id) == 1
    assert [op.token for op in wiki.claim_ops(kb_id, 5, 600)] == ["token-1"]
    wiki.finish_op(kb_id, knowledge_id, 1)
    wiki.release_op(kb_id, knowledge_id, 1)  # a release after the finish brings nothing back
    assert wiki.pending(kb_id) == 0 and wiki.claim_ops(kb_id, 5, 0) == []


def test_a_documents_pages_are_deleted_with_their_count_and_a_knowledge_bases_wiki_all_at_once(
    wiki: WikiRepo,
) -> None:
    kb_id, other_kb = f"kb-{uuid.uuid4().hex[:8]}", f"kb-{uuid.uuid4().hex[:8]}"
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    for kb in (kb_id, other_kb):
        wiki.put_op(WikiOp(kb, one, 1, f"token-{kb}"))
        wiki.put_pages(
            kb, one, [WikiPageRecord(one, "one.md", f"Page {n}", f"{one}-a1-wiki0{n}") for n in (0, 1)]
        )
        wiki.put_index(kb, "# Wiki index\n")
    wiki.put_pages(kb_id, two, [WikiPageRecord(two, "two.md", "Page", f"{two}-a1-wiki00")])
    assert wiki.delete_pages(kb_id, two) == 1 and wiki.delete_pages(kb_id, two) == 0
    wiki.delete_kb(kb_id)
    assert wiki.pages(kb_id) == [] and wiki.get_index(kb_id) is None
    assert wiki.pending(kb_id) == 0 and wiki.claim_ops(kb_id, 5, 0) == []
    assert len(wiki.pages(other_kb)) == 2 and wiki.get_index(other_kb) == "# Wiki index\n"  # another's stays
    assert wiki.pending(other_kb) == 1


def test_the_ops_are_listed_claimed_or_not_and_one_caller_at_a_time_is_due_to_heartbeat_them(
    wiki: WikiRepo,
) -> None:
    kb_id, other_kb = f"kb-{uuid.uuid4().hex[:8]}", f"kb-{uuid.uuid4().hex[:8]}"
    one, two = str(uuid.uuid4()), str(uuid.uuid4())
    wiki.put_op(WikiOp(kb_id, one, 1, "token-1"))
    wiki.put_op(WikiOp(kb_id, two, 1, "token-2"))
    wiki.put_op(WikiOp(other_kb, one, 1, "token-other"))
    wiki.claim_ops(kb_id, 1, 600)
    assert sorted(op.token for op in wiki.ops(kb_id)) == ["token-1", "token-2"]
    assert wiki.heartbeat_due(kb_id, 600) is True
    assert wiki.heartbeat_due(kb_id, 600) is False  # another worker's lease holds
    assert wiki.heartbeat_due(other_kb, 600) is True  # per knowledge base
    assert wiki.heartbeat_due(kb_id, 0) is True  # the lease ran out
    assert [op.token for op in wiki.ops(kb_id)] != [] and wiki.pages(kb_id) == []  # the lease is no page
    wiki.delete_kb(kb_id)
    assert wiki.ops(kb_id) == [] and wiki.heartbeat_due(kb_id, 600) is True
