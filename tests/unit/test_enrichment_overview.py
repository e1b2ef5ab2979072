"""`weknora-ingest up` says which enrichments the offered models allow and how to turn on the rest."""

from __future__ import annotations

import json

from chalicelib.services.offered import enrichment_overview
from chalicelib.settings import load_settings


def test_offline_defaults_name_what_is_off_and_how_to_turn_it_on() -> None:
    lines = enrichment_overview(load_settings({}), ocr_available=False, asr_available=True)
    text = "\n".join(lines)
    assert "summary: local/extractive (offline, extractive)" in text
    assert "questions, graph, wiki, auto-tag, table summaries: off (no chat model; WEKNORA_MODELS=" in text
    assert "image captions: off (no vision model" in text
    assert "image OCR: off (make system-deps" in text and "speech: on" in text


def test_offered_chat_and_vision_models_are_named() -> None:
    models = {"chat": {"llama": "openai/llama3@http://127.0.0.1:11434/v1"}, "vision": {"eye": "bedrock/x"}}
    settings = load_settings({"WEKNORA_MODELS": json.dumps(models)})
    text = "\n".join(enrichment_overview(settings, ocr_available=True, asr_available=False))
    assert "summary: llama (chat) or local/extractive (offline)" in text
    assert "with a KB's summary_model_id of llama" in text
    assert "image captions: with a KB's vlm_model_id of eye" in text
    assert "image OCR: on" in text and "speech: off" in text
