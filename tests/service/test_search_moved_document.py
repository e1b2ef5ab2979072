"""A document moved out of a knowledge base is not found by that knowledge base's search, even while its index
entries have not followed its row (the move's repoint met an index outage and waits for the queue's retry):
not by the owner, and not by a tenant the knowledge base is shared with, who can no longer read the document.
Once the retry repoints the entries, the document is found in the knowledge base it moved to."""

from __future__ import annotations

from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.commands import MoveKnowledgeRequest, SearchRequest
from chalicelib.domain.types import ParseStatus
from chalicelib.ports import IndexUnavailable

from .conftest import deliver, drain
from .test_download_link_revocation import V1, Caller, _caller, _document

QUERY = "lighthouse keeper wick"


def _search(caller: Caller, kb_id: str) -> list[dict[str, Any]]:
    answer = caller.client.http.request(
        "POST",
        f"{V1}/knowledge-bases/{kb_id}/hybrid-search",
        headers={"X-API-Key": caller.key, "Content-Type": "application/json"},
        body=b'{"query_text": "%s", "match_count": 10}' % QUERY.encode(),
    )
    assert answer.status_code == 200, answer.body
    return list(answer.json_body["data"])


def _moved_during_outage(
    deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> tuple[Caller, Caller, str, str, str]:
    """A shared knowledge base's document moved to the owner's private one, its row moved and its index
    entries still in the shared knowledge base (the repoint's first try met a 503)."""
    owner, recipient = _caller(deps, client, "owner"), _caller(deps, client, "recipient")
    shared_kb, knowledge_id = _document(owner, "shared")
    drain(deps)
    deps.knowledge.write_fields(knowledge_id, parse_status=ParseStatus.COMPLETED)  # type: ignore[attr-defined]
    private_kb = str(owner.call("POST", "/knowledge-bases", {"name": "private"})["id"])
    owner.call("POST", f"/knowledge-bases/{shared_kb}/shares", {"tenant_id": recipient.tenant.id})
    assert {h["knowledge_id"] for h in _search(recipient, shared_kb)} == {knowledge_id}

    def outage(*args: object, **kwargs: object) -> None:
        raise IndexUnavailable("index busy (HTTP 503)")

    monkeypatch.setattr(deps.engine(), "move_knowledge", outage)
    from chalicelib.operations.move_and_clone import move

    move(
        deps,
        owner.tenant.id,
        MoveKnowledgeRequest(
            source_kb_id=shared_kb, target_kb_id=private_kb, ids=[knowledge_id], mode="reuse_vectors"
        ),
    )
    deliver(deps, "lifecycle")  # the row moves; the entries' repoint fails and is retried later
    assert deps.knowledge.get(knowledge_id).kb_id == private_kb
    return owner, recipient, shared_kb, private_kb, knowledge_id


def test_the_knowledge_base_a_document_left_does_not_find_it_before_its_entries_follow(
    deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, recipient, shared_kb, _, knowledge_id = _moved_during_outage(deps, client, monkeypatch)
    assert deps.engine().count(_space(deps), shared_kb, knowledge_id) > 0  # the window is open

    for caller in (recipient, owner):
        assert [h for h in _search(caller, shared_kb) if h["knowledge_id"] == knowledge_id] == []
    gone = client.http.request("GET", f"{V1}/knowledge/{knowledge_id}", headers={"X-API-Key": recipient.key})
    assert gone.status_code == 404


def test_service_search_keeps_hits_of_the_searched_knowledge_base_only(
    deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.search import hybrid_search

    owner, _, shared_kb, _, _ = _moved_during_outage(deps, client, monkeypatch)
    for retriever in ("keyword", "vector", "hybrid"):
        found = hybrid_search(
            deps,
            owner.tenant.id,
            shared_kb,
            SearchRequest(query_text=QUERY, match_count=10, retriever=retriever),
        )
        assert found == [], retriever


def test_once_the_retry_repoints_the_entries_the_target_finds_it(
    deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, recipient, shared_kb, private_kb, knowledge_id = _moved_during_outage(deps, client, monkeypatch)
    monkeypatch.undo()  # the index is back
    drain(deps, ("lifecycle",))

    assert {h["knowledge_id"] for h in _search(owner, private_kb)} == {knowledge_id}
    assert _search(owner, shared_kb) == [] == _search(recipient, shared_kb)


def _space(deps: Services) -> Any:
    from chalicelib.ports import IndexSpace

    return IndexSpace.of(deps.embedding_model())
