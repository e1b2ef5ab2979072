"""Response models of answers whose `data` the operations build as plain dicts: documented in the OpenAPI
document (`openapi.route_responses`), never validated. A test sends each route and checks its real answer
against the document, so a field added to or dropped from a hit fails until the model says so."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, RootModel

MatchType = Literal["hybrid", "keyword", "vector"]


class _Answer(BaseModel):
    # every field listed: the document's schema forbids others, so an undocumented field fails the test
    model_config = ConfigDict(extra="forbid")


class SearchCopy(_Answer):
    """Another document's hit whose text repeats the hit it is listed under (`collapse_copies`)."""

    knowledge_id: str
    knowledge_title: str
    chunk_id: str
    score: float


class SearchImage(BaseModel):
    """An image of the hit's chunk: a signed link, with the chunk's other plain fields about it."""

    model_config = ConfigDict(extra="allow")

    url: str = Field(description="a signed download link (an internal storage URL is never shown)")


class DocumentHit(_Answer):
    """A hit of a document knowledge base's search: a chunk (a child chunk answers its parent's text)."""

    id: str = Field(description="the index entry's id")
    chunk_id: str
    knowledge_id: str
    knowledge_title: str
    content: str = Field(description="the chunk's text, internal storage URLs replaced by signed links")
    score: float
    match_type: MatchType = Field(description="which lists found it")
    chunk_type: str
    images: list[SearchImage]
    start_at: int | None = Field(description="where the chunk starts in the parsed document")
    end_at: int | None
    copies: list[SearchCopy] = Field(description="with `collapse_copies`: other documents' hits it repeats")


class FaqHit(_Answer):
    """A hit of an FAQ knowledge base's search: one entry, by its best-matching question."""

    id: str = Field(description="the entry's id")
    entry_id: str
    standard_question: str
    matched_question: str = Field(description="the entry's question the query matched best")
    similar_questions: list[str]
    answers: list[str]
    answer_all: bool
    tags: list[str]
    content: str = Field(description="the standard question")
    score: float
    negative_match: bool = Field(description="the query names a negative question: pushed below the others")
    match_type: MatchType


class SearchHits(RootModel[list[DocumentHit | FaqHit]]):
    """The hits of a search, best first: chunks of a document knowledge base, entries of an FAQ one."""
