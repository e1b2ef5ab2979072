"""An image's task retried because its vision model timed out: what one try read (the OCR text) is kept
and not asked of the model again, and when the caption's model never answers, the document still has the
image's OCR text (spec §1.11: images never fail the parent, and a retry costs only what was not done)."""

from __future__ import annotations

import io
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.ids import image_chunk_id
from chalicelib.domain.types import ChunkType, KnowledgeBase
from chalicelib.enrich.images import OCR_PROMPT
from chalicelib.ports import IndexSpace, ModelUnavailable
from chalicelib.stages import multimodal

from .conftest import drain, task_body, upload


class TimingOutCaptions:
    """A vision model that reads text at once and times out on the first `timeouts` captions."""

    model_id = "bedrock/fake-vision"

    def __init__(self, timeouts: int) -> None:
        self.timeouts = timeouts
        self.prompts: list[str] = []

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        self.prompts.append(prompt)
        if prompt == OCR_PROMPT:
            return "Tide table for March"
        if self.timeouts > 0:
            self.timeouts -= 1
            raise ModelUnavailable("openai/vl: timed out")
        return "A table of tide times."

    def ocr_calls(self) -> int:
        return self.prompts.count(OCR_PROMPT)


def _vision_kb(deps: Services, monkeypatch: pytest.MonkeyPatch, vision: TimingOutCaptions) -> None:
    real = multimodal.resolve
    monkeypatch.setattr(
        multimodal, "resolve", lambda kb, o: replace(real(kb, o), vlm_model_id="vl", ocr_engine="vlm")
    )
    monkeypatch.setattr(deps, "vision_model", lambda model_id: vision if model_id == "vl" else None)


def _image_task(deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue) -> Any:
    knowledge = upload(deps, kb)
    drain(deps)
    out = io.BytesIO()
    Image.new("RGB", (100, 100), (0, 90, 160)).save(out, format="PNG")
    url = files.save("t/exports/tides.png", out.getvalue(), "image/png")
    queue.send_raw("multimodal", task_body(knowledge, "t", image={"index": 0, "url": url, "original": True}))
    return knowledge


def _deliver_all(deps: Services, queue: MemoryTaskQueue) -> int:
    receives = 0
    while queue.waiting("multimodal"):
        queue.deliver("multimodal", multimodal.handle, deps)
        receives += 1
    return receives


def test_a_retry_after_the_caption_timed_out_does_not_pay_for_the_ocr_again(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vision = TimingOutCaptions(timeouts=1)
    _vision_kb(deps, monkeypatch, vision)
    knowledge = _image_task(deps, kb, files, queue)
    assert _deliver_all(deps, queue) == 2
    assert vision.ocr_calls() == 1
    [answer] = workflow.answers_to("t")
    assert answer.succeeded and answer.output == {"ocr_chars": 20, "caption_chars": 22}
    kinds = [c.chunk_type for c in deps.chunks.list(knowledge.id) if c.chunk_type != ChunkType.TEXT]
    assert sorted(k.value for k in kinds) == ["image_caption", "image_ocr"]


def test_when_the_caption_never_comes_the_ocr_text_is_still_indexed(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    vision = TimingOutCaptions(timeouts=10_000)
    _vision_kb(deps, monkeypatch, vision)
    knowledge = _image_task(deps, kb, files, queue)
    space = IndexSpace.of(deps.embedding_model())
    entries = deps.engine().count(space, kb.id, knowledge.id)
    _deliver_all(deps, queue)
    [answer] = workflow.answers_to("t")
    assert not answer.succeeded  # the state machine's Catch counts the image; the document goes on
    assert vision.ocr_calls() == 1
    chunk_id = image_chunk_id(knowledge.id, knowledge.attempt, 0, "ocr")
    ocr = deps.chunks.get_many([(knowledge.id, chunk_id)])
    assert ocr[(knowledge.id, chunk_id)].content == "Tide table for March"
    assert deps.engine().count(space, kb.id, knowledge.id) == entries + 1
