"""Knowledge-base defaults merged with per-upload overrides (WeKnora's ResolveProcessConfig).

Overrides are persisted on the knowledge row and re-resolved by every worker, so a reparse runs with the
same settings as the upload did.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from chalicelib.domain.errors import BadRequest
from chalicelib.domain.filetypes import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from chalicelib.domain.languages import check_asr_language, check_ocr_languages
from chalicelib.domain.types import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    ChunkingConfig,
    KnowledgeBase,
)

CHUNKING_NUMBERS = ("chunk_size", "chunk_overlap", "parent_chunk_size", "child_chunk_size", "token_limit")


EXTRACTIVE_SUMMARY = "local/extractive"
OCR_ENGINES = ("", "default", "vlm", "none")


@dataclass
class EffectiveProcessConfig:
    chunking: ChunkingConfig
    enable_multimodel: bool = False
    vlm_model_id: str = ""
    asr_model_id: str = ""
    #: "" / "default": the deployment's OCR engine; "vlm": the vision model reads the text; "none": no OCR
    ocr_engine: str = ""
    #: tesseract languages for every page (the upload's, else the KB's); empty: detected per page
    ocr_languages: list[str] = field(default_factory=list)
    #: the spoken language (the upload's, else the KB's); "" = detected
    asr_language: str = ""
    #: xlsx/xls as one Markdown table per sheet ("table") or a `header: value, …` line per row ("rows")
    spreadsheet_layout: str = "table"
    #: the upload's builtin-engine override (WeKnora's): False reads a sheet's first row as data
    xlsx_first_row_as_header: bool = True
    questions_enabled: bool = False
    question_count: int = 3
    graph_enabled: bool = False
    graph_relation_types: list[str] = field(default_factory=list)
    wiki_enabled: bool = False
    summary_enabled: bool = True
    auto_tag_enabled: bool = False
    max_tags: int = 3
    auto_tag_skip_if_tagged: bool = True
    caption_language: str = ""
    caption_instructions: str = ""
    #: the chat model every LLM enrichment uses (the KB's summary model); "" = none configured
    chat_model_id: str = ""

    @property
    def has_chat_model(self) -> bool:
        return bool(self.chat_model_id) and self.chat_model_id != EXTRACTIVE_SUMMARY


def _chunking_override(base: ChunkingConfig, override: dict[str, Any]) -> ChunkingConfig:
    changes: dict[str, Any] = {}
    for name in CHUNKING_NUMBERS:
        value = override.get(name)
        # An explicit 0 overlap is honoured; other zeros mean "keep the KB value" as in WeKnora.
        if isinstance(value, int) and not isinstance(value, bool) and (value != 0 or name == "chunk_overlap"):
            changes[name] = value
    if override.get("separators"):
        changes["separators"] = [str(s) for s in override["separators"]]
    if override.get("strategy"):
        changes["strategy"] = str(override["strategy"])
    if "enable_parent_child" in override:
        changes["enable_parent_child"] = bool(override["enable_parent_child"])
    return replace(base, **changes)


def describes_images(effective: EffectiveProcessConfig, original: bool) -> bool:
    """Whether an image is read (OCR, caption): with multimodal on, or when it is the upload itself."""
    return effective.enable_multimodel or original


def resolve(kb: KnowledgeBase, overrides: dict[str, Any] | None) -> EffectiveProcessConfig:
    overrides = overrides or {}
    chunking = _chunking_override(kb.chunking_config, overrides.get("chunking") or {})
    if overrides.get("parser_engine_rules"):
        chunking = replace(chunking, parser_engine_rules=dict(overrides["parser_engine_rules"]))
    questions = dict(overrides.get("question_generation") or {})
    enrichment = kb.enrichment
    return EffectiveProcessConfig(
        chunking=chunking,
        enable_multimodel=bool(overrides.get("enable_multimodel", enrichment.enable_multimodel)),
        vlm_model_id=str(overrides.get("vlm_model_id") or kb.vlm_model_id),
        asr_model_id=str(overrides.get("asr_model_id") or kb.asr_model_id),
        ocr_engine=str(overrides.get("ocr_engine") or ""),
        ocr_languages=list(overrides.get("ocr_languages") or kb.ocr_languages),
        asr_language=str(overrides.get("asr_language") or kb.asr_language),
        spreadsheet_layout=str(overrides.get("spreadsheet_layout") or kb.spreadsheet_layout),
        xlsx_first_row_as_header=overrides.get("xlsx_first_row_as_header") is not False,
        questions_enabled=bool(questions.get("enabled", enrichment.questions_enabled)),
        question_count=int(questions.get("question_count", enrichment.question_count)),
        graph_enabled=bool(overrides.get("graph_enabled", kb.indexing_strategy.graph_enabled)),
        graph_relation_types=list(enrichment.graph_relation_types),
        wiki_enabled=kb.indexing_strategy.wiki_enabled,
        summary_enabled=bool(overrides.get("summary_enabled", True)),
        auto_tag_enabled=enrichment.auto_tag_enabled,
        max_tags=enrichment.max_tags,
        auto_tag_skip_if_tagged=enrichment.auto_tag_skip_if_tagged,
        # blank upload values inherit the knowledge base's (spec §1.5)
        caption_language=str(overrides.get("caption_language") or enrichment.caption_language),
        caption_instructions=str(overrides.get("caption_instructions") or enrichment.caption_instructions),
        chat_model_id=kb.summary_model_id,
    )


def check_enrichment(effective: EffectiveProcessConfig, *, ocr_available: bool) -> None:
    """Every accepted setting must change what happens: one that cannot be honoured is a 400 now."""
    if effective.ocr_engine not in OCR_ENGINES:
        raise BadRequest(
            f"ocr_engine must be one of {', '.join(e for e in OCR_ENGINES if e)}", code="invalid_setting"
        )
    check_ocr_languages(effective.ocr_languages)
    check_asr_language(effective.asr_language)
    if (effective.caption_language or effective.caption_instructions) and not effective.vlm_model_id:
        raise BadRequest(
            "caption_language and caption_instructions need a vision model (vlm_model_id)",
            code="setting_cannot_be_honoured",
        )
    if effective.ocr_engine == "vlm" and not effective.vlm_model_id:
        raise BadRequest(
            "ocr_engine 'vlm' needs a vision model (vlm_model_id)", code="setting_cannot_be_honoured"
        )
    if (
        effective.ocr_engine in ("", "default")
        and effective.enable_multimodel
        and not (ocr_available or effective.vlm_model_id)
    ):
        raise BadRequest(
            "enable_multimodel needs an OCR engine or a vision model (vlm_model_id)",
            code="setting_cannot_be_honoured",
        )
    needs_chat = {
        "question_generation": effective.questions_enabled,
        "graph extraction": effective.graph_enabled,
        "wiki pages": effective.wiki_enabled,
        "auto-tagging": effective.auto_tag_enabled,
    }
    for what, wanted in needs_chat.items():
        if wanted and not effective.has_chat_model:
            raise BadRequest(
                f"{what} needs a chat model: set the knowledge base's summary_model_id to one of GET /api/v1/models",
                code="setting_cannot_be_honoured",
            )


def check_media_gates(
    file_type: str, effective: EffectiveProcessConfig, *, ocr_available: bool, asr_available: bool
) -> None:
    """Images need a VLM or OCR, audio needs ASR: rejected up front, not after a wasted parse."""
    if file_type in IMAGE_EXTENSIONS and not (effective.vlm_model_id or ocr_available):
        raise BadRequest(
            "Image uploads need a vision model (vlm_model_id) or an OCR engine configured",
            code="image_needs_vlm_or_ocr",
        )
    if file_type in AUDIO_EXTENSIONS and not (effective.asr_model_id or asr_available):
        raise BadRequest(
            "Audio uploads need a speech-recognition model (asr_model_id) configured", code="audio_needs_asr"
        )


class MediaEngines(Protocol):
    """The deployment's own OCR and speech engines, if any (the Dependencies)."""

    def ocr(self) -> object | None: ...

    def asr(self) -> object | None: ...


def check_document_settings(
    engines: MediaEngines, kb: KnowledgeBase, overrides: dict[str, Any] | None, file_type: str | None
) -> EffectiveProcessConfig:
    """A document's settings (the knowledge base's, overlaid by its own) as every path that creates or
    reparses one checks them before it writes: 400 for one that could not be honoured. The media gates
    apply when the file type is known; the chunking rules to the chunking the overrides change."""
    effective = resolve(kb, overrides)
    check_chunking(effective.chunking, (overrides or {}).get("chunking") or {})
    ocr_available = engines.ocr() is not None
    if file_type:
        check_media_gates(
            file_type, effective, ocr_available=ocr_available, asr_available=engines.asr() is not None
        )
    check_enrichment(effective, ocr_available=ocr_available)
    return effective


#: the fields each chunking rule compares (a rule is checked when one of its fields is given)
_SIZE_FIELDS = frozenset({"chunk_size", "chunk_overlap"})
_PARENT_CHILD_FIELDS = frozenset({"enable_parent_child", "parent_chunk_size", "child_chunk_size"})


def check_chunking(config: ChunkingConfig, changed: Collection[str]) -> None:
    """Chunking settings that could not take effect are a 400 `invalid_chunking`, not silently adjusted: the
    overlap must be below the chunk size, and a parent chunk at least as large as its children. Only rules
    whose fields `changed` names are checked, so a knowledge base stored with odd settings before this
    rule still takes changes of its other settings (and still chunks, with the chunker's adjustments)."""
    problems = []
    if _SIZE_FIELDS & set(changed):
        size = config.chunk_size if config.chunk_size > 0 else DEFAULT_CHUNK_SIZE
        overlap = config.chunk_overlap if config.chunk_overlap >= 0 else DEFAULT_CHUNK_OVERLAP
        if overlap >= size:
            problems.append(f"chunk_overlap ({overlap}) must be smaller than chunk_size ({size})")
    if (
        _PARENT_CHILD_FIELDS & set(changed)
        and config.enable_parent_child
        and config.parent_chunk_size < config.child_chunk_size
    ):
        problems.append(
            f"parent_chunk_size ({config.parent_chunk_size}) must be at least child_chunk_size "
            f"({config.child_chunk_size}) with enable_parent_child"
        )
    if problems:
        raise BadRequest("; ".join(problems), code="invalid_chunking")


def engine_rules(
    kb: KnowledgeBase, tenant_rules: dict[str, str], overrides: dict[str, Any] | None
) -> dict[str, str]:
    """File type -> parser engine: the KB's rules, overlaid by the tenant's, overlaid by the upload's."""
    upload_rules = (overrides or {}).get("parser_engine_rules") or {}
    return {**kb.chunking_config.parser_engine_rules, **tenant_rules, **upload_rules}


def normalise_engine_rules(rules: dict[str, str]) -> dict[str, str]:
    """File types as lower-case extensions without the dot."""
    return {k.lower().lstrip("."): v for k, v in rules.items()}


def apply_chunking(base: ChunkingConfig | None, changes: dict[str, Any]) -> ChunkingConfig:
    """A ChunkingConfig with validated `changes` (commands.ChunkingSettings) over `base` (or defaults); the
    result must honour what `changes` set (`check_chunking`)."""
    known = set(ChunkingConfig.__dataclass_fields__)
    values = {k: v for k, v in changes.items() if k in known}
    if "parser_engine_rules" in values:
        values["parser_engine_rules"] = normalise_engine_rules(values["parser_engine_rules"])
    merged = replace(base or ChunkingConfig(), **values)
    check_chunking(merged, values)
    return merged
