"""The FAQ entry record and the index entries it is searched by."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.faq_normalise import content_hash
from chalicelib.domain.types import ChunkType, FaqIndexSettings, utcnow

#: `source_type` of an FAQ entry's index entries
FAQ_SOURCE = "faq"


@dataclass
class FaqEntry:
    id: str
    kb_id: str
    tenant_id: str
    standard_question: str
    answers: list[str]
    similar_questions: list[str] = field(default_factory=list)
    negative_questions: list[str] = field(default_factory=list)
    #: plain tag names (an import's `category` is one)
    tags: list[str] = field(default_factory=list)
    #: reply with every answer (True) or one of them (False): the import's `answer-all` column
    answer_all: bool = False
    is_enabled: bool = True
    content_hash: str = ""
    #: False between the row write and its index write: a retried import batch purges such rows
    indexed: bool = False
    #: the import task that wrote the entry ('' for one made through the API)
    import_task: str = ""
    #: the bytes this row counts on its tenant's `storage_used` (its `content_bytes` when it was saved; 0 for
    #: entries saved before FAQ entries counted, and for clone copies): a delete gives back exactly this
    counted_bytes: int = 0
    #: the replacement an import moved this entry's count onto (replacing.move_count), until that one is
    #: counted and written, or the count comes back (a delivery killed between the move and the count)
    count_moved_to: str = ""
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)

    def rehash(self) -> FaqEntry:
        self.content_hash = content_hash(
            self.standard_question, self.similar_questions, self.negative_questions, self.answers
        )
        return self

    def content_bytes(self) -> int:
        """What the entry stores for the tenant: the UTF-8 bytes of its questions (standard, similar,
        negative) and answers."""
        return content_bytes(
            self.standard_question, self.similar_questions, self.negative_questions, self.answers
        )

    def questions(self) -> list[str]:
        """What is indexed: the standard question, then the similar questions."""
        return [self.standard_question, *self.similar_questions]

    def index_ids(self, mode: FaqIndexSettings | None = None) -> dict[str, str]:
        """index entry id -> the text indexed (deterministic: a rewrite of the same entry upserts; the id
        follows the text, so a changed answer in `question_answer` mode is indexed again)."""
        return {iid: text for iid, (text, _) in self.index_texts(mode or FaqIndexSettings()).items()}

    def index_texts(self, mode: FaqIndexSettings) -> dict[str, tuple[str, str]]:
        """index entry id -> (the text indexed, the question it stands for)."""
        answers = "\n".join(self.answers)

        def text(questions: str) -> str:
            return f"{questions}\n\n{answers}" if mode.index_mode == "question_answer" else questions

        if mode.question_index_mode == "combined":
            together = text("\n".join(self.questions()))
            return {index_entry_id(self.id, together): (together, self.standard_question)}
        return {index_entry_id(self.id, text(q)): (text(q), q) for q in self.questions()}

    def to_body(self) -> dict[str, Any]:
        body = asdict(self)
        body["created_at"] = to_iso(self.created_at)
        body["updated_at"] = to_iso(self.updated_at)
        if not self.count_moved_to:  # (kept out while empty: code before it reads every key it finds)
            del body["count_moved_to"]
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> FaqEntry:
        data = dict(body)
        data["created_at"] = from_iso(data["created_at"])
        data["updated_at"] = from_iso(data["updated_at"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The tenant-visible shape."""
        data = self.to_body()
        for internal in ("import_task", "tenant_id", "counted_bytes", "count_moved_to"):
            data.pop(internal, None)
        return data


def content_bytes(
    question: str, similar: Iterable[str], negatives: Iterable[str], answers: Iterable[str]
) -> int:
    """The UTF-8 bytes of an entry's texts: what it counts on its tenant's storage quota."""
    return sum(len(text.encode("utf-8")) for text in [question, *similar, *negatives, *answers])


def clean_tags(tags: Iterable[str]) -> list[str]:
    """Tag names as an entry keeps them, from the API and an import alike: trimmed, blanks dropped, each
    once (first spelling kept)."""
    return list(dict.fromkeys(name.strip() for name in tags if name and name.strip()))


def index_entry_id(entry_id: str, question: str) -> str:
    digest = hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
    return f"faq:{entry_id}:{digest}"


FAQ_CHUNK_TYPE = ChunkType.FAQ.value
