"""Typed inputs of the operations: what each request body must be, validated at the boundary (pydantic).

The API parses every body into one of these models before an operation runs, and the OpenAPI document
(`GET /api/v1/openapi.json`) is generated from the same models, so the documentation and the validation
cannot drift apart. A field that fails validation gives a 400 with the field's stable code
(`x-error-code` in the schema), or `invalid_body`.

Over 600 lines: every body of the API in one module, so the field types and codes are shared and the OpenAPI
document is made from one place (the search filters alone are some 80 lines).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from chalicelib.domain import strict_json
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.parser_engines import engine_rule_problems
from chalicelib.domain.request_limits import MAX_REQUESTS_PER_SECOND
from chalicelib.domain.storage_keys import MAX_TITLE, NOT_ONE_LINE  # a title is one line, as a file name is
from chalicelib.domain.tags import MAX_TAGS_PER_DOCUMENT

B = TypeVar("B", bound=BaseModel)

MAX_METADATA_BYTES = 64 * 1024
MAX_METADATA_DEPTH = 8
MAX_TAGS = MAX_TAGS_PER_DOCUMENT
MAX_MODEL_ID = 300


def code(error_code: str, **kwargs: Any) -> Any:
    """A field with a stable error code (shown in the schema as `x-error-code`)."""
    extra = dict(kwargs.pop("json_schema_extra", None) or {})
    extra["x-error-code"] = error_code
    return Field(json_schema_extra=extra, **kwargs)


def _depth(value: Any, level: int = 0) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level + 1)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level + 1)
    return level


def _bounded_metadata(value: dict[str, Any]) -> dict[str, Any]:
    if _depth(value) > MAX_METADATA_DEPTH:
        raise ValueError(f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")
    if len(json.dumps(value, ensure_ascii=False).encode()) > MAX_METADATA_BYTES:
        raise ValueError(f"metadata is larger than {MAX_METADATA_BYTES} bytes")
    return value


def _form_metadata(value: Any) -> Any:
    """A multipart form carries metadata as a JSON string ("" for none)."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return {}
    try:
        value = strict_json.loads(value)
    except (ValueError, RecursionError) as error:
        raise ValueError("metadata must be a JSON object") from error
    if not isinstance(value, dict):
        raise ValueError("metadata must be a JSON object")
    return value


def _cleaned_tags(value: list[str]) -> list[str]:
    return [t.strip() for t in value if t.strip()]


def _form_tag_ids(value: Any) -> Any:
    """A multipart form carries tag_ids as a JSON array or, as WeKnora's form does, a comma-separated list."""
    if not isinstance(value, str):
        return value
    if value.lstrip().startswith("["):
        try:
            value = strict_json.loads(value)
        except (ValueError, RecursionError) as error:
            raise ValueError("tag_ids is not a valid JSON array") from error
        if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
            raise ValueError("tag_ids must be a list of strings or a comma-separated string")
        return value
    return value.split(",")


#: JSON bodies: an object, and a list of strings; a string in their place is a 400, never read as "none"
Metadata = Annotated[dict[str, Any], AfterValidator(_bounded_metadata)]
TagIds = Annotated[
    list[Annotated[str, Field(max_length=64)]], Field(max_length=MAX_TAGS), AfterValidator(_cleaned_tags)
]
#: the multipart form's conveniences (its fields are strings): metadata as JSON text, tags comma-separated
FormMetadata = Annotated[Metadata, BeforeValidator(_form_metadata)]
FormTagIds = Annotated[TagIds, BeforeValidator(_form_tag_ids)]
ModelId = Annotated[str, Field(max_length=MAX_MODEL_ID)]


def _one_line(value: str) -> str:
    if NOT_ONE_LINE.search(value):
        raise ValueError(
            "must not hold control characters (ESC, a tab, a line break, a bidirectional override, ...)"
        )
    return value.strip()


def _not_blank(value: str) -> str:
    if not value:
        raise ValueError("must not be blank")
    return value


#: a name or title: one line of printable text, without the spaces around it (400 with the field's own code
#: otherwise); blank is allowed where blank means "none" or "derive it"
OneLine = Annotated[str, AfterValidator(_one_line)]
#: a name or title that must say something
NonBlankLine = Annotated[OneLine, AfterValidator(_not_blank)]


#: a media type as an HTTP header takes it: `type/subtype` and `; name=value` parameters, printable ASCII
#: tokens (a value may be quoted); it is signed into the presigned PUT and handed back as a header to send
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE = re.compile(rf'{_TOKEN}/{_TOKEN}(?: *; *{_TOKEN}=(?:{_TOKEN}|"[ !#-\[\]-~]*"))*')
MAX_CONTENT_TYPE = 200


def _media_type(value: str) -> str:
    if value and not _MEDIA_TYPE.fullmatch(value):
        raise ValueError(
            "content_type must be a media type such as application/pdf (type/subtype[; name=value])"
        )
    return value


ContentType = Annotated[str, AfterValidator(_media_type)]


def _honourable_engine_rules(rules: dict[str, str]) -> dict[str, str]:
    problems = engine_rule_problems(rules)
    if problems:
        raise ValueError("; ".join(problems))
    return rules


EngineRules = Annotated[
    dict[
        Annotated[str, Field(min_length=1, max_length=16)], Annotated[str, Field(min_length=1, max_length=32)]
    ],
    Field(max_length=64),
    AfterValidator(_honourable_engine_rules),
]
#: how xlsx/xls sheets are written: "table", one Markdown table per sheet with its header row once (as CSV);
#: "rows", WeKnora's `header: value, …` line per row, which repeats the column names on every row
SpreadsheetLayout = Annotated[
    Literal["table", "rows"],
    Field(
        description='xlsx/xls as one Markdown table per sheet ("table", the default) or a `header: value, …` '
        'line per row ("rows", WeKnora\'s layout)'
    ),
]


def _in_utc(moment: datetime) -> datetime:
    """The moment in UTC (a time without a zone is taken as UTC). One UTC cannot hold (year 1 at +14:00,
    year 9999 at -14:00) is refused here, not met later as an overflow."""
    try:
        return (moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment).astimezone(UTC)
    except OverflowError as error:
        raise ValueError("the time is out of range once in UTC") from error


UtcTime = Annotated[datetime, AfterValidator(_in_utc)]
#: values are checked against the allow-list by domain.languages (a 400 `invalid_ocr_languages`)
OcrLanguages = Annotated[list[Annotated[str, Field(max_length=16)]], Field(max_length=16)]


class Body(BaseModel):
    """A request body: unknown fields and wrong types are errors, never silently coerced."""

    model_config = ConfigDict(extra="forbid", strict=True)


class ChunkingSettings(Body):
    """Chunking settings of a knowledge base, or an upload's overrides of them (unset keeps the KB's)."""

    chunk_size: int | None = Field(default=None, ge=1, le=7500)
    chunk_overlap: int | None = Field(default=None, ge=0, le=3750)
    separators: list[Annotated[str, Field(min_length=1, max_length=32)]] | None = Field(
        default=None, min_length=1, max_length=20
    )
    strategy: Literal["recursive", "heading", "heuristic", "auto"] | None = None
    enable_parent_child: bool | None = None
    parent_chunk_size: int | None = Field(default=None, ge=64, le=32_000)
    child_chunk_size: int | None = Field(default=None, ge=16, le=7500)
    token_limit: int | None = Field(default=None, ge=0, le=100_000)
    language: str | None = Field(default=None, max_length=16)
    parser_engine_rules: EngineRules | None = None

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


#: a language name or tag the caption is written in ("English", "zh-CN"); the prompt names it as given
CaptionLanguage = Annotated[str, Field(max_length=32, pattern=r"^[A-Za-z][A-Za-z -]{0,31}$|^$")]
CaptionInstructions = Annotated[str, Field(max_length=1000)]


class QuestionGeneration(Body):
    enabled: bool = False
    question_count: int = Field(default=3, ge=1, le=10)


class ProcessConfig(Body):
    """Per-upload overrides of the knowledge base's processing settings (persisted on the row)."""

    chunking: ChunkingSettings | None = None
    enable_multimodel: bool | None = None
    vlm_model_id: ModelId | None = None
    asr_model_id: ModelId | None = None
    ocr_engine: Literal["default", "vlm", "none"] | None = None
    #: tesseract codes (chalicelib/domain/languages.py); checked in check_enrichment
    ocr_languages: OcrLanguages | None = None
    asr_language: str | None = Field(default=None, max_length=8)
    spreadsheet_layout: SpreadsheetLayout | None = None
    #: WeKnora's builtin-engine override: false reads an xlsx/xls sheet's first row as data (columns named
    #: col1, col2, …); other engines ignore it, as WeKnora's do
    xlsx_first_row_as_header: bool | None = None
    #: the upload's caption language and instructions; blank ones inherit the knowledge base's
    caption_language: CaptionLanguage | None = None
    caption_instructions: CaptionInstructions | None = None
    question_generation: QuestionGeneration | None = None
    graph_enabled: bool | None = None
    parser_engine_rules: EngineRules | None = None
    summary_enabled: bool | None = None

    def overrides(self, enable_multimodel: bool | None = None) -> dict[str, Any]:
        """The overrides as stored; `process_config` wins over the form flag (spec §1.1)."""
        data = self.model_dump(exclude_none=True)
        if enable_multimodel is not None and "enable_multimodel" not in data:
            data["enable_multimodel"] = enable_multimodel
        return data


def _process_config(value: Any) -> Any:
    if isinstance(value, str):  # multipart forms carry process_config as a JSON string
        if not value.strip():
            return None
        try:
            return strict_json.loads(value)
        except (ValueError, RecursionError) as error:
            raise ValueError("process_config must be a JSON object") from error
    return value


#: the multipart form carries process_config as a JSON string; a JSON body sends the object itself
FormProcessConfig = Annotated[ProcessConfig | None, BeforeValidator(_process_config)]


class EnrichmentBody(Body):
    enable_multimodel: bool = False
    questions_enabled: bool = False
    question_count: int = Field(default=3, ge=1, le=10)
    graph_relation_types: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(
        default_factory=list, max_length=50
    )
    auto_tag_enabled: bool = False
    max_tags: int = Field(default=3, ge=1, le=10)
    auto_tag_skip_if_tagged: bool = True
    caption_language: CaptionLanguage = ""
    caption_instructions: CaptionInstructions = ""


class IndexingStrategySettings(Body):
    vector_enabled: bool = True
    keyword_enabled: bool = True
    wiki_enabled: bool = False
    graph_enabled: bool = False

    def nothing_indexed(self) -> bool:
        return not (self.vector_enabled or self.keyword_enabled or self.wiki_enabled or self.graph_enabled)


class FaqIndexBody(Body):
    index_mode: Literal["question_only", "question_answer"] = "question_only"
    question_index_mode: Literal["separate", "combined"] = "separate"


class CreateKnowledgeBase(Body):
    name: NonBlankLine = code("invalid_name", min_length=1, max_length=200)
    description: str = code("invalid_description", default="", max_length=10_000)
    type: Literal["document", "faq"] = code("invalid_kb_type", default="document")
    chunking_config: ChunkingSettings | None = code("invalid_chunking_config", default=None)
    indexing_strategy: IndexingStrategySettings | None = code("invalid_indexing_strategy", default=None)
    embedding_model_id: ModelId = code("invalid_model_id", default="")
    summary_model_id: ModelId = code("invalid_model_id", default="")
    vlm_model_id: ModelId = code("invalid_model_id", default="")
    asr_model_id: ModelId = code("invalid_model_id", default="")
    ocr_languages: OcrLanguages = code("invalid_ocr_languages", default_factory=list)
    asr_language: str = code("invalid_asr_language", default="", max_length=8)
    spreadsheet_layout: SpreadsheetLayout = code("invalid_spreadsheet_layout", default="table")
    retrieval_engine: Literal["", "embedded", "opensearch"] = code("invalid_engine", default="")
    #: a storage backend the operator configured (its id), where the documents' objects are kept; "" = the
    #: default backend (400 unknown_storage_backend for an id not configured here)
    storage_backend: str = code("invalid_storage_backend", default="", max_length=63)
    enrichment: EnrichmentBody | None = code("invalid_enrichment", default=None)
    #: FAQ knowledge bases: how entries are indexed (fixed at creation)
    faq_index: FaqIndexBody | None = code("invalid_faq_index", default=None)


class UpdateKnowledgeBase(Body):
    """PUT /knowledge-bases/{id}: only the given fields change (nested settings merge over the current ones).
    `apply_to` is the specification's scope: `new` documents only, or `reparse` every document now."""

    name: NonBlankLine | None = code("invalid_name", default=None, min_length=1, max_length=200)
    description: str | None = code("invalid_description", default=None, max_length=10_000)
    chunking_config: ChunkingSettings | None = code("invalid_chunking_config", default=None)
    indexing_strategy: IndexingStrategySettings | None = code("invalid_indexing_strategy", default=None)
    embedding_model_id: ModelId | None = code("invalid_model_id", default=None)
    summary_model_id: ModelId | None = code("invalid_model_id", default=None)
    vlm_model_id: ModelId | None = code("invalid_model_id", default=None)
    asr_model_id: ModelId | None = code("invalid_model_id", default=None)
    ocr_languages: OcrLanguages | None = code("invalid_ocr_languages", default=None)
    asr_language: str | None = code("invalid_asr_language", default=None, max_length=8)
    spreadsheet_layout: SpreadsheetLayout | None = code("invalid_spreadsheet_layout", default=None)
    retrieval_engine: Literal["", "embedded", "opensearch"] | None = code("invalid_engine", default=None)
    #: new documents only: the existing ones keep their objects where they are ("" = the default backend)
    storage_backend: str | None = code("invalid_storage_backend", default=None, max_length=63)
    enrichment: EnrichmentBody | None = code("invalid_enrichment", default=None)
    apply_to: Literal["new", "reparse"] = code("invalid_apply_to", default="new")
    #: a new embedding model or engine builds the new index beside the old one first (a durable task)
    reembed: bool = code("invalid_body", default=False)


class FileUploadForm(Body):
    """The multipart upload's fields besides `file` (WeKnora's names)."""

    model_config = ConfigDict(extra="forbid", strict=False, populate_by_name=True)

    file_name: str | None = code("invalid_file_name", default=None, alias="fileName", max_length=1024)
    metadata: FormMetadata = code("invalid_metadata", default_factory=dict)
    enable_multimodel: bool | None = code("invalid_form", default=None)
    tag_ids: FormTagIds = code("invalid_tag_ids", default_factory=list)
    process_config: FormProcessConfig = code("invalid_process_config", default=None)
    channel: str = code("invalid_form", default="api", max_length=32)


class UploadUrlRequest(Body):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    file_name: str = code("missing_file_name", alias="fileName", min_length=1, max_length=1024)
    file_size: int | None = code("invalid_file_size", default=None, ge=1)
    content_type: ContentType = code("invalid_content_type", default="", max_length=MAX_CONTENT_TYPE)
    metadata: Metadata = code("invalid_metadata", default_factory=dict)
    tag_ids: TagIds = code("invalid_tag_ids", default_factory=list)
    enable_multimodel: bool | None = code("invalid_body", default=None)
    process_config: ProcessConfig | None = code("invalid_process_config", default=None)


class UrlImportRequest(Body):
    url: str = code("invalid_url", min_length=1, max_length=2048)
    file_name: str = code("invalid_file_name", default="", max_length=1024)
    file_type: str = code("invalid_file_type", default="", max_length=16)
    title: OneLine = code("invalid_title", default="", max_length=MAX_TITLE)
    enable_multimodel: bool | None = code("invalid_body", default=None)
    tag_ids: TagIds = code("invalid_tag_ids", default_factory=list)
    channel: str = code("invalid_channel", default="api", max_length=32)
    process_config: ProcessConfig | None = code("invalid_process_config", default=None)


class ManualRequest(Body):
    title: OneLine = code("invalid_title", default="", max_length=MAX_TITLE)
    content: str = code("empty_content", default="", max_length=1_000_000)
    status: Literal["draft", "publish"] = code("invalid_status", default="publish")
    tag_ids: TagIds = code("invalid_tag_ids", default_factory=list)
    channel: str = code("invalid_channel", default="api", max_length=32)
    process_config: ProcessConfig | None = code("invalid_process_config", default=None)


class ReparseRequest(Body):
    process_config: ProcessConfig | None = code("invalid_process_config", default=None)


#: a metadata value a search filter compares with (JSON scalars; no coercion: "2024" is not 2024)
MetadataScalar = Annotated[str, Field(max_length=1000)] | int | float | bool
MAX_FILTER_VALUES = 100
MAX_METADATA_FILTER_KEYS = 20


class MetadataIn(Body):
    """`{"in": [...]}`: the field equals one of the values."""

    in_: list[MetadataScalar] = Field(alias="in", min_length=1, max_length=MAX_FILTER_VALUES)


#: a metadata field name; dots walk into nested objects (`author.name`), so no part is empty (`a..b`)
MetadataKey = Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[^.\s]+(?:\.[^.\s]+)*$")]


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not (isinstance(value, float) and value != value)


def _metadata_filter(value: Any) -> Any:
    """Readable messages for the shapes people get wrong; the typed schema below checks the rest."""
    if not isinstance(value, dict):
        return value
    for key, condition in value.items():
        if isinstance(condition, dict):
            if set(condition) != {"in"} or not isinstance(condition["in"], list) or not condition["in"]:
                raise ValueError(f'{key}: a condition is {{"in": [values]}} with at least one value')
            if not all(_scalar(v) for v in condition["in"]):
                raise ValueError(f"{key}: each `in` value is a string, a number or a boolean")
        elif not _scalar(condition):
            raise ValueError(f'{key}: a value is a string, a number, a boolean or {{"in": [values]}}')
    return value


MetadataFilter = Annotated[
    dict[MetadataKey, MetadataScalar | MetadataIn],
    BeforeValidator(_metadata_filter),
    Field(max_length=MAX_METADATA_FILTER_KEYS),
]
#: ids are uuids and the like; `#` separates the parts of the tables' keys, so an id holding one could
#: reach into another key's range (a tag id + "#<created_at>" matched the tag's relations and crashed)
FilterIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_-]+$")]],
    Field(min_length=1, max_length=MAX_FILTER_VALUES),
]
FileType = Annotated[str, Field(min_length=1, max_length=16, pattern=r"^\.?[A-Za-z0-9]+$")]


class SearchRequest(Body):
    """A search of one knowledge base. Filters combine with AND; the values of one filter with OR (any of
    the knowledge ids, any of the tags, any of the file types); every metadata key must match. `retriever`
    picks the lists: `hybrid` (BM25 and vector, fused; `vector_weight` is the vector list's share, default
    the engine's 0.4), `keyword` (BM25 alone: each score over the best hit's) or `vector` (the cosine).
    Hits scoring 0 or below `min_score` are left out. `max_chunks_per_document` keeps one document's many
    similar chunks (a sheet's rows) from filling the answer."""

    query_text: str = code("missing_query", min_length=1, max_length=10_000)
    match_count: int = code("invalid_match_count", default=10, ge=1, le=100)
    knowledge_ids: FilterIds | None = code(
        "invalid_knowledge_ids", default=None, description="only these documents (any of them)"
    )
    tag_ids: FilterIds | None = code(
        "invalid_tag_ids", default=None, description="only documents with any of these tags"
    )
    file_types: list[FileType] | None = code(
        "invalid_file_types",
        default=None,
        min_length=1,
        max_length=MAX_FILTER_VALUES,
        description='only documents of these types ("pdf", ".docx"; case does not matter)',
    )
    metadata: MetadataFilter | None = code(
        "invalid_metadata_filter",
        default=None,
        min_length=1,
        description=(
            'document metadata: `{"dept": "ops", "year": {"in": [2024, 2025]}}`; a value equals the field '
            "(or an element of a list field); dots walk nested objects (`author.name`)"
        ),
    )
    min_score: float = code("invalid_min_score", default=0.0, ge=0.0, le=1.0)
    retriever: Literal["hybrid", "vector", "keyword"] = code("invalid_retriever", default="hybrid")
    vector_weight: float | None = code("invalid_vector_weight", default=None, ge=0.0, le=1.0)
    collapse_copies: bool = code(
        "invalid_collapse_copies",
        default=False,
        description=(
            "a hit whose text repeats a better hit of another document is listed in that hit's `copies` "
            "instead of taking a place of its own"
        ),
    )
    max_chunks_per_document: int | None = code(
        "invalid_max_chunks_per_document",
        default=None,
        ge=1,
        le=100,
        description=(
            "at most this many hits of one document while other documents have hits to offer (a document's "
            "further hits fill the answer only when too few others match); default: no cap"
        ),
    )

    @field_validator("min_score", "vector_weight", mode="before")
    @classmethod
    def _number(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):  # 0 and 1 are numbers too (strict mode)
            try:
                return float(value)
            except OverflowError:  # past a float's range (1e308): pydantic reports only ValueError
                raise ValueError("the number is out of range") from None
        return value

    @field_validator("file_types")
    @classmethod
    def _file_types(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else list(dict.fromkeys(t.lstrip(".").lower() for t in value))

    @property
    def has_knowledge_filter(self) -> bool:
        """A filter the knowledge rows answer (tags, file types, metadata), beside the ids."""
        return bool(self.tag_ids or self.file_types or self.metadata)

    @field_validator("query_text")
    @classmethod
    def _query(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query_text must not be blank")
        return value.strip()


class ChunkPreviewRequest(Body):
    text: str = code("text_too_long", default="", max_length=2_000_000)
    knowledge_id: str = code("invalid_body", default="", max_length=200)
    kb_id: str = code("invalid_body", default="", max_length=200)
    chunking_config: ChunkingSettings | None = code("invalid_chunking_config", default=None)
    limit: int = code("invalid_limit", default=500, ge=1, le=500)


class TenantSettingsRequest(Body):
    parser_engine_rules: EngineRules = code("invalid_engine_rules", default_factory=dict)


#: every body field that names a model, by the kind of model it names (checked against the catalog at the
#: API boundary for every route: see `named_models`)
MODEL_FIELDS = {
    "embedding_model_id": "embedding",
    "summary_model_id": "chat",
    "vlm_model_id": "vision",
    "asr_model_id": "asr",
}


def named_models(body: BaseModel) -> list[tuple[str, str]]:
    """(kind, name) of every model a body names, nested settings included."""
    found: list[tuple[str, str]] = []
    for name in type(body).model_fields:
        value = getattr(body, name)
        if name in MODEL_FIELDS and isinstance(value, str) and value:
            found.append((MODEL_FIELDS[name], value))
        elif isinstance(value, BaseModel):
            found += named_models(value)
    return found


def validate(model: type[B], data: Any) -> B:
    """`data` as `model`, or a BadRequest with the first failing field's stable code."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise bad_request(model, error) from None


#: what pydantic puts before the message a validator raised: the reader needs only the message
_PYDANTIC_PREFIXES = ("Value error, ", "Assertion failed, ")


def _for_people(message: str) -> str:
    for prefix in _PYDANTIC_PREFIXES:
        message = message.removeprefix(prefix)
    return message


def bad_request(model: type[BaseModel], error: ValidationError) -> BadRequest:
    # a field reported by its alias (WeKnora's `fileName`) is named as the README spells it
    names = {f.alias: n for n, f in model.model_fields.items() if f.alias}

    def path(loc: tuple[int | str, ...]) -> list[str]:
        # a location holds the client's own keys (a metadata key, an unknown field): each cut short, or a 4 MB
        # key echoed twice would make an answer past Lambda's 6 MB (a 502 instead of the 400)
        parts = [str(part) if len(str(part)) <= 64 else f"{str(part)[:64]}…" for part in loc]
        return [names.get(parts[0], parts[0]), *parts[1:]] if parts else parts

    errors = error.errors(include_url=False, include_input=False)
    first = errors[0]
    location = path(first["loc"])
    field = model.model_fields.get(location[0]) if location else None
    extra = field.json_schema_extra if field is not None else None
    error_code = str(extra.get("x-error-code", "invalid_body")) if isinstance(extra, dict) else "invalid_body"
    if first["type"] == "extra_forbidden" and len(location) == 1:
        error_code = "invalid_body"  # a field the body does not have, not the field of the same name
    where = ".".join(location) or "body"
    details = [{"field": ".".join(path(e["loc"])), "message": _for_people(e["msg"])} for e in errors[:20]]
    return BadRequest(f"{where}: {_for_people(first['msg'])}", code=error_code, details=details)


class Query(BaseModel):
    """Query-string parameters: values arrive as strings, so numbers are parsed (not strict)."""

    model_config = ConfigDict(extra="ignore")


class ListKnowledgeQuery(Query):
    """Filters combine (AND). A page is read through a GSI; `next_cursor` continues it (opaque, bound to
    the filters). `page` > 1 without a cursor is kept for old clients."""

    page: int = code("invalid_query", default=1, ge=1, le=100)
    page_size: int = code("invalid_query", default=20, ge=1, le=100)
    cursor: str | None = code("invalid_cursor", default=None, max_length=2000)
    tag_id: str | None = code("invalid_query", default=None, min_length=1, max_length=64)
    parse_status: (
        Literal[
            "draft", "pending", "processing", "finalizing", "completed", "failed", "cancelled", "deleting"
        ]
        | None
    ) = code("invalid_query", default=None)
    file_type: str | None = code("invalid_query", default=None, min_length=1, max_length=16)
    source: Literal["file", "url", "manual"] | None = code("invalid_query", default=None)
    keyword: str | None = code("invalid_query", default=None, min_length=1, max_length=200)
    created_from: UtcTime | None = code("invalid_query", default=None)
    created_to: UtcTime | None = code("invalid_query", default=None)


class SpansQuery(Query):
    attempt: int | None = code("invalid_query", default=None, ge=1)


class ChunkListQuery(Query):
    cursor: str = code("invalid_cursor", default="", max_length=300)
    limit: int = code("invalid_query", default=50, ge=1, le=200)


class EditChunkRequest(Body):
    """A chunk's text (re-embedded, re-indexed; the summary is made again) and/or its switch."""

    content: str | None = code("empty_content", default=None, min_length=1, max_length=100_000)
    is_enabled: bool | None = code("invalid_body", default=None)


class FileUrlQuery(Query):
    kind: Literal["original", "parsed"] = code("invalid_query", default="original")


class DownloadGrant(BaseModel):
    """The answer of `GET /knowledge/{id}/file-url` (a response model: documented, never validated)."""

    url: str = Field(description="`<API base>/r/{token}`: no API key needed, it redirects to the file")
    kind: Literal["original", "parsed"]
    file_name: str
    expires_in: int = Field(description="seconds the link works")
    expires_at: str = Field(description="when the link stops working (ISO-8601 UTC)")
    resource: str = Field(description="the file's stable `resource://` id")


KnowledgeIds = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=100)]], Field(min_length=1, max_length=200)
]


class BatchDeleteRequest(Body):
    kb_id: str = code("invalid_body", min_length=1, max_length=100)
    ids: KnowledgeIds = code("invalid_ids")


class BatchReparseRequest(Body):
    kb_id: str = code("invalid_body", min_length=1, max_length=100)
    ids: KnowledgeIds = code("invalid_ids")
    process_config: ProcessConfig | None = code("invalid_process_config", default=None)


class EditKnowledgeRequest(Body):
    """Editable fields of a knowledge; `content` only for hand-written (manual) knowledge."""

    title: NonBlankLine | None = code("invalid_title", default=None, min_length=1, max_length=MAX_TITLE)
    description: str | None = code("invalid_description", default=None, max_length=10_000)
    metadata: Metadata | None = code("invalid_metadata", default=None)
    tag_ids: TagIds | None = code("invalid_tag_ids", default=None)
    enable_status: Literal["enabled", "disabled"] | None = code("invalid_enable_status", default=None)
    content: str | None = code("empty_content", default=None, max_length=1_000_000)


class GraphQuery(Query):
    entity: str = code("invalid_query", min_length=1, max_length=200)
    limit: int = code("invalid_query", default=50, ge=1, le=200)


class WikiQuery(Query):
    """One page of the wiki: up to `limit` page records and a part of the index; `next_cursor` goes on."""

    limit: int = code("invalid_query", default=1000, ge=1, le=1000)
    cursor: str | None = code("invalid_cursor", default=None, max_length=2000)


class MoveKnowledgeRequest(Body):
    """Move up to 200 knowledge of one knowledge base into another of the same type and embedding model."""

    source_kb_id: str = code("invalid_body", min_length=1, max_length=100)
    target_kb_id: str = code("invalid_body", min_length=1, max_length=100)
    ids: KnowledgeIds = code("invalid_ids")
    #: reuse_vectors: the index entries move with the knowledge (no embedding); reparse: ingested again
    mode: Literal["reuse_vectors", "reparse"] = code("invalid_mode", default="reuse_vectors")


class CloneKnowledgeBaseRequest(Body):
    """Clone into an existing knowledge base (`target_kb_id`) or a new one (`name`, default `<name> (copy)`)."""

    target_kb_id: str | None = code("invalid_body", default=None, min_length=1, max_length=100)
    name: NonBlankLine | None = code("invalid_name", default=None, min_length=1, max_length=200)


TagName = Annotated[str, Field(min_length=1, max_length=100)]
TagColor = Annotated[str, Field(max_length=32)]


def _tag_name(value: str) -> str:
    value = " ".join(value.split())  # tabs and line breaks become spaces; other controls are refused
    if not value:
        raise ValueError("name must not be blank")
    return _one_line(value)


class CreateTagRequest(Body):
    name: TagName = code("invalid_tag_name")
    color: TagColor = code("invalid_tag_color", default="")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _tag_name(value)


class UpdateTagRequest(Body):
    name: TagName | None = code("invalid_tag_name", default=None)
    color: TagColor | None = code("invalid_tag_color", default=None)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else _tag_name(value)


# ---------------------------------------------------------------- operators (/admin)

MAX_NAME = 100


def _known_queue(value: Any) -> Any:
    from chalicelib.settings import QUEUES

    if value is not None and value not in QUEUES:
        raise ValueError(f"queue must be one of {', '.join(QUEUES)}")
    return value


QueueName = Annotated[str, BeforeValidator(_known_queue)]


#: at most this many knowledge bases named on one key
MAX_KEY_KBS = 100
KeyScope = Literal["read", "write", "admin"]
KbIdList = list[Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]]


class KeyAccess(Body):
    """A key's access: its scope (`read` < `write` < `admin`, default `admin` as keys had before scopes) and,
    optionally, the only knowledge bases it may touch (others answer 404 as if they did not exist)."""

    scope: KeyScope = code("invalid_scope", default="admin")
    #: None: every knowledge base; an empty list would be a key that reaches nothing
    kb_ids: KbIdList | None = code("invalid_kb_ids", default=None, min_length=1, max_length=MAX_KEY_KBS)


class CreateTenantRequest(KeyAccess):
    name: NonBlankLine = code("invalid_name", min_length=1, max_length=MAX_NAME)
    #: a label for the tenant's first API key
    key_name: OneLine = code("invalid_name", default="", max_length=MAX_NAME)
    #: limits in bytes and documents; 0 = none
    storage_quota: int = code("invalid_quota", default=0, ge=0, le=2**50)
    document_quota: int = code("invalid_quota", default=0, ge=0, le=10**9)


class TenantQuotas(Body):
    """The operator's per-tenant limits; 0 = none (a request rate of 0: the deployment's,
    `WEKNORA_TENANT_REQUESTS_PER_SECOND`; left out, the rate set before stays: a client that knows only the
    two quotas does not clear it)."""

    storage_quota: int = code("invalid_quota", default=0, ge=0, le=2**50)
    document_quota: int = code("invalid_quota", default=0, ge=0, le=10**9)
    #: requests a second the tenant's API keys may make (counted in 10 s windows)
    requests_per_second: int | None = code("invalid_quota", default=None, ge=0, le=MAX_REQUESTS_PER_SECOND)


class IssueKeyRequest(KeyAccess):
    name: OneLine = code("invalid_name", default="", max_length=MAX_NAME)


class ShareRequest(Body):
    """Share a knowledge base, read-only, with another tenant."""

    tenant_id: str = code("invalid_tenant_id", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")


class BlockTenantRequest(ShareRequest):
    """Block an owner tenant: its shares with this tenant are removed and its next ones refused."""


class DeadLetterQuery(Query):
    queue: QueueName | None = code("invalid_queue", default=None)
    limit: int = code("invalid_limit", default=100, ge=1, le=1000)


class RedriveRequest(Body):
    #: one queue's DLQ, or every stage queue's when unset
    queue: QueueName | None = code("invalid_queue", default=None)
    limit: int = code("invalid_limit", default=100, ge=1, le=1000)
