"""FAQ entries: create, read, update, delete, list, and search over a knowledge base of type `faq`.

An entry is searched by its questions: the standard question and each similar question is one index
entry (`source_type` faq, `knowledge_id` = the entry's id, id = entry id + the question's digest), embedded
through the same cached, backed-off path as document chunks. An update embeds only the questions it adds
and deletes the index entries of the questions it drops; enabling or disabling flips the entries in place.
Search returns entries (with their answers), best question first; an entry whose negative question
matches the query goes below every entry whose does not.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.commands import SearchRequest
from chalicelib.domain.errors import AppError, BadRequest, Conflict, NotFound, StageError
from chalicelib.domain.faq import FAQ_CHUNK_TYPE, FAQ_SOURCE, FaqEntry
from chalicelib.domain.faq_normalise import normalise
from chalicelib.domain.types import KnowledgeBase, utcnow
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqListQuery
from chalicelib.ports import Dependencies, IndexEntry, IndexSpace, RetrieveEngine, iter_batches
from chalicelib.services.ownership import require_kb

FAQ_KB_TYPE = "faq"
PAGE = 500
#: hits fetched per wanted result: several questions of one entry may all match
CANDIDATES_PER_RESULT = 4


class IndexUnavailable(AppError):
    status = 503
    code = "index_unavailable"


def require_faq_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    kb = require_kb(deps, tenant_id, kb_id)
    if kb.type != FAQ_KB_TYPE:
        raise BadRequest(f"knowledge base {kb_id} is not an FAQ knowledge base", code="not_faq_kb")
    return kb


def all_entries(deps: Dependencies, kb_id: str) -> Iterator[FaqEntry]:
    after = ""
    while True:
        page, after = deps.faq.page_entries(kb_id, after, PAGE)
        yield from page
        if not after:
            return


# ---------------------------------------------------------------- the index


@dataclass
class FaqIndex:
    """Writes and removes an FAQ knowledge base's index entries."""

    deps: Dependencies
    kb: KnowledgeBase
    texts_embedded: int = 0
    cache_hits: int = 0
    _space: IndexSpace | None = field(default=None, init=False)

    @property
    def active(self) -> bool:
        return self.kb.indexing_strategy.needs_embedding

    def engine(self) -> RetrieveEngine:
        return self.deps.engine(self.kb.retrieval_engine)

    def space(self) -> IndexSpace:
        if self._space is None:
            self._space = IndexSpace.of(self.deps.embedding_model(self.kb.embedding_model_id))
        return self._space

    def ids(self, entry: FaqEntry) -> dict[str, str]:
        """The entry's index entries (id -> text) under this knowledge base's index mode."""
        return entry.index_ids(self.kb.faq_index)

    def write_all(self, entries: Sequence[FaqEntry]) -> None:
        self.write([(entry, list(self.ids(entry))) for entry in entries])

    def write(self, items: Sequence[tuple[FaqEntry, Sequence[str]]]) -> None:
        """Indexes, for each entry, the index ids given (a subset of `self.ids(entry)`)."""
        if not self.active:
            return
        wanted = [(entry, iid, self.ids(entry)[iid]) for entry, ids in items for iid in ids]
        if not wanted:
            return
        vectors: Any = None
        if self.kb.indexing_strategy.vector_enabled:
            from chalicelib.services.indexing import EmbeddingRun

            model = self.deps.embedding_model(self.kb.embedding_model_id)
            run = EmbeddingRun(self.deps, model, space=self.space())
            vectors = run.embed([text for _, _, text in wanted])
            self.texts_embedded += run.texts_embedded
            self.cache_hits += run.cache_hits
        entries = [
            IndexEntry(
                id=iid,
                kb_id=self.kb.id,
                knowledge_id=entry.id,
                chunk_id=iid,
                content=text,
                vector=vectors[i] if vectors is not None else None,
                source_id=entry.id,
                source_type=FAQ_SOURCE,
                chunk_type=FAQ_CHUNK_TYPE,
                is_enabled=entry.is_enabled,
            )
            for i, (entry, iid, text) in enumerate(wanted)
        ]
        for batch in iter_batches(entries, 200):
            self.engine().batch_index(self.space(), list(batch))

    def remove_ids(self, ids: Sequence[str]) -> None:
        if self.active and ids:
            self.engine().delete_by_ids(self.space(), self.kb.id, list(ids))

    def remove_entries(self, entry_ids: Sequence[str]) -> None:
        if self.active and entry_ids:
            for batch in iter_batches(list(entry_ids), 200):
                self.engine().delete_by_knowledge(self.space(), self.kb.id, list(batch))

    def set_enabled(self, entry: FaqEntry, ids: Sequence[str]) -> None:
        if self.active and ids:
            self.engine().set_enabled(self.space(), self.kb.id, list(ids), entry.is_enabled)

    def update(self, before: FaqEntry | None, after: FaqEntry) -> None:
        """Index what changed: new questions embedded, dropped ones removed, the flag flipped in place.
        The new entries are written first: when embedding fails, nothing of the entry's index changed."""
        old = set(self.ids(before)) if before is not None else set()
        new = self.ids(after)
        self.write([(after, [i for i in new if i not in old])])
        self.remove_ids(sorted(old - set(new)))
        if before is not None and before.is_enabled != after.is_enabled:
            self.set_enabled(after, [i for i in new if i in old])


def _guarded(work: Any) -> None:
    """The embedding path raises stage errors (made for queues); an API call answers them."""
    try:
        work()
    except StageError as error:
        if error.permanent:
            raise BadRequest(error.message, code="embedding_rejected") from error
        raise IndexUnavailable(f"the entry could not be indexed now: {error.message}") from error


# ---------------------------------------------------------------- validation of one entry


def _clean(values: Sequence[str]) -> list[str]:
    out, seen = [], set()
    for value in values:
        key = normalise(value)
        if value.strip() and key and key not in seen:
            seen.add(key)
            out.append(value.strip())
    return out


def _check(deps: Dependencies, entry: FaqEntry) -> None:
    """A question belongs to one entry; negatives never equal the entry's own questions."""
    if not normalise(entry.standard_question):
        raise BadRequest("the standard question is empty", code="missing_question")
    if not entry.answers:
        raise BadRequest("at least one non-blank answer is required", code="missing_answer")
    own = {normalise(q) for q in entry.questions()}
    clash = [n for n in entry.negative_questions if normalise(n) in own]
    if clash:
        raise BadRequest(
            f"negative question {clash[0]!r} is one of the entry's own questions",
            code="faq_negative_conflict",
        )
    for other in all_entries(deps, entry.kb_id):
        if other.id == entry.id:
            continue
        taken = own & {normalise(q) for q in other.questions()}
        if taken:
            raise Conflict(
                f"question {sorted(taken)[0]!r} already belongs to entry {other.id}",
                code="faq_question_conflict",
                data=other.to_dict(),
            )


# ---------------------------------------------------------------- CRUD


def create_entry(deps: Dependencies, tenant_id: str, kb_id: str, request: FaqEntryRequest) -> FaqEntry:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    entry = FaqEntry(
        id=str(uuid.uuid4()),
        kb_id=kb.id,
        tenant_id=tenant_id,
        standard_question=request.standard_question.strip(),
        answers=[a.strip() for a in request.answers if a.strip()],
        similar_questions=[
            q
            for q in _clean(request.similar_questions)
            if normalise(q) != normalise(request.standard_question)
        ],
        negative_questions=_clean(request.negative_questions),
        tags=list(dict.fromkeys(t.strip() for t in request.tags if t.strip())),
        answer_all=request.answer_all,
        is_enabled=request.is_enabled,
    ).rehash()
    _check(deps, entry)
    deps.faq.put_entries([entry])  # indexed=False until its index entries are written
    index = FaqIndex(deps, kb)
    try:
        _guarded(lambda: index.update(None, entry))
    except AppError:
        index.remove_entries([entry.id])
        deps.faq.delete_entries(kb.id, [entry.id])
        raise
    entry.indexed = True
    deps.faq.put_entries([entry])
    if entry.tags:
        deps.faq.add_tags(kb.id, entry.tags)
    return entry


def get_entry(deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str) -> FaqEntry:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    entry = deps.faq.get_entry(kb.id, entry_id)
    if entry is None:
        raise NotFound(f"FAQ entry {entry_id} not found", code="faq_entry_not_found")
    return entry


def update_entry(
    deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str, request: FaqEntryUpdate
) -> FaqEntry:
    before = get_entry(deps, tenant_id, kb_id, entry_id)
    kb = require_faq_kb(deps, tenant_id, kb_id)
    after = FaqEntry.from_body(before.to_body())
    changes = request.model_dump(exclude_none=True)
    if "standard_question" in changes:
        after.standard_question = changes["standard_question"].strip()
    if "answers" in changes:
        after.answers = [a.strip() for a in changes["answers"] if a.strip()]
    if "similar_questions" in changes:
        after.similar_questions = _clean(changes["similar_questions"])
    after.similar_questions = [
        q for q in after.similar_questions if normalise(q) != normalise(after.standard_question)
    ]
    if "negative_questions" in changes:
        after.negative_questions = _clean(changes["negative_questions"])
    if "tags" in changes:
        after.tags = list(dict.fromkeys(t.strip() for t in changes["tags"] if t.strip()))
    for flag in ("answer_all", "is_enabled"):
        if flag in changes:
            setattr(after, flag, changes[flag])
    after.rehash()
    after.updated_at = utcnow()
    _check(deps, after)
    _guarded(lambda: FaqIndex(deps, kb).update(before, after))
    after.indexed = True
    deps.faq.put_entries([after])
    if after.tags:
        deps.faq.add_tags(kb.id, after.tags)
    return after


def delete_entry(deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str) -> None:
    entry = get_entry(deps, tenant_id, kb_id, entry_id)
    kb = require_faq_kb(deps, tenant_id, kb_id)
    FaqIndex(deps, kb).remove_entries([entry.id])  # vectors first: a crash leaves a row, never a ghost hit
    deps.faq.delete_entries(kb.id, [entry.id])


def _matches(entry: FaqEntry, query: FaqListQuery, keyword: str) -> bool:
    if query.tag is not None and query.tag not in entry.tags:
        return False
    if query.enabled is not None and entry.is_enabled != (query.enabled == "true"):
        return False
    if keyword:
        texts = [*entry.questions(), *entry.answers]
        return any(keyword in normalise(t) for t in texts)
    return True


def list_entries(deps: Dependencies, tenant_id: str, kb_id: str, query: FaqListQuery) -> dict[str, Any]:
    """Entries in id order after `cursor`, filtered; `next_cursor` is '' on the last page."""
    kb = require_faq_kb(deps, tenant_id, kb_id)
    keyword = normalise(query.keyword or "")
    found: list[FaqEntry] = []
    after = query.cursor
    more = True
    while more and len(found) <= query.limit:
        page, after = deps.faq.page_entries(kb.id, after, PAGE)
        more = bool(after)
        for entry in page:
            if _matches(entry, query, keyword):
                found.append(entry)
                if len(found) > query.limit:
                    break
    items = found[: query.limit]
    next_cursor = items[-1].id if len(found) > query.limit and items else ""
    return {"items": [e.to_dict() for e in items], "next_cursor": next_cursor}


def purge_kb(deps: Dependencies, kb_id: str) -> int:
    """Deletes every entry of an FAQ knowledge base being deleted (index entries first), its tags and its
    last import result; idempotent. Returns the entries deleted."""
    kb = deps.kbs.get(kb_id)
    if kb is None or kb.type != FAQ_KB_TYPE:
        return 0
    index = FaqIndex(deps, kb)
    deleted = 0
    while True:
        page, _ = deps.faq.page_entries(kb.id, "", PAGE)
        if not page:
            break
        ids = [e.id for e in page]
        index.remove_entries(ids)
        deps.faq.delete_entries(kb.id, ids)
        deleted += len(ids)
    deps.faq.remove_tags(kb.id, deps.faq.tags(kb.id))
    return deleted


def list_tags(deps: Dependencies, tenant_id: str, kb_id: str) -> list[str]:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    return deps.faq.tags(kb.id)


# ---------------------------------------------------------------- search


def negative_match(entry: FaqEntry, normalised_query: str) -> bool:
    """The query is one of the entry's negative questions, or holds one (or is held by one) as a whole."""
    for negative in entry.negative_questions:
        key = normalise(negative)
        if key and (key == normalised_query or key in normalised_query or normalised_query in key):
            return True
    return False


def search(deps: Dependencies, kb: KnowledgeBase, request: SearchRequest) -> list[dict[str, Any]]:
    query, top_k = request.query_text, request.match_count
    model = deps.embedding_model(kb.embedding_model_id)
    strategy = kb.indexing_strategy
    keyword = strategy.keyword_enabled and request.retriever != "vector"
    use_vector = strategy.vector_enabled and request.retriever != "keyword"
    vector = None
    if use_vector:
        from chalicelib.services.indexing import embed_texts

        vector = embed_texts(deps, model, [query[: model.max_input_chars]])[0]
    hits = deps.engine(kb.retrieval_engine).hybrid_search(
        IndexSpace.of(model),
        kb.id,
        query,
        vector,
        min(200, top_k * CANDIDATES_PER_RESULT),
        keyword=keyword,
        vector=use_vector,
        keyword_weight=None if request.vector_weight is None else 1.0 - request.vector_weight,
        min_score=request.min_score,
    )
    best: dict[str, Any] = {}
    for hit in hits:  # best question per entry (hits come best first)
        best.setdefault(hit.knowledge_id, hit)
    entries = deps.faq.get_entries(kb.id, list(best))
    normalised_query = normalise(query)
    ranked: list[tuple[bool, dict[str, Any]]] = []
    for entry_id, hit in best.items():
        entry = entries.get(entry_id)
        if entry is None or not entry.is_enabled:
            continue  # deleted meanwhile, or disabled
        pushed = negative_match(entry, normalised_query)
        matched = entry.index_texts(kb.faq_index).get(hit.id, (hit.content, hit.content))[1]
        ranked.append(
            (
                pushed,
                {
                    "id": entry.id,
                    "entry_id": entry.id,
                    "standard_question": entry.standard_question,
                    "matched_question": matched,
                    "similar_questions": entry.similar_questions,
                    "answers": entry.answers,
                    "answer_all": entry.answer_all,
                    "tags": entry.tags,
                    "content": entry.standard_question,
                    "score": hit.score,
                    "negative_match": pushed,
                    "match_type": "hybrid"
                    if hit.bm25_rank is not None and hit.vector_rank is not None
                    else ("keyword" if hit.bm25_rank is not None else "vector"),
                },
            )
        )
    ranked.sort(key=lambda pair: pair[0])  # stable: order by score kept within each group
    return [result for _, result in ranked[:top_k]]
