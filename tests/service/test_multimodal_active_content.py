"""An image's caption and OCR text are stored as chunks a front end shows as Markdown: their active HTML
(scripts, event handlers, embedded frames) goes before they are stored, as every other text's does
(`domain.markup`). The reply cleaning stripped only known formatting tags, so `<script>`, `<svg onload>` and
`<iframe>` were kept; a text that was only active HTML is no text."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.ids import image_chunk_id
from chalicelib.domain.types import Chunk, ChunkType, KnowledgeBase
from chalicelib.stages import multimodal

from .conftest import drain, task_body, upload
from .test_multimodal_declined import Replying


def _inert(text: str) -> bool:
    return all(bad not in text.lower() for bad in ("<script", "onload", "<iframe", "alert("))


def _described(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    *,
    vlm: str,
    ocr_engine: str,
    stored_before: str = "",
) -> dict[ChunkType, str]:
    """One image of an uploaded document through the multimodal task; its stored texts by kind.
    `stored_before`: an OCR text an earlier delivery of the attempt stored."""
    real = multimodal.resolve
    monkeypatch.setattr(
        multimodal, "resolve", lambda kb, o: replace(real(kb, o), vlm_model_id=vlm, ocr_engine=ocr_engine)
    )
    knowledge = upload(deps, kb)
    drain(deps)
    out = io.BytesIO()
    Image.new("RGB", (100, 100), (0, 90, 160)).save(out, format="PNG")
    url = files.save("t/exports/photo.png", out.getvalue(), "image/png")
    if stored_before:
        before = Chunk(
            id=image_chunk_id(knowledge.id, knowledge.attempt, 0, "ocr"),
            tenant_id=knowledge.tenant_id,
            kb_id=kb.id,
            knowledge_id=knowledge.id,
            seq=multimodal.IMAGE_SEQ_BASE,
            content=stored_before,
            chunk_type=ChunkType.IMAGE_OCR,
            metadata={"attempt": knowledge.attempt},
        )
        deps.chunks.put_many([before])
    queue.send_raw("multimodal", task_body(knowledge, "t", image={"index": 0, "url": url, "original": True}))
    queue.deliver("multimodal", multimodal.handle, deps)
    return {c.chunk_type: c.content for c in deps.chunks.list(knowledge.id) if c.chunk_type != ChunkType.TEXT}


@pytest.mark.parametrize(
    ("reply", "caption"),
    [
        ("A kiln <script>alert(1)</script>glowing orange.", "A kiln glowing orange."),
        ('<svg onload="alert(1)">x</svg>A bar chart of sales.', "xA bar chart of sales."),
        ("<iframe src=javascript:alert(1)></iframe>\n\nA map of the harbour.", "A map of the harbour."),
        ("<script>alert(1)</script>", None),
    ],
)
def test_a_caption_keeps_none_of_the_models_active_html(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    reply: str,
    caption: str | None,
) -> None:
    monkeypatch.setattr(deps, "vision_model", lambda model_id: Replying(reply))
    texts = _described(deps, kb, files, queue, monkeypatch, vlm="vl", ocr_engine="none")
    captions = [texts[ChunkType.IMAGE_CAPTION]] if ChunkType.IMAGE_CAPTION in texts else []
    assert all(_inert(c) for c in captions), captions
    assert [" ".join(c.split()) for c in captions] == ([caption] if caption else [])


class _ReadsAScript:
    name = "scripted-ocr"

    def recognize(self, data: bytes, languages: object = None) -> str:
        return "Harbour notice <script>alert(1)</script>closes at dusk."

    def with_languages(self, languages: object) -> _ReadsAScript:
        return self


def test_an_ocr_engines_text_keeps_none_of_the_pictured_active_html(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deps, "ocr", lambda: _ReadsAScript())
    texts = _described(deps, kb, files, queue, monkeypatch, vlm="", ocr_engine="tesseract")
    assert " ".join(texts[ChunkType.IMAGE_OCR].split()) == "Harbour notice closes at dusk."


def test_a_text_an_earlier_delivery_stored_uncleaned_is_cleaned_when_written_again(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A delivery of the code from before the cleaning (during a deploy) stored the OCR text as the model wrote
    it; the next delivery takes it as read before and writes it again (and into the bound text chunk)."""
    monkeypatch.setattr(deps, "vision_model", lambda model_id: Replying("A kiln glowing."))
    texts = _described(
        deps,
        kb,
        files,
        queue,
        monkeypatch,
        vlm="vl",
        ocr_engine="vlm",
        stored_before="Notice <script>alert(1)</script>",
    )
    assert texts[ChunkType.IMAGE_OCR] == "Notice"
