"""The text chunk that shows an image carries it in its `image_info` (spec §1.9, §1.11): chunking lists the
stored images its text shows, in order, once each; each image's task then writes its caption and OCR text
into that entry (however often it is delivered), without touching the chunk's text; and a search hit on the
text chunk lists its images, signed, with their caption and OCR text."""

from __future__ import annotations

import base64
import io
from dataclasses import replace
from typing import Any

import pytest
from chalice.test import Client
from PIL import Image

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, EditChunkRequest, EnrichmentBody, SearchRequest, validate
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import Chunk, ChunkType, ParseStatus
from chalicelib.operations import search as search_module
from chalicelib.operations.chunks import edit_chunk
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.stages import multimodal

from .conftest import drain, task_body, upload

V1 = "/api/v1"
COLOURS = {"red": (200, 30, 30), "green": (30, 200, 30), "blue": (30, 30, 200)}


def _png(colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, format="PNG")
    return out.getvalue()


NAMES = {_png(colour): name for name, colour in COLOURS.items()}


def _image(name: str) -> str:
    return f"![{name}](data:image/png;base64,{base64.b64encode(_png(COLOURS[name])).decode()})"


class NamingOcr:
    name = "fake-ocr"

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        return f"label {NAMES[image]}"


class NamingVision:
    model_id = "bedrock/fake-vision"

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        return f"a {NAMES[image]} square"


def _document() -> bytes:
    filler = " ".join(["Cargo moves through the quay sheds every morning."] * 4)  # a chunk of its own
    return (
        f"# Harbour\n\n{_image('red')} {_image('green')} The northgate crane lifts containers.\n\n"
        f"{filler}\n\n{_image('blue')} The southgate lighthouse guides ferries.\n"
    ).encode()


def _texts(deps: Services, knowledge_id: str) -> list[Chunk]:
    return [c for c in deps.chunks.list(knowledge_id) if c.chunk_type == ChunkType.TEXT]


def test_text_chunks_list_their_images_and_then_their_captions_and_ocr_texts(
    deps: Services,
    client: Client,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant, key = create_tenant_with_key(deps, "harbour")
    deps.replace_ocr_asr(NamingOcr(), None)
    real = multimodal.resolve
    monkeypatch.setattr(multimodal, "resolve", lambda kb, o: replace(real(kb, o), vlm_model_id="vl"))
    monkeypatch.setattr(deps, "vision_model", lambda model_id: NamingVision())
    kb = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(
            name="docs",
            enrichment=EnrichmentBody(enable_multimodel=True),
            # a paragraph to a chunk
            chunking_config={"chunk_size": 300, "chunk_overlap": 0},
        ),
    )
    knowledge = upload(deps, kb, "harbour.md", _document())
    drain(deps)
    images = workflow.executions[execution_name(knowledge.id, knowledge.attempt)].payload["images"]
    url = {NAMES[deps.files.read(image["url"])]: image["url"] for image in images}
    assert sorted(url) == ["blue", "green", "red"]

    # after chunking: each text chunk lists the stored images its text shows, in order, once each
    before = _texts(deps, knowledge.id)
    for chunk in before:
        shown = sorted((u for u in url.values() if u in chunk.content), key=chunk.content.index)
        assert chunk.image_info == [{"url": u} for u in shown]
    northgate = next(c for c in before if url["red"] in c.content)
    southgate = next(c for c in before if "southgate" in c.content)
    assert northgate.id != southgate.id
    assert [i["url"] for i in northgate.image_info] == [url["red"], url["green"]]
    assert [i["url"] for i in southgate.image_info] == [url["blue"]]

    # each image task (one delivered twice) writes its texts into its bound text chunk's entry
    bodies = [task_body(knowledge, f"token-{i}", image=image) for i, image in enumerate(images)]
    for body in [*bodies, bodies[0]]:
        queue.send_raw("multimodal", body)
        assert queue.deliver("multimodal", multimodal.handle, deps)["batchItemFailures"] == []
    after = {c.id: c for c in _texts(deps, knowledge.id)}
    assert after[northgate.id].image_info == [
        {"url": url["red"], "ocr_text": "label red", "caption": "a red square"},
        {"url": url["green"], "ocr_text": "label green", "caption": "a green square"},
    ]
    assert after[southgate.id].image_info == [
        {"url": url["blue"], "ocr_text": "label blue", "caption": "a blue square"}
    ]
    for chunk in before:  # the text chunks' own text and place are as chunking wrote them
        assert (after[chunk.id].content, after[chunk.id].seq) == (chunk.content, chunk.seq)
        assert (after[chunk.id].start_at, after[chunk.id].end_at) == (chunk.start_at, chunk.end_at)

    # the chunk API shows them as a list of objects
    listed = client.http.get(f"{V1}/knowledge/{knowledge.id}/chunks", headers={"X-API-Key": key})
    assert listed.status_code == 200, listed.body
    by_id: dict[str, Any] = {c["id"]: c for c in listed.json_body["data"]["items"]}
    assert by_id[southgate.id]["image_info"] == after[southgate.id].image_info

    # a search hit on the text chunk lists its images, signed, with their texts
    request = validate(
        SearchRequest, {"query_text": "southgate lighthouse guides ferries", "match_count": 10}
    )
    hits = search_module.hybrid_search(deps, kb.tenant_id, kb.id, request)
    top = next(hit for hit in hits if hit["chunk_id"] == southgate.id)
    assert [(i["caption"], i["ocr_text"]) for i in top["images"]] == [("a blue square", "label blue")]
    assert top["images"][0]["url"].startswith("https://files.mem.invalid/")


def test_an_edit_that_takes_an_image_out_of_a_chunk_takes_it_out_of_its_image_info(deps: Services) -> None:
    tenant, _ = create_tenant_with_key(deps, "harbour")
    kb = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(name="docs", chunking_config={"chunk_size": 300, "chunk_overlap": 0}),
    )
    knowledge = upload(deps, kb, "harbour.md", _document())
    drain(deps)
    row = deps.knowledge.settle_plan(knowledge.id, knowledge.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    northgate = next(c for c in _texts(deps, knowledge.id) if len(c.image_info) == 2)
    kept, dropped = (str(info["url"]) for info in northgate.image_info)
    text = northgate.content.replace(dropped, "")
    assert kept in text and dropped not in text

    edited = edit_chunk(deps, tenant.id, knowledge.id, northgate.id, EditChunkRequest(content=text))
    assert [info["url"] for info in edited["image_info"]] == [kept]
    stored = deps.chunks.get_many([(knowledge.id, northgate.id)])[(knowledge.id, northgate.id)]
    assert stored.image_info == [{"url": kept}]
