"""An image's OCR text and caption are paid for once per tenant and recipe: a reparse, or a second document of
the tenant showing the same image, takes them from the tenant's image text cache (services/image_texts),
while another tenant, another model, prompt or OCR languages pay again, and a refusal or an empty OCR text is
never cached. Each image task finds its bound text chunk by the sequence number the hand-over found for it,
not by listing every chunk of the document once per image."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkingSettings, CreateKnowledgeBase, ReparseRequest
from chalicelib.domain.ids import execution_name, image_chunk_id
from chalicelib.domain.storage_keys import IMAGE_TEXTS_PREFIX, images_manifest_key
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, Tenant
from chalicelib.enrich.images import OCR_PROMPT
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.stages import embedding, multimodal
from chalicelib.tasks.reparse import reparse

from .conftest import chunked, deliver, drain, task_body, upload

REFUSAL = "I'm sorry, but I can't help with describing this image."


class CountingVision:
    """A vision model that counts its calls: the OCR prompt reads text, any other prompt captions (or
    refuses, while `refusals` last)."""

    def __init__(self, refusals: int = 0) -> None:
        self.model_id = "bedrock/vl"  # the spec the operator's catalog resolves the tenant's name to
        self.prompts: list[str] = []
        self.refusals = refusals

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        self.prompts.append(prompt)
        if prompt == OCR_PROMPT:
            return "Berth 4: crane limit 40 t"
        if self.refusals > 0:
            self.refusals -= 1
            return REFUSAL
        return "A harbour map with four berths."

    def ocr_calls(self) -> int:
        return self.prompts.count(OCR_PROMPT)

    def caption_calls(self) -> int:
        return len(self.prompts) - self.ocr_calls()


class CountingOcr:
    name = "counting-ocr"

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.calls = 0

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        self.calls += 1
        return self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]


def _png(colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, format="PNG")
    return out.getvalue()


LOGO = _png((200, 80, 20))


def _document(title: str, *images: bytes, filler: int = 0) -> bytes:
    parts = [f"# {title}\n\nThe {title} harbour has three berths and two cranes."]
    for n, image in enumerate(images):
        parts += [f"Section {n} {title}: " + "the quay is long and the tide is high. " * filler]
        parts += [f"![figure {n}](data:image/png;base64,{base64.b64encode(image).decode()})"]
    return "\n\n".join(parts).encode()


@pytest.fixture
def settings(deps: Services, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What every knowledge base's documents are read with (changed by a test between documents)."""
    chosen: dict[str, Any] = {"enable_multimodel": True, "vlm_model_id": "vl", "ocr_engine": "vlm"}
    real = multimodal.resolve
    for stage in (multimodal, embedding):  # the hand-over asks too (are the images described at all?)
        monkeypatch.setattr(stage, "resolve", lambda kb, o: replace(real(kb, o), **chosen))
    return chosen


@pytest.fixture
def vision(deps: Services, monkeypatch: pytest.MonkeyPatch) -> CountingVision:
    model = CountingVision()

    def resolved(name: str) -> CountingVision | None:
        if not name.startswith("vl"):
            return None
        model.model_id = f"bedrock/{name}"
        return model

    monkeypatch.setattr(deps, "vision_model", resolved)
    return model


def _describe(deps: Services, knowledge: Knowledge) -> list[dict[str, Any]]:
    """Runs the image tasks the attempt's execution would send; returns each image's sub-span outputs."""
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    workflow, queue = deps.workflow, deps.queue
    assert isinstance(workflow, MemoryWorkflow) and isinstance(queue, MemoryTaskQueue)
    images = workflow.executions[execution_name(row.id, row.attempt)].payload["images"]
    outputs = []
    for image in images:
        queue.send_raw("multimodal", task_body(row, f"{row.id}-{row.attempt}-{image['index']}", image=image))
        assert queue.deliver("multimodal", multimodal.handle, deps)["batchItemFailures"] == []
        span = deps.spans.get(row.id, row.attempt, f"multimodal.image[{image['index']}]")
        assert span is not None
        outputs.append(dict(span.outputs))
    return outputs


def _ingested(deps: Services, kb: KnowledgeBase, name: str, data: bytes) -> Knowledge:
    knowledge = upload(deps, kb, name, data)
    drain(deps)
    return knowledge


def _image_texts(deps: Services, knowledge: Knowledge) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for chunk in deps.chunks.list(knowledge.id):
        if chunk.chunk_type in (ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION):
            found.setdefault(chunk.chunk_type.value, []).append(chunk.content)
    return found


def test_a_reparse_pays_no_model_call_for_the_images_it_read_before(
    deps: Services, kb: KnowledgeBase, settings: dict[str, Any], vision: CountingVision
) -> None:
    knowledge = _ingested(deps, kb, "harbour.md", _document("Northgate", LOGO, _png((20, 80, 200))))
    first = _describe(deps, knowledge)
    assert (vision.ocr_calls(), vision.caption_calls()) == (2, 2)

    reparse(deps, kb.tenant_id, knowledge.id, ReparseRequest())
    drain(deps)
    again = _describe(deps, knowledge)
    assert (vision.ocr_calls(), vision.caption_calls()) == (2, 2)  # not one more call
    assert [(o["ocr_cached"], o["caption_cached"]) for o in first] == [(0, 0), (0, 0)]
    assert [(o["ocr_cached"], o["caption_cached"]) for o in again] == [(1, 1), (1, 1)]
    assert [o["caption_chars"] for o in again] == [len("A harbour map with four berths.")] * 2
    texts = _image_texts(deps, knowledge)
    assert texts["image_ocr"] == ["Berth 4: crane limit 40 t"] * 2
    assert texts["image_caption"] == ["A harbour map with four berths."] * 2


def test_the_same_image_in_two_documents_of_a_tenant_is_paid_once_and_another_tenant_pays_again(
    deps: Services,
    kb: KnowledgeBase,
    settings: dict[str, Any],
    vision: CountingVision,
    files: MemoryFileStore,
) -> None:
    _describe(deps, _ingested(deps, kb, "north.md", _document("Northgate", LOGO)))
    second = _ingested(deps, kb, "south.md", _document("Southgate", LOGO))
    outputs = _describe(deps, second)
    assert (vision.ocr_calls(), vision.caption_calls()) == (1, 1)
    assert outputs == [{"ocr_chars": 25, "caption_chars": 31, "ocr_cached": 1, "caption_cached": 1}]
    assert _image_texts(deps, second) == {
        "image_ocr": ["Berth 4: crane limit 40 t"],
        "image_caption": ["A harbour map with four berths."],
    }

    other, _ = create_tenant_with_key(deps, "elsewhere")
    other_kb = create_kb(deps, other.id, CreateKnowledgeBase(name="docs"))
    [outputs] = _describe(deps, _ingested(deps, other_kb, "north.md", _document("Northgate", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (0, 0)
    assert (vision.ocr_calls(), vision.caption_calls()) == (2, 2)
    # each tenant's entries sit under its own prefix (what the files bucket's lifecycle rule expires)
    cached = files.keys(IMAGE_TEXTS_PREFIX)
    assert len(cached) == 4
    assert {key.split("/")[1] for key in cached} == {kb.tenant_id, other.id}


def test_another_caption_prompt_or_model_pays_again(
    deps: Services, kb: KnowledgeBase, settings: dict[str, Any], vision: CountingVision
) -> None:
    _describe(deps, _ingested(deps, kb, "a.md", _document("Alpha", LOGO)))
    settings["caption_language"] = "German"  # a new caption prompt; the OCR prompt is the same
    [outputs] = _describe(deps, _ingested(deps, kb, "b.md", _document("Beta", LOGO)))
    assert (vision.ocr_calls(), vision.caption_calls()) == (1, 2)
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (1, 0)
    settings["caption_instructions"] = "Name every berth."
    [outputs] = _describe(deps, _ingested(deps, kb, "c.md", _document("Gamma", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (1, 0)
    settings["vlm_model_id"] = "vl-2"  # another model reads both again
    [outputs] = _describe(deps, _ingested(deps, kb, "d.md", _document("Delta", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (0, 0)
    assert (vision.ocr_calls(), vision.caption_calls()) == (2, 4)
    settings["caption_language"] = ""  # back to the first prompt, on the second model: cached
    [outputs] = _describe(deps, _ingested(deps, kb, "e.md", _document("Epsilon", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (1, 0)
    settings.update(vlm_model_id="vl", caption_instructions="")
    [outputs] = _describe(deps, _ingested(deps, kb, "f.md", _document("Zeta", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (1, 1)


def test_a_refused_caption_is_not_cached(
    deps: Services, kb: KnowledgeBase, settings: dict[str, Any], vision: CountingVision
) -> None:
    vision.refusals = 1
    [outputs] = _describe(deps, _ingested(deps, kb, "a.md", _document("Alpha", LOGO)))
    assert "declined" in outputs["image_caption_skipped"]
    second = _ingested(deps, kb, "b.md", _document("Beta", LOGO))
    [outputs] = _describe(deps, second)
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (1, 0)  # asked again, and answered
    assert vision.caption_calls() == 2
    assert _image_texts(deps, second)["image_caption"] == ["A harbour map with four berths."]


def test_the_ocr_engine_is_paid_once_per_languages_and_an_empty_text_is_not_cached(
    deps: Services, kb: KnowledgeBase, settings: dict[str, Any], vision: CountingVision
) -> None:
    ocr = CountingOcr("", "Berth 4")  # reads nothing the first time
    deps.replace_ocr_asr(ocr, None)
    settings.update(ocr_engine="", vlm_model_id="")  # the deployment's OCR engine, no captions
    [outputs] = _describe(deps, _ingested(deps, kb, "a.md", _document("Alpha", LOGO)))
    assert outputs["ocr_chars"] == 0 and ocr.calls == 1
    [outputs] = _describe(deps, _ingested(deps, kb, "b.md", _document("Beta", LOGO)))
    assert (outputs["ocr_chars"], outputs["ocr_cached"]) == (7, 0) and ocr.calls == 2
    [outputs] = _describe(deps, _ingested(deps, kb, "c.md", _document("Gamma", LOGO)))
    assert (outputs["ocr_chars"], outputs["ocr_cached"]) == (7, 1) and ocr.calls == 2
    settings["ocr_languages"] = ["eng", "jpn"]
    [outputs] = _describe(deps, _ingested(deps, kb, "d.md", _document("Delta", LOGO)))
    assert outputs["ocr_cached"] == 0 and ocr.calls == 3
    assert vision.prompts == []


def test_the_files_bucket_expires_the_cached_image_texts() -> None:
    """No tenant deletion exists; a deleted document's cached texts (shared by content with the tenant's other
    documents) go with the prefix's lifecycle rule."""
    template = json.loads((Path(__file__).parents[2] / "infra" / "template.json").read_text())
    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    [rule] = [r for r in rules if r.get("Prefix") == IMAGE_TEXTS_PREFIX]
    assert rule["Status"] == "Enabled" and 0 < rule["ExpirationInDays"] <= 30


def test_an_image_task_reads_its_bound_chunk_by_key_not_every_chunk_of_the_document(
    deps: Services,
    tenant: Tenant,
    settings: dict[str, Any],
    vision: CountingVision,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(
            name="long",
            chunking_config=ChunkingSettings(chunk_size=300, chunk_overlap=0),
        ),
    )
    colours = [(200, 80, 20), (20, 80, 200), (20, 200, 80)]
    knowledge = _ingested(deps, kb, "long.md", _document("Long", *(_png(c) for c in colours), filler=30))
    texts = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    assert len(texts) > 6
    listings: list[str] = []
    real_list, real_page = deps.chunks.list, deps.chunks.list_page
    monkeypatch.setattr(deps.chunks, "list", lambda *a, **k: listings.append("list") or real_list(*a, **k))
    monkeypatch.setattr(
        deps.chunks, "list_page", lambda *a, **k: listings.append("list_page") or real_page(*a, **k)
    )
    outputs = _describe(deps, knowledge)
    assert listings == []
    assert [o["ocr_chars"] for o in outputs] == [25] * 3
    monkeypatch.setattr(deps.chunks, "list", real_list)
    workflow = deps.workflow
    assert isinstance(workflow, MemoryWorkflow)
    images = workflow.executions[execution_name(knowledge.id, knowledge.attempt)].payload["images"]
    for image in images:  # bound to the first text chunk that shows the image, as before
        shows = next(c for c in texts if image["url"] in c.content)
        assert shows.id != texts[0].id or image["index"] == 0
        for tag in ("ocr", "cap"):
            chunk_id = image_chunk_id(knowledge.id, knowledge.attempt, image["index"], tag)
            chunk = deps.chunks.get_many([(knowledge.id, chunk_id)])[(knowledge.id, chunk_id)]
            assert chunk.parent_chunk_id == shows.id
            assert (chunk.start_at, chunk.end_at) == (shows.start_at, shows.end_at)


def test_an_image_the_page_ranges_share_is_handed_over_once(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, workflow: MemoryWorkflow
) -> None:
    """A large PDF is parsed in page ranges, each listing the images it met: a logo on every page is one
    object (its key is named by its bytes) listed once per range, and is described once."""
    created = chunked(deps, kb, "big.md", "# Big\n\nA long report.")
    logo, chart = "mem://files/t/exports/logo.png", "mem://files/t/exports/chart.png"
    manifest = [{"url": logo}, {"url": chart}, {"url": logo}, {"url": logo}]
    files.save(images_manifest_key(kb.tenant_id, created.id, 1), json.dumps(manifest).encode())
    deliver(deps, "embedding")
    images = workflow.executions[execution_name(created.id, 1)].payload["images"]
    assert [(image["index"], image["url"]) for image in images] == [(0, logo), (1, chart)]


def test_a_catalog_name_pointed_at_another_model_pays_again(
    deps: Services,
    kb: KnowledgeBase,
    settings: dict[str, Any],
    vision: CountingVision,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The recipe names the model the catalog resolves the name to, not the tenant's name for it."""
    _describe(deps, _ingested(deps, kb, "a.md", _document("Alpha", LOGO)))
    repointed = CountingVision()
    repointed.model_id = "bedrock/another-model"  # the operator's catalog now maps "vl" there
    monkeypatch.setattr(deps, "vision_model", lambda name: repointed)
    [outputs] = _describe(deps, _ingested(deps, kb, "b.md", _document("Beta", LOGO)))
    assert (outputs["ocr_cached"], outputs["caption_cached"]) == (0, 0)
    assert (repointed.ocr_calls(), repointed.caption_calls()) == (1, 1)


def test_the_hand_over_does_not_look_for_bound_chunks_when_no_image_will_be_described(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Multimodal off (the default): every image task is skipped, so the walk over the chunks is not made."""
    assert not kb.enrichment.enable_multimodel
    walks: list[Any] = []
    real = embedding.bound_text_chunks
    monkeypatch.setattr(embedding, "bound_text_chunks", lambda *args: walks.append(args) or real(*args))
    _ingested(deps, kb, "a.md", _document("Alpha", LOGO))
    assert walks == []
