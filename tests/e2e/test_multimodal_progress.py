"""The multimodal stage's progress through the public path and the moto state machine: a document's images
are counted as its image Map finishes them, each once, though every image task is delivered twice."""

from __future__ import annotations

import base64
import json
from typing import Any

from scripted_llm import VISION, ScriptedLLM

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_enrichment import _png

IMAGES = 3


def _document() -> bytes:
    parts = ["# Harbour\n\nThe Northgate harbour has three berths; pilots guide ships past the breakwater."]
    for n, colour in enumerate(((200, 80, 20), (20, 80, 200), (20, 200, 80))):
        parts.append(f"![figure {n}](data:image/png;base64,{base64.b64encode(_png(colour)).decode()})")
    return "\n\n".join(parts).encode()


def _is_image_task(record: dict[str, Any]) -> bool:
    try:
        return "image" in json.loads(record["body"])
    except (ValueError, TypeError):
        return False


def test_images_done_reaches_images_total_once_though_each_image_is_delivered_twice(
    api: Api, runtime: LocalRuntime, services: Services, llm: ScriptedLLM
) -> None:
    kb = api.create_kb(vlm_model_id=VISION, enrichment={"enable_multimodel": True})
    runtime.inject_duplicates(_is_image_task)  # every image task runs twice
    try:
        created = api.upload(kb["id"], "harbour.md", _document()).json_body["data"]
        runtime.drain(timeout=300)
    finally:
        runtime.inject_duplicates(None)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    trace = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]["trace"]
    stage = next(s for s in trace if s["span_id"] == "multimodal")
    assert stage["outputs"]["images_total"] == IMAGES
    assert stage["progress"] is not None
    assert (stage["progress"]["done"], stage["progress"]["total"]) == (IMAGES, IMAGES)
    assert stage["progress"]["unit"] == "images"
    assert sorted(c["span_id"] for c in stage["children"]) == [
        f"multimodal.image[{i}]" for i in range(IMAGES)
    ]
