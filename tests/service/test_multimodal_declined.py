"""A vision model that declines to describe or read an image ("I'm sorry, I can't help with that") gives the
image no caption: its refusal is not indexed as the image's words, and the image's span says why. A reply
that only opens like one (a sign that reads "Sorry, we're closed") is the image's text, kept."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import ChunkType, KnowledgeBase
from chalicelib.stages import multimodal

from .conftest import drain, task_body, upload


class Replying:
    model_id = "bedrock/fake-vision"

    def __init__(self, reply: str) -> None:
        self.reply = reply

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        return self.reply


@pytest.mark.parametrize(
    ("reply", "kept"),
    [
        ("I'm sorry, but I can't help with identifying people in images.", False),
        ("I cannot describe this image.", False),
        ("Unfortunately, I am unable to view the image you provided.", False),
        ("Sorry, we're closed", True),
        ("I can't believe it's not butter: the label of a margarine tub.", True),
        ("A bar chart of monthly sales.", True),
    ],
)
def test_a_declined_caption_is_not_the_images_caption(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    reply: str,
    kept: bool,
) -> None:
    real = multimodal.resolve
    monkeypatch.setattr(
        multimodal, "resolve", lambda kb, o: replace(real(kb, o), vlm_model_id="vl", ocr_engine="none")
    )
    monkeypatch.setattr(deps, "vision_model", lambda model_id: Replying(reply))
    knowledge = upload(deps, kb)
    drain(deps)
    out = io.BytesIO()
    Image.new("RGB", (100, 100), (0, 90, 160)).save(out, format="PNG")
    url = files.save("t/exports/photo.png", out.getvalue(), "image/png")
    queue.send_raw("multimodal", task_body(knowledge, "t", image={"index": 0, "url": url, "original": True}))
    queue.deliver("multimodal", multimodal.handle, deps)

    captions = [c.content for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.IMAGE_CAPTION]
    assert captions == ([reply] if kept else [])
    span = deps.spans.get(knowledge.id, knowledge.attempt, "multimodal.image[0]")
    assert span is not None
    assert ("declined" in span.outputs.get("image_caption_skipped", "")) is not kept
