"""The FAQ requests' typed bodies and queries (validated at the boundary; the OpenAPI document uses them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, model_validator

from chalicelib.commands import Body, Query, code

#: WeKnora's inline limits: more entries or more bytes go through a presigned upload
INLINE_MAX_ENTRIES = 200
INLINE_MAX_BYTES = 50 * 1024
IMPORT_FILE_TYPES = ("json", "csv", "xlsx")
#: an upload's object key: faq-imports/<tenant>/uploads/<knowledge base>/<32 hex>.<type> (uploads.py), or
#: faq-imports/<tenant>/<knowledge base>/uploads/<32 hex>.<type> for grants minted before that layout: the
#: bucket expires those 7 days after, then the second form can go
UPLOAD_KEY = (
    r"^faq-imports/[A-Za-z0-9_-]+/(?:uploads/[A-Za-z0-9_-]+|[A-Za-z0-9_-]+/uploads)"
    r"/[0-9a-f]{32}\.(?:json|csv|xlsx)$"
)

Question = Annotated[str, Field(max_length=1000)]
Answer = Annotated[str, Field(max_length=20_000)]
TagName = Annotated[str, Field(min_length=1, max_length=64)]
#: entry ids are uuids (uuid4 through the API, uuid5 for imported and cloned entries)
ENTRY_ID_OR_EMPTY = r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$"


class FaqEntryRequest(Body):
    standard_question: str = code("missing_question", min_length=1, max_length=1000)
    answers: list[Answer] = code("missing_answer", min_length=1, max_length=50)
    similar_questions: list[Question] = code(
        "invalid_similar_questions", default_factory=list, max_length=200
    )
    negative_questions: list[Question] = code(
        "invalid_negative_questions", default_factory=list, max_length=200
    )
    tags: list[TagName] = code("invalid_tags", default_factory=list, max_length=20)
    answer_all: bool = False
    is_enabled: bool = True


class FaqEntryUpdate(Body):
    """Only the fields given change."""

    standard_question: str | None = code("missing_question", default=None, min_length=1, max_length=1000)
    answers: list[Answer] | None = code("missing_answer", default=None, min_length=1, max_length=50)
    similar_questions: list[Question] | None = code("invalid_similar_questions", default=None, max_length=200)
    negative_questions: list[Question] | None = code(
        "invalid_negative_questions", default=None, max_length=200
    )
    tags: list[TagName] | None = code("invalid_tags", default=None, max_length=20)
    answer_all: bool | None = None
    is_enabled: bool | None = None


class FaqListQuery(Query):
    tag: str | None = code("invalid_query", default=None, max_length=64)
    keyword: str | None = code("invalid_query", default=None, max_length=200)
    enabled: Literal["true", "false"] | None = code("invalid_query", default=None)
    #: the `next_cursor` of the page before: an entry's id (a uuid), or '' for the first page
    cursor: str = code("invalid_query", default="", max_length=36, pattern=ENTRY_ID_OR_EMPTY)
    limit: int = code("invalid_query", default=20, ge=1, le=100)


class FaqTagsQuery(Query):
    #: the `next_cursor` of the page before: the last tag name it held
    cursor: str = code("invalid_query", default="", max_length=64)


class FaqImportRequest(Body):
    """`entries` inline (at most 200 and 50 KB), or `object_key` from `faq/import/upload-url`."""

    mode: Literal["append", "replace"] = code("invalid_mode", default="append")
    dry_run: bool = False
    entries: list[dict[str, Any]] | None = code("invalid_entries", default=None)
    #: exactly the form `upload-url` gives (a key store would read `./`, a tab or a NUL otherwise: a 500)
    object_key: str | None = code("invalid_object_key", default=None, max_length=500, pattern=UPLOAD_KEY)

    @model_validator(mode="after")
    def _one_source(self) -> FaqImportRequest:
        if (self.entries is None) == (self.object_key is None):
            raise ValueError("give either `entries` or `object_key`")
        return self


class FaqUploadUrlRequest(Body):
    file_name: str = code("invalid_file_name", min_length=1, max_length=255)


class FaqUploadGrant(BaseModel):
    """The answer of `faq/import/upload-url` (a response model: documented, never validated)."""

    url: str = Field(description="where the form is POSTed (multipart/form-data)")
    method: Literal["POST"]
    fields: dict[str, str] = Field(description="the form's fields, sent as they are before the file (`file`)")
    object_key: str = Field(description="the `object_key` of `faq/import` once the upload is done")
    expires_in: int = Field(description="seconds the form works")
    max_size: int = Field(description="the file's largest size in bytes: storage refuses a bigger upload")
