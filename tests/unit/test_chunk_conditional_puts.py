"""The DynamoDB chunk repo's conditional puts (a metadata change, a move's repoint) share one loop: a write
in between fails the put and it is tried again on what is stored then. Pinned here, on a stand-in table that
always has another write in between: a metadata change reads and puts three times, then asks for a retry; a
repoint (its first body read by the listing) puts and reads three times, and a last read that finds the row
repointed by someone else answers "nothing done"."""

from __future__ import annotations

from typing import Any

import botocore.exceptions
import pytest
from pynamodb.exceptions import PutError

from chalicelib.adapters.dynamo import build_models
from chalicelib.adapters.dynamo.chunks import DynamoChunkRepo
from chalicelib.adapters.dynamo.tables import CONDITION_FAILED
from chalicelib.domain.errors import TransientStageError
from chalicelib.settings import get_settings


def _body(kb_id: str, attempt: int = 1) -> dict[str, Any]:
    return {
        "id": "c1",
        "tenant_id": "t1",
        "kb_id": kb_id,
        "knowledge_id": "k1",
        "seq": 0,
        "content": "text",
        "metadata": {"attempt": attempt},
        "created_at": "2026-01-01T00:00:00.000Z",
    }


class Contended:
    """Every conditional put refused (another write came in between); reads answer `bodies` in turn."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, model: Any, bodies: list[dict[str, Any]]) -> None:
        self.calls: list[str] = []
        self.bodies = bodies

        def get(cls: Any, knowledge_id: str, chunk_id: str, **_: Any) -> Any:
            self.calls.append("get")
            return model(knowledge_id, chunk_id, body=self.bodies.pop(0))

        def save(item: Any, condition: Any = None, **_: Any) -> Any:
            self.calls.append("put")
            error = botocore.exceptions.ClientError({"Error": {"Code": CONDITION_FAILED}}, "PutItem")
            raise PutError("refused", cause=error)

        monkeypatch.setattr(model, "get", classmethod(get))
        monkeypatch.setattr(model, "save", save)


@pytest.fixture
def repo() -> DynamoChunkRepo:
    return DynamoChunkRepo(build_models(get_settings()), writers=1)


def test_a_metadata_change_reads_and_puts_three_times_then_asks_for_a_retry(
    repo: DynamoChunkRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Contended(monkeypatch, repo.model, [_body("kb") for _ in range(3)])
    with pytest.raises(TransientStageError, match="while its metadata was set"):
        repo.set_metadata("k1", "c1", "see_also", ["B"], kb_id="kb", attempt=1)
    assert table.calls == ["get", "put"] * 3


def test_a_metadata_change_of_a_chunk_moved_meanwhile_is_nothing_to_do(
    repo: DynamoChunkRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Contended(monkeypatch, repo.model, [_body("kb"), _body("other")])
    assert not repo.set_metadata("k1", "c1", "see_also", ["B"], kb_id="kb", attempt=1)
    assert table.calls == ["get", "put", "get"]


def test_a_repoint_puts_and_reads_three_times_then_asks_for_a_retry(
    repo: DynamoChunkRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Contended(monkeypatch, repo.model, [_body("source") for _ in range(3)])
    monkeypatch.setattr(repo, "_items", lambda _: [repo.model("k1", "c1", body=_body("source"))])
    with pytest.raises(TransientStageError, match="while it was moved"):
        repo.repoint("k1", "target")
    assert table.calls == ["put", "get"] * 3


def test_a_repoint_whose_last_read_finds_the_row_repointed_is_nothing_to_do(
    repo: DynamoChunkRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = Contended(monkeypatch, repo.model, [_body("source"), _body("source"), _body("target")])
    monkeypatch.setattr(repo, "_items", lambda _: [repo.model("k1", "c1", body=_body("source"))])
    assert repo.repoint("k1", "target") == 0
    assert table.calls == ["put", "get"] * 3
