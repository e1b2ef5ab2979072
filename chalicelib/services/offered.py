"""What the operator offers a tenant: models by name (the catalog) and retrieval engines. A setting that
names something not offered (a model, an engine, a storage backend) is a 400 when it is given, not a knowledge base that fails every document."""

from __future__ import annotations

from typing import Any

from chalicelib.domain.errors import BadRequest
from chalicelib.settings import EXTRACTIVE_SUMMARY, MODEL_KINDS, Settings


def offered_models(settings: Settings) -> dict[str, list[str]]:
    """The model names a tenant may pick, per kind (the operator's catalog)."""
    return {kind: settings.models.catalog.names(kind) for kind in MODEL_KINDS}


def check_models(settings: Settings, **names: str) -> None:
    """Each given name (kind=name) must be a model the operator offers: a setting that cannot be honoured
    is a 400 now, not a knowledge base that fails every document later."""
    for kind, name in names.items():
        if name and settings.models.catalog.resolve(kind, name) is None:
            offered = ", ".join(settings.models.catalog.names(kind)) or "none"
            raise BadRequest(
                f"{kind} model {name!r} is not offered here (offered: {offered}); GET /api/v1/models lists them",
                code="unknown_model",
            )


def check_engine(settings: Settings, engine: str) -> None:
    if (engine or settings.retrieval_engine) == "embedded" and settings.on_lambda:
        raise BadRequest(
            "this deployment has no shared index: the embedded engine is local-only (deploy with OpenSearch)",
            code="engine_not_configured",
        )
    if engine == "opensearch" and not settings.opensearch_url:
        raise BadRequest(
            "retrieval_engine 'opensearch' is not configured on this deployment", code="engine_not_configured"
        )


def check_storage_backend(settings: Settings, backend_id: str) -> None:
    """A knowledge base may name only a storage backend the operator configured ("" = the default)."""
    if backend_id and settings.storage_backend(backend_id) is None:
        offered = ", ".join(b.id for b in settings.storage_backends) or "none"
        raise BadRequest(
            f"storage backend {backend_id!r} is not configured here (configured: {offered})",
            code="unknown_storage_backend",
        )


def check_override_models(settings: Settings, overrides: dict[str, Any]) -> None:
    """An upload's process_config may name a vision or speech model: the same catalog applies."""
    check_models(settings, vision=overrides.get("vlm_model_id", ""), asr=overrides.get("asr_model_id", ""))


def enrichment_overview(settings: Settings, *, ocr_available: bool, asr_available: bool) -> list[str]:
    """What enrichment the offered models allow, one line per part, and how to turn on what is off
    (printed by `weknora-ingest up`)."""
    chat = [name for name in settings.models.catalog.names("chat") if name != EXTRACTIVE_SUMMARY]
    vision = settings.models.catalog.names("vision")
    how = 'WEKNORA_MODELS=\'{"%s": {"mine": "openai/<model>@http://127.0.0.1:11434/v1"}}\''
    lines = [
        f"summary: {', '.join(chat)} (chat) or {EXTRACTIVE_SUMMARY} (offline)"
        if chat
        else f"summary: {EXTRACTIVE_SUMMARY} (offline, extractive)",
        f"questions, graph, wiki, auto-tag, table summaries: with a KB's summary_model_id of {', '.join(chat)}"
        if chat
        else "questions, graph, wiki, auto-tag, table summaries: off (no chat model; " + how % "chat" + ")",
        f"image captions: with a KB's vlm_model_id of {', '.join(vision)}"
        if vision
        else "image captions: off (no vision model; " + how % "vision" + ")",
        "image OCR: " + ("on" if ocr_available else "off (make system-deps installs tesseract)"),
        "speech: " + ("on" if asr_available else "off (install the asr extra)"),
    ]
    return lines
