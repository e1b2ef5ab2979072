"""Deterministic ids and content hashes: re-running a stage rewrites the same keys, so at-least-once
delivery never duplicates chunks, vectors or executions."""

from __future__ import annotations

import hashlib
import re

from chalicelib.domain.types import StageMessage

#: a knowledge, knowledge base or task id as this service makes them (uuid4, or uuid5 for a copy)
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def is_uuid(value: str) -> bool:
    """Whether `value` is an id in the form this service makes (lower-case hex UUID)."""
    return _UUID.fullmatch(value) is not None


def content_hash(text: str) -> str:
    """sha256 of the text: chunk content hashes and embedding-cache keys."""
    return hashlib.sha256(text.encode()).hexdigest()


def file_md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


#: sequence numbers below this keep their five-digit ids (every id written before wider ones existed)
_FIVE_DIGITS = 100_000


def ordered_seq(seq: int) -> str:
    """A sequence number as a string that sorts as the number does: five digits below 100,000 (the ids
    written before), then a letter saying how many digits follow (`A` six, `B` seven...). The letter
    sorts after every digit and before `o`/`p`, so a document's text chunks stay in order past 99,999
    and ahead of its image and parent chunks in a key-ordered listing."""
    if seq < 0:
        raise ValueError(f"a sequence number is not negative: {seq}")
    if seq < _FIVE_DIGITS:
        return f"{seq:05d}"
    digits = str(seq)
    return f"{chr(ord('A') + len(digits) - 6)}{digits}"


def chunk_id(knowledge_id: str, attempt: int, seq: int, parent: bool = False) -> str:
    return f"{knowledge_id}-a{attempt}-{'p' if parent else ''}{ordered_seq(seq)}"


#: what follows the attempt's prefix in an id `chunk_id` gives, never in one enrichment gives the chunks it
#: adds to the attempt (`summary`, `table-…`, `ocr0001`, `cap0001`, `wiki01`)
_CHUNKER_SUFFIX = re.compile(r"p?(?:[0-9]{5}|[A-Z][0-9]{6,})")


def made_by_the_chunker(knowledge_id: str, attempt: int, chunk_id_: str) -> bool:
    """Whether a chunk of the attempt is one of the chunker's own (a text or parent chunk)."""
    prefix = f"{knowledge_id}-a{attempt}-"
    return chunk_id_.startswith(prefix) and bool(_CHUNKER_SUFFIX.fullmatch(chunk_id_[len(prefix) :]))


def attempt_chunk_prefix(knowledge_id: str, attempt: int) -> str:
    """What every chunk id of one attempt starts with (a key range of the chunk table: attempt 1's
    `-a1-` range does not hold attempt 10's `-a10-` ids)."""
    return f"{knowledge_id}-a{attempt}-"


def question_entry_id(chunk_id: str, n: int) -> str:
    """The index entry of the chunk's n-th generated question (its search hits return the chunk)."""
    return f"{chunk_id}-q{n}"


def image_chunk_id(knowledge_id: str, attempt: int, image_index: int, kind: str = "ocr") -> str:
    return f"{knowledge_id}-a{attempt}-{kind}{image_index:04d}"


def execution_name(knowledge_id: str, attempt: int) -> str:
    """One Step Functions execution per (knowledge, attempt): a repeated start is a no-op."""
    return f"{knowledge_id}-{attempt}"[:80]


def file_dedupe_key(tenant_id: str, kb_id: str, file_type: str, md5: str) -> str:
    # Type-scoped: the same bytes as notes.md and notes.txt are two knowledge items (spec §1.2).
    return f"{tenant_id}|{kb_id}|file|{file_type.lower()}|{md5}"


def same_file_key(kb_id: str, file_type: str, file_name: str, size: int) -> str:
    """The specification's second dedupe branch, for a file whose bytes are not known yet (a presigned
    upload being asked for): the same type, file name and size in one knowledge base."""
    return f"{kb_id}#{file_type.lower()}#{size}#{file_name}"


def url_dedupe_key(tenant_id: str, kb_id: str, url: str) -> str:
    return f"{tenant_id}|{kb_id}|url|{hashlib.md5(url.encode()).hexdigest()}"


def api_key_hash(api_key: str) -> str:
    """API keys are stored as their sha256: a leaked table does not leak keys."""
    return hashlib.sha256(api_key.encode()).hexdigest()


def plan_key(message: StageMessage) -> int:
    """An embedding fan-out's plan, as the row records it (`embed_plan`): the attempt and its generation."""
    return message.attempt * 1000 + max(1, message.plan)


def plan_attempt(key: int) -> int:
    """The attempt a `plan_key` was made for."""
    return key // 1000
