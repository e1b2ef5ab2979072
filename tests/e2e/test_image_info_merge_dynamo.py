"""Two image tasks of one text chunk run at once (the state machine's Map): each merges its caption into
the chunk's `image_info` by a conditional put on the body it read, so the one whose put comes second is
refused, reads again and merges into what the first wrote. Neither is lost (DynamoDB on moto)."""

from __future__ import annotations

from typing import Any

import pytest
from service.repo_contract import new_id

from chalicelib.bootstrap import Services
from chalicelib.domain.ids import chunk_id
from chalicelib.domain.types import Chunk


def test_a_merge_that_lands_between_anothers_read_and_put_is_kept(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks: Any = module_services.chunks
    k = new_id()
    text = Chunk(
        id=chunk_id(k, 1, 0),
        tenant_id="t1",
        kb_id="kb",
        knowledge_id=k,
        seq=0,
        content="![a](mem://f/a.png) ![b](mem://f/b.png)",
        image_info=[{"url": "mem://f/a.png"}, {"url": "mem://f/b.png"}],
        metadata={"attempt": 1},
    )
    chunks.put_many([text])
    model = chunks.model
    real_get = model.get.__func__
    reads = []

    def get_then_another_merge(cls: Any, *args: Any, **kwargs: Any) -> Any:
        read = real_get(cls, *args, **kwargs)
        reads.append(read)
        if len(reads) == 1:  # the other image's task merges after this one read the chunk
            monkeypatch.setattr(model, "get", classmethod(real_get))
            assert chunks.merge_image_info(
                k, text.id, "mem://f/b.png", {"caption": "B"}, kb_id="kb", attempt=1
            )
            monkeypatch.setattr(model, "get", classmethod(get_then_another_merge))
        return read

    monkeypatch.setattr(model, "get", classmethod(get_then_another_merge))
    assert chunks.merge_image_info(k, text.id, "mem://f/a.png", {"caption": "A"}, kb_id="kb", attempt=1)
    assert len(reads) == 2  # its first put was refused: read again
    stored = chunks.get_many([(k, text.id)])[(k, text.id)]
    assert stored.image_info == [
        {"url": "mem://f/a.png", "caption": "A"},
        {"url": "mem://f/b.png", "caption": "B"},
    ]
    assert stored.content == text.content
