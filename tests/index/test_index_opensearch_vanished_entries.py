"""OpenSearch partial updates of entries deleted between their scan and the update (recording transport).

`set_enabled` and `move_knowledge` read the ids with a search, then send `update` actions: an entry a chunk
delete or a reparse removed meanwhile comes back as a 404 `document_missing_exception` item. There is
nothing left to switch or move, as a delete that finds nothing is nothing to delete; any other failed item
still fails the write.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from index_contract import DIM
from opensearchpy import OpenSearch, Transport

from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.ports import IndexSpace, IndexWriteError

SPACE = IndexSpace(model_id="m", dimensions=DIM)
MISSING = {"type": "document_missing_exception", "reason": "[c1]: document missing"}


class Vanishing(Transport):
    """The scan finds c1 and c2; the bulk answers each update with `outcomes[_id]` (default: updated)."""

    outcomes: dict[str, tuple[int, dict[str, Any]]]
    bulks: list[list[dict[str, Any]]]

    def perform_request(  # type: ignore[override]
        self, method: str, url: str, params: Any = None, body: Any = None, **_: Any
    ) -> Any:
        if method == "HEAD":
            return True
        if url.endswith("/_search"):
            return {
                "hits": {
                    "hits": [
                        {"_id": doc_id, "_source": {"is_enabled": True}, "sort": [doc_id]}
                        for doc_id in ("c1", "c2")
                    ]
                }
            }
        assert url.endswith("/_bulk"), url
        lines = [json.loads(line) for line in body.decode().splitlines()]
        self.bulks.append(lines)
        items = []
        for line in lines[::2]:
            ((op, meta),) = line.items()
            status, error = self.outcomes.get(meta["_id"], (200, {}))
            result: dict[str, Any] = {"_id": meta["_id"], "status": status}
            if error:
                result["error"] = error
            else:
                result["result"] = "updated"
            items.append({op: result})
        return {"errors": any("error" in next(iter(i.values())) for i in items), "items": items}


@pytest.fixture
def vanishing() -> tuple[OpenSearchEngine, Vanishing]:
    client = OpenSearch(hosts=[{"host": "example.invalid", "port": 9200}], transport_class=Vanishing)
    transport = client.transport
    assert isinstance(transport, Vanishing)
    transport.outcomes, transport.bulks = {}, []
    return OpenSearchEngine(client), transport


def test_switching_an_entry_deleted_meanwhile_is_nothing_to_switch(
    vanishing: tuple[OpenSearchEngine, Vanishing],
) -> None:
    engine, transport = vanishing
    transport.outcomes["c1"] = (404, MISSING)
    assert engine.set_enabled(SPACE, "kb1", ["c1", "c2"], False) == 2
    (bulk,) = transport.bulks
    assert bulk[1] == {"doc": {"is_enabled": False}} and bulk[3] == {"doc": {"is_enabled": False}}


def test_moving_an_entry_deleted_meanwhile_is_nothing_to_move(
    vanishing: tuple[OpenSearchEngine, Vanishing],
) -> None:
    engine, transport = vanishing
    transport.outcomes["c2"] = (404, MISSING)
    engine.move_knowledge(SPACE, "kb1", "kb2", ["k1"])
    (bulk,) = transport.bulks
    assert bulk[1] == {"doc": {"kb_id": "kb2"}}


@pytest.mark.parametrize(
    "outcome",
    [
        (404, {"type": "index_not_found_exception", "reason": "no such index"}),
        (400, {"type": "mapper_parsing_exception", "reason": "SERVER-SAID failed to parse"}),
    ],
    ids=["index-gone", "mapping-refused"],
)
def test_any_other_failed_update_still_fails_the_write(
    vanishing: tuple[OpenSearchEngine, Vanishing], outcome: tuple[int, dict[str, Any]]
) -> None:
    engine, transport = vanishing
    transport.outcomes.update({"c1": (404, MISSING), "c2": outcome})
    with pytest.raises(IndexWriteError) as failed:
        engine.set_enabled(SPACE, "kb1", ["c1", "c2"], False)
    assert f"{outcome[0]} {outcome[1]['type']}" in str(failed.value)
    assert "SERVER-SAID" not in str(failed.value)
