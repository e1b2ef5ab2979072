"""An image's OCR and caption chunks stand where the image stands in the document (spec §1.11: bound to the
first text chunk that shows the image): the bound chunk is their parent and its span (start_at, end_at) is
theirs, so what reads a document's text, OCR and captions in document order (auto-tag, by start_at) reads
an image's words next to the text around it, not all of them ahead of the document's own text."""

from __future__ import annotations

import io
from dataclasses import replace

from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.ids import image_chunk_id
from chalicelib.domain.types import ChunkType, KnowledgeBase
from chalicelib.stages import multimodal

from .conftest import drain, task_body, upload


class FixedOcr:
    name = "fixed-ocr"

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        return "Tide table for March"


def test_an_image_chunk_takes_its_bound_chunks_place(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    deps.replace_ocr_asr(FixedOcr(), None)
    knowledge = upload(deps, kb)
    drain(deps)
    out = io.BytesIO()
    Image.new("RGB", (100, 100), (0, 90, 160)).save(out, format="PNG")
    url = files.save("t/exports/tides.png", out.getvalue(), "image/png")
    # the document as three text chunks, the image shown in the second
    [first] = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    texts = [
        replace(first, start_at=0, end_at=120, content="The keeper logs the weather."),
        replace(first, id=first.id + "b", seq=first.seq + 1, start_at=120, end_at=260, content=f"![]({url})"),
        replace(first, id=first.id + "c", seq=first.seq + 2, start_at=260, end_at=400, content="Supplies."),
    ]
    deps.chunks.put_many(texts)

    queue.send_raw("multimodal", task_body(knowledge, "t", image={"index": 0, "url": url, "original": True}))
    assert queue.deliver("multimodal", multimodal.handle, deps)["batchItemFailures"] == []

    chunk_id = image_chunk_id(knowledge.id, knowledge.attempt, 0, "ocr")
    ocr = deps.chunks.get_many([(knowledge.id, chunk_id)])[(knowledge.id, chunk_id)]
    assert ocr.parent_chunk_id == texts[1].id
    assert (ocr.start_at, ocr.end_at) == (120, 260)
    in_order = sorted(
        (c for c in deps.chunks.list(knowledge.id) if c.chunk_type in (ChunkType.TEXT, ChunkType.IMAGE_OCR)),
        key=lambda c: (c.start_at, c.seq),
    )
    assert [c.id for c in in_order] == [texts[0].id, texts[1].id, chunk_id, texts[2].id]
