"""FAQ entries: create, read, update, delete, list, and search over a knowledge base of type `faq`.

An entry is searched by its questions: the standard question and each similar question is one index
entry (`source_type` faq, `knowledge_id` = the entry's id, id = entry id + the question's digest), embedded
through the same cached, backed-off path as document chunks. An update embeds only the questions it adds
and deletes the index entries of the questions it drops; enabling or disabling flips the entries in place.
Search returns entries (with their answers), best question first; an entry whose negative question
matches the query goes below every entry whose does not.

Concurrent requests. A question belongs to one entry: a create or update reserves each question it adds
(reservations.py: one conditional put per question in the faq table, pending until the row is saved, then
held), so of two writers adding one question only one gets it, and it reads no other entry (entries written
before reservations existed are reserved once, by the first write: keyed.py); the import and the clone
reserve theirs the same way. A reservation whose entry no longer has the question (an import merged the entry, a delete died
midway) is taken over.
The row is written only if it is still the one read (its `updated_at`): an update racing a delete answers
404 and one racing another update 409, and each takes back the index entries it wrote. A delete removes the
index entries again after the row, so an update that saved just before it leaves none behind.

A write that fails (the embedding, the engine, the table: `_answered`) takes back what it did: a create's
row and index entries go, an update's new index entries go, and the questions they claimed are free at
once. An entry is at most MAX_ENTRY_BYTES stored (413 `faq_entry_too_large`: one DynamoDB item), and its
texts' bytes count on the tenant's `storage_used` (403 `storage_quota_exceeded` past the quota; the row
records what it counted, `counted_bytes`, and the delete that removes it gives exactly that back). An
entry saved before entries counted is checked on its real growth, and counts from its next write on.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from chalicelib.commands import SearchRequest
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, cut_page, fitting
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import (
    AppError,
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StageError,
)
from chalicelib.domain.faq import FaqEntry, clean_tags
from chalicelib.domain.faq_normalise import normalise
from chalicelib.domain.retrieval import deepened, retriever_lists
from chalicelib.domain.types import KnowledgeBase, utcnow
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqListQuery
from chalicelib.faq.entry_size import storage_change, too_large
from chalicelib.faq.index import FaqIndex as FaqIndex  # where callers have found it
from chalicelib.faq.keyed import PAGE, ensure_keyed, pages, tag_in_use, tag_links
from chalicelib.faq.reservations import CLAIM_USABLE_SECONDS, claim, held_keys, question_keys
from chalicelib.faq.reservations import question_key as question_key  # where callers have found it
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexSpace, IndexUnavailable, IndexWriteError
from chalicelib.ports.faq import EntryWriteFailed, EntryWriteRefused
from chalicelib.services.ownership import require_kb
from chalicelib.services.quotas import take_storage
from chalicelib.services.usable import require_usable_for_api

FAQ_KB_TYPE = "faq"
#: entries a list page reads at most (DynamoDB reads, and the API's 29 s): a filter that matches few
#: entries answers a short page with a `next_cursor` to go on from
LIST_SCAN = 2000
#: list pages and search answers stay under Lambda's 6 MB response (100 entries of 350 KB each pass it)
FAQ_ANSWER_MAX_BYTES = ANSWER_MAX_BYTES
#: hits first asked of the engine per wanted result: several questions of one entry may all match (more are
#: asked while too few entries come out, `domain/retrieval.deepened`)
CANDIDATES_PER_RESULT = 4


def _index_unavailable(message: str) -> ServiceUnavailable:
    """The API's answer when an entry could not be indexed now (the port's IndexUnavailable, the engine
    not answering, is one cause)."""
    return ServiceUnavailable(message, code="index_unavailable")


def require_faq_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    kb = require_kb(deps, tenant_id, kb_id)
    if kb.type != FAQ_KB_TYPE:
        raise BadRequest(f"knowledge base {kb_id} is not an FAQ knowledge base", code="not_faq_kb")
    return kb


def all_entries(deps: Dependencies, kb_id: str) -> Iterator[FaqEntry]:
    for page in pages(deps, kb_id):
        yield from page


@contextmanager
def _answered() -> Iterator[None]:
    """An entry's writes failing as the API answers them: the embedding path raises stage errors (made for
    queues), the engine and the table their own. Past here each is an AppError, so the caller's cleanup
    runs for every failure of the write."""
    try:
        yield
    except StageError as error:
        if error.permanent:
            raise BadRequest(error.message, code="embedding_rejected") from error
        raise _index_unavailable(f"the entry could not be indexed now: {error.message}") from error
    except IndexUnavailable as error:
        raise _index_unavailable("the search index is not answering; try again") from error
    except IndexWriteError as error:
        raise ServiceUnavailable(
            "the search index refused the entry; it was not saved", code="index_refused"
        ) from error
    except EntryWriteFailed as error:
        raise ServiceUnavailable(
            "the entry could not be saved now; try again", code="faq_store_unavailable"
        ) from error


def _take_back_index(index: FaqIndex, work: Any) -> None:
    """A failed write's index entries removed; an engine that does not answer now leaves them (a search
    skips hits whose entry has no row, or not that question), so the row and reservations still go."""
    try:
        work()
    except (IndexUnavailable, IndexWriteError):
        logger.warning("FAQ index entries of a failed write left behind", extra={"kb_id": index.kb.id})


def give_back_storage(deps: Dependencies, tenant_id: str, removed: Sequence[FaqEntry]) -> None:
    """Deleted entries' bytes off the tenant's `storage_used`: what each row counted, for the rows the
    delete removed (`FaqRepo.delete_entries`' answer, so a row two deletes race for is given back once)."""
    counted = sum(entry.counted_bytes for entry in removed)
    if counted:
        deps.tenants.add_usage(tenant_id, -counted)


def take_back_rewrite(
    deps: Dependencies, index: FaqIndex, entry_id: str, written: Sequence[str], claimed: Sequence[str]
) -> FaqEntry | None:
    """A rewrite of an entry that was not saved (it failed, or another writer came first): the index
    entries it wrote (`written`) and the question keys it claimed go, but those the row as it is now holds
    (another writer's) stay. Returns the row as it is now (None: deleted)."""
    current = deps.faq.get_entry(index.kb.id, entry_id)
    held = set(index.ids(current)) if current is not None else set()
    _take_back_index(index, lambda: index.remove_ids([i for i in written if i not in held]))
    still = question_keys(current) if current is not None else {}
    deps.faq.release_questions(index.kb.id, entry_id, [k for k in claimed if k not in still])
    return current


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
    """A question belongs to one entry; negatives never equal the entry's own questions. Other entries'
    questions are found by their reservations (`_claim`), once the knowledge base is keyed (keyed.py)."""
    if not normalise(entry.standard_question):
        raise BadRequest("the standard question is empty", code="missing_question")
    if not entry.answers:
        raise BadRequest("at least one non-blank answer is required", code="missing_answer")
    beyond = too_large(
        entry.standard_question,
        entry.answers,
        entry.similar_questions,
        entry.negative_questions,
        entry.tags,
    )
    if beyond:
        raise PayloadTooLarge(beyond, code="faq_entry_too_large")
    own = {normalise(q) for q in entry.questions()}
    clash = [n for n in entry.negative_questions if normalise(n) in own]
    if clash:
        raise BadRequest(
            f"negative question {clash[0]!r} is one of the entry's own questions",
            code="faq_negative_conflict",
        )
    other = ensure_keyed(deps, entry.kb_id, own, entry.id)
    if other is not None:
        raise _question_conflict(sorted(own & {normalise(q) for q in other.questions()})[0], other)


def _question_conflict(question: str, other: FaqEntry) -> Conflict:
    return Conflict(
        f"question {question!r} already belongs to entry {other.id}",
        code="faq_question_conflict",
        data=other.to_dict(),
    )


# ---------------------------------------------------------------- question reservations


def _claim(deps: Dependencies, entry: FaqEntry, wanted: Mapping[str, str]) -> float:
    """Reserves `wanted` (key -> normalised question) for the entry (reservations.claim), or releases what
    it claimed and answers 409 `faq_question_conflict`. Returns when it claimed."""
    claimed_at, clashes = claim(deps, entry.kb_id, entry.id, wanted)
    if not clashes:
        return claimed_at
    deps.faq.release_questions(entry.kb_id, entry.id, list(wanted))
    clash = next(iter(clashes.values()))
    if clash.other is not None:
        raise _question_conflict(clash.question, clash.other)
    if clash.holder.entry_id:  # another request or an import is saving an entry with it now
        raise Conflict(
            f"question {clash.question!r} is being saved with another entry ({clash.holder.entry_id})",
            code="faq_question_conflict",
            data={"id": clash.holder.entry_id},
        )
    raise Conflict("the entry's questions kept changing hands; try again", code="faq_question_conflict")


def _in_time(deps: Dependencies, entry: FaqEntry, claimed_at: float, keys: Sequence[str]) -> None:
    if time.time() - claimed_at > CLAIM_USABLE_SECONDS:
        deps.faq.release_questions(entry.kb_id, entry.id, list(keys))
        raise _index_unavailable("the entry took too long to index; try again")


def later_than(moment: datetime) -> datetime:
    """Now, or a millisecond after `moment` (stored to the millisecond) if now is not later."""
    now = utcnow()
    return now if to_iso(now) > to_iso(moment) else moment + timedelta(milliseconds=1)


# ---------------------------------------------------------------- tags


def _unused_tags(deps: Dependencies, kb_id: str, names: set[str]) -> set[str]:
    return {name for name in names if not tag_in_use(deps, kb_id, name)}


def drop_unused_tags(deps: Dependencies, kb_id: str, candidates: Sequence[str]) -> list[str]:
    """Removes those of `candidates` (the tags a delete or an update let go of) that no entry uses, by the
    tags' links (keyed.py). A writer links and adds its tags after its row: a tag this removed is checked
    again after the removal and put back if an entry saved meanwhile uses it. Returns the tags removed."""
    candidates = [t for t in candidates if t]
    if not candidates:
        return []
    ensure_keyed(deps, kb_id, set(), "")
    unused = _unused_tags(deps, kb_id, set(candidates))
    if not unused:
        return []
    deps.faq.remove_tags(kb_id, sorted(unused))
    back = unused - _unused_tags(deps, kb_id, unused)
    if back:
        deps.faq.add_tags(kb_id, sorted(back))
    return sorted(unused - back)


# ---------------------------------------------------------------- CRUD


def create_entry(deps: Dependencies, tenant_id: str, kb_id: str, request: FaqEntryRequest) -> FaqEntry:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    require_usable_for_api(deps, kb)  # a withdrawn model or engine: 409, as its search, before any write
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
        tags=clean_tags(request.tags),
        answer_all=request.answer_all,
        is_enabled=request.is_enabled,
    ).rehash()
    entry.counted_bytes = entry.content_bytes()
    _check(deps, entry)
    keys = question_keys(entry)
    claimed_at = _claim(deps, entry, keys)
    index = FaqIndex(deps, kb)
    saved = replace(entry, indexed=True)
    counted = written = False
    try:
        with _answered():
            take_storage(deps, tenant_id, entry.counted_bytes, "the entry")
            counted = True
            deps.faq.put_entry(entry, None)  # indexed=False until its index entries are written
            written = True
            index.update(None, entry)
            _in_time(deps, entry, claimed_at, list(keys))
            refused = _written_over(deps, saved, entry)
    except AppError:  # every failure of the write: nothing of the entry stays, its questions are free
        _take_back_index(index, lambda: index.remove_entries([entry.id]))
        removed = deps.faq.delete_entries(kb.id, [entry.id])
        deps.faq.release_questions(kb.id, entry.id, list(keys))
        if counted and not written:
            deps.tenants.add_usage(tenant_id, -entry.counted_bytes)
        elif counted:  # the row holds the count: given back by whoever removed it (a delete, maybe)
            give_back_storage(deps, tenant_id, removed)
        raise
    # refused, the row changed by an update that read it unindexed: that update saved what it holds
    if refused is not None and refused.gone:  # deleted as soon as listed: its index entries may come after
        index.remove_entries([entry.id])
        deps.faq.release_questions(kb.id, entry.id, list(keys))
        return saved
    deps.faq.confirm_questions(kb.id, entry.id, list(keys))
    if saved.tags:  # linked, then added: a drop removing the tag meanwhile sees the link, puts it back
        deps.faq.link_tags(kb.id, tag_links([saved]))
        deps.faq.add_tags(kb.id, saved.tags)
    return saved


def _written_over(deps: Dependencies, entry: FaqEntry, expected: FaqEntry) -> EntryWriteRefused | None:
    """`entry` written over the row `expected`; the refusal when another writer came first."""
    try:
        deps.faq.put_entry(entry, expected)
    except EntryWriteRefused as refused:
        return refused
    return None


def get_entry(deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str) -> FaqEntry:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    entry = deps.faq.get_entry(kb.id, entry_id)
    if entry is None:
        raise NotFound(f"FAQ entry {entry_id} not found", code="faq_entry_not_found")
    return entry


def update_entry(
    deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str, request: FaqEntryUpdate
) -> FaqEntry:
    """Writes the row only if it is still the one read: 404 `faq_entry_not_found` when it was deleted
    meanwhile, 409 `faq_entry_changed` when another update saved first; either way the index entries this
    update wrote go again and nothing else of the entry's index changed."""
    before = get_entry(deps, tenant_id, kb_id, entry_id)
    kb = require_faq_kb(deps, tenant_id, kb_id)
    require_usable_for_api(deps, kb)
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
        after.tags = clean_tags(changes["tags"])
    for flag in ("answer_all", "is_enabled"):
        if flag in changes:
            setattr(after, flag, changes[flag])
    after.rehash()
    after.updated_at = later_than(before.updated_at)
    after.indexed = True
    after.counted_bytes = after.content_bytes()
    change = storage_change(before, after.counted_bytes)
    _check(deps, after)
    old_keys, new_keys = question_keys(before), question_keys(after)
    added = {k: q for k, q in new_keys.items() if k not in old_keys}
    claimed_at = _claim(deps, after, added)
    index = FaqIndex(deps, kb)
    old_ids, new_ids = set(index.ids(before)), index.ids(after)
    written = [i for i in new_ids if i not in old_ids]
    counted = False
    try:  # the new questions first: when embedding fails, nothing of the entry's index changed
        with _answered():
            take_storage(deps, tenant_id, change.counts, "the entry's growth", grows_by=change.grows_by)
            counted = True
            index.write([(after, written)])
            _in_time(deps, after, claimed_at, list(added))
            deps.faq.put_entry(after, before)
    except (AppError, EntryWriteRefused) as error:  # every failure of the write: the row stays as it was
        current = take_back_rewrite(deps, index, entry_id, written, list(added))
        if counted and change.counts:
            deps.tenants.add_usage(tenant_id, -change.counts)
        if not isinstance(error, EntryWriteRefused):
            raise
        if current is None:
            raise NotFound(
                f"FAQ entry {entry_id} was deleted meanwhile", code="faq_entry_not_found"
            ) from error
        raise Conflict(
            f"FAQ entry {entry_id} was changed meanwhile; read it and try again",
            code="faq_entry_changed",
            data=current.to_dict(),
        ) from error
    index.remove_ids(sorted(old_ids - set(new_ids)))
    if before.is_enabled != after.is_enabled:
        index.set_enabled(after, [i for i in new_ids if i in old_ids])
    deps.faq.confirm_questions(kb.id, entry_id, list(added))
    deps.faq.release_questions(kb.id, entry_id, [k for k in held_keys(before) if k not in new_keys])
    if after.tags:
        deps.faq.link_tags(kb.id, tag_links([after]))
        deps.faq.add_tags(kb.id, after.tags)
    let_go = [t for t in before.tags if t not in after.tags]
    if let_go:
        deps.faq.unlink_tags(kb.id, [(entry_id, t) for t in let_go])
        drop_unused_tags(deps, kb.id, let_go)
    return after


def delete_entry(deps: Dependencies, tenant_id: str, kb_id: str, entry_id: str) -> None:
    entry = get_entry(deps, tenant_id, kb_id, entry_id)
    kb = require_faq_kb(deps, tenant_id, kb_id)
    index = FaqIndex(deps, kb)
    index.remove_entries([entry.id])  # vectors first: a crash leaves a row, never a ghost hit
    removed = deps.faq.delete_entries(kb.id, [entry.id])
    index.remove_entries([entry.id])  # those of an update that saved its row while this ran
    deps.faq.release_questions(kb.id, entry.id, held_keys(entry))
    give_back_storage(deps, tenant_id, removed)  # (none when a racing delete removed the row first)
    if entry.tags:
        deps.faq.unlink_tags(kb.id, tag_links([entry]))
        drop_unused_tags(deps, kb.id, entry.tags)


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
    """Entries in id order after `cursor`, filtered; `next_cursor` is '' on the last page. A page reads at
    most LIST_SCAN entries: one that filters out most of them ends there, with fewer than `limit` items
    (none, maybe) and the id of the last entry read as `next_cursor`."""
    kb = require_faq_kb(deps, tenant_id, kb_id)
    keyword = normalise(query.keyword or "")
    found: list[FaqEntry] = []
    after = query.cursor
    scanned = 0
    while len(found) <= query.limit and scanned < LIST_SCAN:
        page, more = deps.faq.page_entries(kb.id, after, min(PAGE, LIST_SCAN - scanned))
        for entry in page:
            scanned += 1
            after = entry.id
            if _matches(entry, query, keyword):
                found.append(entry)
                if len(found) > query.limit:
                    break
        if not more:
            after = ""  # read to the end (a full page's last match is settled below)
            break
    items = found[: query.limit]
    # past a full page: its last item; else '' at the end, or where the scan stopped (LIST_SCAN read)
    next_cursor = (items[-1].id if items else "") if len(found) > query.limit else after
    views, last = cut_page([entry.to_dict() for entry in items], FAQ_ANSWER_MAX_BYTES)
    return {"items": views, "next_cursor": last["id"] if last else next_cursor}


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
        give_back_storage(deps, kb.tenant_id, deps.faq.delete_entries(kb.id, ids))
        deleted += len(ids)
    deps.faq.remove_tags(kb.id, deps.faq.tags(kb.id))
    deps.faq.clear_questions(kb.id)
    return deleted


def list_tags(deps: Dependencies, tenant_id: str, kb_id: str) -> list[str]:
    """The tag names in use, by name."""
    return list(deps.faq.tags(require_faq_kb(deps, tenant_id, kb_id).id))


def tags_page(deps: Dependencies, tenant_id: str, kb_id: str, after: str) -> tuple[list[str], str | None]:
    """Tag names after `after` within FAQ_ANSWER_MAX_BYTES, and the name the next page goes on after (or None)."""
    return cut_page(
        [name for name in list_tags(deps, tenant_id, kb_id) if name > after], FAQ_ANSWER_MAX_BYTES
    )


# ---------------------------------------------------------------- search


def negative_match(entry: FaqEntry, normalised_query: str) -> bool:
    """The query is one of the entry's negative questions, or holds one (or is held by one) as a whole."""
    for negative in entry.negative_questions:
        key = normalise(negative)
        if key and (key == normalised_query or key in normalised_query or normalised_query in key):
            return True
    return False


def search(
    deps: Dependencies, kb: KnowledgeBase, request: SearchRequest, tenant_id: str
) -> list[dict[str, Any]]:
    """The best `match_count` entries for the query, one result per entry (its best question), entries whose
    negative question the query names pushed down. A 400 `retriever_unavailable` for a retriever the knowledge
    base has no index for, as the document search (`domain/retrieval.py`). The query is embedded under
    `tenant_id`, the searching tenant's (a shared knowledge base's reader is not its owner)."""
    query, top_k = request.query_text, request.match_count
    keyword, use_vector = retriever_lists(kb, request.retriever)
    if not (keyword or use_vector):
        return []
    model = require_usable_for_api(deps, kb)  # a withdrawn model or engine: the document search's 409
    vector = None
    if use_vector:  # a model that fails answers as the document search's does
        from chalicelib.services.embedding_runs import embed_query

        vector = embed_query(deps, tenant_id, model, query)
    normalised_query = normalise(query)
    fetched: dict[str, FaqEntry] = {}  # entries read by a shallower round are not read again

    def answer_at(depth: int) -> tuple[int, list[dict[str, Any]], int]:
        """(the engine's hits at this depth, the entries they make, at most top_k, how many of those are
        pushed down: they stand in only while no other entry is found)."""
        hits = deps.engine(kb.retrieval_engine).hybrid_search(
            IndexSpace.of(model),
            kb.id,
            query,
            vector,
            depth,
            keyword=keyword,
            vector=use_vector,
            keyword_weight=None if request.vector_weight is None else 1.0 - request.vector_weight,
            min_score=request.min_score,
        )
        wanted = list(dict.fromkeys(hit.knowledge_id for hit in hits if hit.knowledge_id not in fetched))
        fetched.update(deps.faq.get_entries(kb.id, wanted))
        texts: dict[str, dict[str, tuple[str, str]]] = {}
        best: dict[str, tuple[Any, str]] = {}
        for hit in hits:  # best question per entry (hits come best first)
            entry = fetched.get(hit.knowledge_id)
            if entry is None or not entry.is_enabled or hit.knowledge_id in best:
                continue  # deleted meanwhile, or disabled
            if entry.id not in texts:
                texts[entry.id] = entry.index_texts(kb.faq_index)
            # a question the entry no longer has: an index entry a failed write could not take back
            if hit.id in texts[entry.id]:
                best[entry.id] = (hit, texts[entry.id][hit.id][1])
        ranked: list[tuple[bool, dict[str, Any]]] = []
        for entry_id, (hit, matched) in best.items():
            entry = fetched[entry_id]
            pushed = negative_match(entry, normalised_query)
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
        answer = ranked[:top_k]
        return len(hits), [result for _, result in answer], sum(pushed for pushed, _ in answer)

    # An entry's many questions, and deleted or disabled entries, take places among the hits, and a pushed
    # entry's questions may fill the page while another entry matches further down: while fewer than top_k
    # entries that are not pushed down are made of a full page of hits, the engine is asked deeper.
    return within_answer_size(deepened(answer_at, top_k, min(200, top_k * CANDIDATES_PER_RESULT)))


def within_answer_size(answer: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The best results within FAQ_ANSWER_MAX_BYTES (the first always): the last are left out, logged."""
    kept = fitting(answer, FAQ_ANSWER_MAX_BYTES)
    if kept < len(answer):
        logger.warning("faq search: cut to fit", extra={"results": len(answer), "kept": kept})
    return answer[:kept]
