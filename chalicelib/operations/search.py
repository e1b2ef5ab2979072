"""Search over a knowledge base: BM25 and vector, fused in the engine (adapters/index/fusion.py), with filters.

Filters. The index entries carry the knowledge id but not a document's tags, type or metadata, and those
change after indexing (a tag added, metadata edited). Copying them onto every entry would make each such
edit a rewrite of all the document's entries, in both engines, with a window in which the index disagrees
with the row. Instead `tag_ids`, `file_types` and `metadata` are resolved on the knowledge rows to a set of
knowledge ids (from the narrowest source there is: the given `knowledge_ids`, the tag relations' GSI, the
file-type GSI, or the knowledge base's rows), every candidate row is checked against every filter, and the
set goes into the engine query as a pre-filter (a `terms` filter inside the BM25 and the knn query; a row
mask before the brute-force top k), so a filter never returns fewer than `match_count` where more match.
Resolving reads at most MAX_FILTER_DOCUMENTS rows; a filter that would read more is a 400
`filter_too_broad` (narrow it with `knowledge_ids`, `tag_ids` or `file_types`).

Near duplicates. Two child chunks of one parent return the same parent text, and a summary may repeat its
short body: hits of one document that repeat each other (`domain/repetition.py`) are collapsed into the
better one, and a text chunk stands in for a summary it repeats (it has a place in the document).

Copies across documents. With `collapse_copies`, a hit whose text repeats a better hit of another document (the
same passage in a docx and its PDF, a licence in every repository) is listed in that hit's `copies` (`CopyRef`:
document, title, chunk, score) instead of taking a place of its own (`fold_copies`). Off by default: the
known-item bench loses strict hits with it, since the copy that ranks first stands for the others.

One document's many hits. `max_chunks_per_document` (off by default) lets at most that many hits of one
document in while other documents have hits to offer: a sheet whose every row repeats the column names, or
a long book holding a chapter that is also a document of its own, can otherwise fill the whole answer
(`per_document_capped`; bench/README.md, recall 2026-12-04). While a document's further hits fill places,
the engine is asked deeper for another document's (`past_cap`), down to its best MAX_ENGINE_DEPTH hits.

Links. A hit's content and its images never show an internal `local://` or `s3://` URL: each is replaced
by a signed download link (a `local://` store's object is copied into the files bucket first, as
`operations/chunks.file_url` does), or dropped when the object is gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any, TypedDict, TypeVar

from chalicelib.commands import MetadataIn, SearchRequest
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, fitting
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.image_info import INTERNAL_URL
from chalicelib.domain.repetition import near_duplicates, words_of
from chalicelib.domain.resources import Resource, resource_id_for
from chalicelib.domain.retrieval import deepened, retriever_lists
from chalicelib.domain.storage_keys import image_copy_key
from chalicelib.domain.text_fold import latin_share
from chalicelib.domain.types import Chunk, ChunkType, EnableStatus, Knowledge, KnowledgeBase, ParseStatus
from chalicelib.observability import logger
from chalicelib.operations.chunks import CHILDREN_CHANGED
from chalicelib.ports import Dependencies, EmbeddingModel, IndexSpace
from chalicelib.services.embedding_runs import embed_query
from chalicelib.services.kb_rows import kb_rows
from chalicelib.services.ownership import require_kb
from chalicelib.services.storage import signed_get
from chalicelib.services.tagging import check_tag_ids
from chalicelib.services.usable import require_usable_for_api
from chalicelib.settings import LATIN_ONLY_EMBEDDING_MODELS

#: a query is the model's when at least this share of its letters is Latin
MIN_LATIN_SHARE = 0.7
#: knowledge rows a filter may read to resolve to knowledge ids
MAX_FILTER_DOCUMENTS = 5_000
_PAGE = 500
#: hits asked of the engine beyond `match_count`, so collapsed duplicates do not shorten the answer
_SPARE = 10
#: with `max_chunks_per_document`, the most hits asked beyond `match_count`: room for other documents' hits
#: behind one document's run (on the dev corpus a CSV's own chunk came 15th behind its XLSX copy's rows)
_SPARE_CAPPED = 40

_Hit = TypeVar("_Hit")
_Key = TypeVar("_Key")
_Row = TypeVar("_Row")


class CopyRef(TypedDict):
    """Another document's hit whose text repeats the hit it is listed under (`collapse_copies`)."""

    knowledge_id: str
    knowledge_title: str
    chunk_id: str
    score: float


def reads_query(model: EmbeddingModel, query: str) -> bool:
    """Whether the model can read the query's script: an English-only model's vector of a query mostly in
    another script is noise, and fused with the keyword list it pushes that list's hits out of the top k, so
    such a query is answered by the keyword list alone."""
    return model.model_id not in LATIN_ONLY_EMBEDDING_MODELS or latin_share(query) >= MIN_LATIN_SHARE


def query_vector(model: EmbeddingModel, query: str) -> Any:
    """The query's vector straight from the model, or None when it cannot read the query (offline callers:
    the recall bench; the search route embeds through the cache, `embed_query`)."""
    return model.embed([query[: model.max_input_chars]])[0] if reads_query(model, query) else None


# ---------------------------------------------------------------- filters


def _values(value: Any) -> list[Any]:
    return list(value.in_) if isinstance(value, MetadataIn) else [value]


def _comparable(value: Any) -> tuple[str, Any] | None:
    """A JSON scalar as a key equal only to the same JSON value, without coercion: true is not 1, "2024" is
    not 2024 (2024 is 2024.0); None for what no filter value equals (null, NaN, objects, lists)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return None if value != value else ("number", value)
    if isinstance(value, str):
        return ("str", value)
    return None


def _field(metadata: dict[str, Any], key: str) -> tuple[bool, Any]:
    value: Any = metadata
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            return False, None
        value = value[part]
    return True, value


def metadata_filter(conditions: dict[str, Any]) -> Callable[[dict[str, Any]], bool]:
    """Every key's field equals one of its values; a list field matches when any element does. Each
    condition's values are a set, so a row costs its stored elements, not elements × values (a stored list of
    thousands of elements against 100 values was millions of comparisons a row)."""
    wanted = [
        (key, {_comparable(v) for v in _values(condition)} - {None}) for key, condition in conditions.items()
    ]

    def matches(metadata: dict[str, Any]) -> bool:
        for key, values in wanted:
            found, stored = _field(metadata, key)
            if not found:
                return False
            candidates = stored if isinstance(stored, list) else [stored]
            if not any(_comparable(s) in values for s in candidates):
                return False
        return True

    return matches


def _row_check(kb: KnowledgeBase, request: SearchRequest) -> Callable[[Knowledge], bool]:
    tags = set(request.tag_ids or ())
    types = set(request.file_types or ())
    conditions = request.metadata or {}
    metadata_ok = metadata_filter(conditions)

    def check(row: Knowledge) -> bool:
        return (
            row.kb_id == kb.id
            and row.parse_status != ParseStatus.DELETING
            and (not tags or not tags.isdisjoint(row.tag_ids))
            and (not types or row.file_type.lower() in types)
            and (not conditions or metadata_ok(row.metadata))
        )

    return check


def _too_broad() -> BadRequest:
    return BadRequest(
        f"the filter covers more than {MAX_FILTER_DOCUMENTS} documents; narrow it with knowledge_ids, "
        "tag_ids or file_types",
        code="filter_too_broad",
    )


def _bounded(ids: Iterable[str], seen: dict[str, None]) -> None:
    for knowledge_id in ids:
        seen[knowledge_id] = None
        if len(seen) > MAX_FILTER_DOCUMENTS:
            raise _too_broad()


def _tagged(deps: Dependencies, kb_id: str, tag_ids: list[str]) -> list[str]:
    seen: dict[str, None] = {}
    for tag_id in tag_ids:
        after: tuple[str, str] | None = None
        while True:
            keys = deps.tags.tagged(kb_id, tag_id, after=after, limit=_PAGE)
            _bounded((k for _, k in keys), seen)
            if len(keys) < _PAGE:
                break
            after = keys[-1]
    return list(seen)


def _rows_of_kb(deps: Dependencies, kb_id: str, indexes: Sequence[tuple[str, str] | None]) -> list[Knowledge]:
    """The rows of each listing index in turn (None: every row), one budget for them all: the row past
    MAX_FILTER_DOCUMENTS is a 400 `filter_too_broad` as soon as its page is read."""
    seen: dict[str, None] = {}
    rows: list[Knowledge] = []
    for index in indexes:
        for row in kb_rows(deps, kb_id, index=index, page=_PAGE):
            _bounded((row.id,), seen)
            rows.append(row)
    return rows


def resolve_knowledge_ids(deps: Dependencies, kb: KnowledgeBase, request: SearchRequest) -> list[str] | None:
    """The knowledge ids the search is limited to, None when nothing limits it. Candidates come from the
    narrowest source given, then every candidate row is checked against every filter (a stale tag relation,
    a row of another knowledge base or one being deleted falls out). A tag id that is not a live tag of this
    knowledge base is 400 `unknown_tag_id`, as in the listing."""
    if request.knowledge_ids is None and not request.has_knowledge_filter:
        return None
    if request.tag_ids:  # as the listing: a tag unknown here (or being deleted: gone at once) is a 400
        request = request.model_copy(update={"tag_ids": check_tag_ids(deps, kb.id, request.tag_ids)})
    check = _row_check(kb, request)
    if request.knowledge_ids is not None:
        rows = list(deps.knowledge.get_many(request.knowledge_ids).values())
    elif request.tag_ids:
        candidates = _tagged(deps, kb.id, request.tag_ids)
        rows = list(deps.knowledge.get_many(candidates).values()) if candidates else []
    elif request.file_types:
        rows = _rows_of_kb(deps, kb.id, [("file_type", t) for t in request.file_types])
    else:
        rows = _rows_of_kb(deps, kb.id, [None])
    return list(dict.fromkeys(row.id for row in rows if check(row)))


# ---------------------------------------------------------------- near duplicates and links


class _Links:
    """Signed links for internal URLs, one per URL per request (None: the object is gone). The catalog rows
    of every URL the answer names are read in one batch (`look_up`) before any is signed."""

    def __init__(self, deps: Dependencies) -> None:
        self.deps = deps
        self.expires = deps.settings.download_url_seconds
        self.made: dict[tuple[str, str], str | None] = {}
        self.catalog: dict[str, Resource] = {}

    def look_up(self, hits: Iterable[tuple[str, Chunk | None]]) -> None:
        """Reads the catalog rows of the internal URLs in these hits' texts and images, in one batch."""
        urls: dict[str, None] = {}
        for text, chunk in hits:
            urls.update(dict.fromkeys(INTERNAL_URL.findall(text)))
            urls.update(dict.fromkeys(str(i.get("url") or "") for i in (chunk.image_info if chunk else [])))
        ids = [resource_id_for(url) for url in urls if url]
        self.catalog = self.deps.resources.get_many(ids) if ids else {}

    def link(self, knowledge: Knowledge, url: str) -> str | None:
        if (knowledge.id, url) not in self.made:
            self.made[knowledge.id, url] = self._sign(knowledge, url)
        return self.made[knowledge.id, url]

    def _sign(self, knowledge: Knowledge, url: str) -> str | None:
        deps = self.deps
        # only the document's own stored files: a URL its text names (a tenant writes any text) is no grant
        resource = self.catalog.get(resource_id_for(url))
        if resource is None or resource.deleted or resource.owner_id != knowledge.id:
            return None
        name = url.rsplit("/", 1)[-1]
        key = image_copy_key(knowledge.tenant_id, knowledge.id, url)
        try:
            return signed_get(deps, url, key, self.expires, file_name=name)
        except (FileNotFoundError, ValueError):  # gone, or not an object of this store: no link
            return None

    def rewrite(self, knowledge: Knowledge, text: str) -> str:
        return INTERNAL_URL.sub(lambda m: self.link(knowledge, m.group(0)) or "", text)

    def images(self, knowledge: Knowledge, chunk: Chunk | None) -> list[dict[str, Any]]:
        out = []
        for info in chunk.image_info if chunk else []:
            url = str(info.get("url") or "")
            link = self.link(knowledge, url) if url else None
            if link is None:
                continue
            shown = {k: v for k, v in info.items() if k != "url" and isinstance(v, str | int | float)}
            out.append({"url": link, **shown})
        return out


# ---------------------------------------------------------------- search


def engine_depth(top_k: int, capped: bool) -> int:
    """Hits to ask of the engine for `top_k` answers: spares for collapsed duplicates, and with a per-document
    cap room for other documents' hits behind one document's run."""
    return top_k + (min(2 * top_k + _SPARE, _SPARE_CAPPED) if capped else min(top_k, _SPARE))


def fold_copies(
    hits: Sequence[_Hit], document_of: Callable[[_Hit], str], words: Callable[[_Hit], str]
) -> list[tuple[_Hit, list[_Hit]]]:
    """Best-first `hits` as (hit, its copies): a hit whose words repeat a better hit of another document
    (`near_duplicates`: the same passage, markup aside) is listed under that hit instead of taking a place."""
    groups: list[tuple[_Hit, str, list[_Hit]]] = []
    for hit in hits:
        terms = words(hit)
        home = next(
            (g for g in groups if document_of(g[0]) != document_of(hit) and near_duplicates(terms, g[1])),
            None,
        )
        if home is None:
            groups.append((hit, terms, []))
        else:
            home[2].append(hit)
    return [(hit, copies) for hit, _, copies in groups]


def per_document_capped(
    hits: Sequence[_Hit], document_of: Callable[[_Hit], str], top_k: int, cap: int | None
) -> list[_Hit]:
    """The best `top_k` of best-first `hits` with at most `cap` of one document while another document has a
    hit to offer: a document's further hits wait, in order, and fill the places left when too few other
    documents match (a knowledge base of one document still answers `top_k` hits). No cap: the first `top_k`.
    """
    if cap is None:
        return list(hits[:top_k])
    taken: Counter[str] = Counter()
    chosen: list[tuple[int, _Hit]] = []
    waiting: list[tuple[int, _Hit]] = []
    for place, hit in enumerate(hits):
        if len(chosen) == top_k:
            break
        document = document_of(hit)
        if taken[document] < cap:
            taken[document] += 1
            chosen.append((place, hit))
        else:
            waiting.append((place, hit))
    # too few other documents: the waiting hits fill the places left, all in score order
    chosen += waiting[: top_k - len(chosen)]
    return [hit for _, hit in sorted(chosen, key=itemgetter(0))]


def past_cap(answer: Sequence[_Hit], document_of: Callable[[_Hit], str], cap: int | None) -> int:
    """How many hits of `per_document_capped`'s answer are a document's waiting hits (past its `cap`): they
    stand in only while no other document's hit is found, so the engine is asked deeper for one
    (`domain/retrieval.deepened`)."""
    if cap is None:
        return 0
    return sum(max(0, n - cap) for n in Counter(document_of(hit) for hit in answer).values())


def _unread(cache: dict[_Key, _Row | None], keys: Sequence[_Key]) -> list[_Key]:
    """The keys no shallower round of the search read."""
    return [key for key in dict.fromkeys(keys) if key not in cache]


def _remembered(
    cache: dict[_Key, _Row | None], keys: Sequence[_Key], found: dict[_Key, _Row]
) -> dict[_Key, _Row]:
    """The rows of `keys` found, this round's reads (`found`) kept for deeper rounds (None: not found)."""
    cache.update({key: found.get(key) for key in _unread(cache, keys)})
    return {key: row for key in keys if (row := cache[key]) is not None}


def hybrid_search(
    deps: Dependencies, tenant_id: str, kb_id: str, request: SearchRequest
) -> list[dict[str, Any]]:
    kb = require_kb(deps, tenant_id, kb_id)
    if kb.type == "faq":  # entries with their answers, negatives pushed down (chalicelib/faq)
        if request.knowledge_ids is not None or request.has_knowledge_filter:
            raise BadRequest(
                "an FAQ knowledge base is searched without knowledge, tag, file type or metadata filters",
                code="filter_not_supported",
            )
        if request.max_chunks_per_document is not None:
            raise BadRequest(
                "an FAQ knowledge base has entries, not documents: max_chunks_per_document does not apply",
                code="option_not_supported",
            )
        from chalicelib.faq.entries import search as faq_search

        return faq_search(deps, kb, request, tenant_id)
    query, top_k = request.query_text, request.match_count
    capped = request.max_chunks_per_document is not None
    # a cap or folded copies may pass over many hits: ask the engine for room and keep every candidate
    deep = capped or request.collapse_copies
    keyword, vector = retriever_lists(kb, request.retriever)
    only = resolve_knowledge_ids(deps, kb, request)
    if (only is not None and not only) or not (keyword or vector):
        return []
    model = require_usable_for_api(deps, kb)
    qvec = None
    # asked for by name (`retriever: vector`), the vector list runs whatever the query's script
    if vector and (request.retriever == "vector" or reads_query(model, query)):
        # under the searching tenant (a shared knowledge base's reader is not its owner): a query cached
        # under the owner's would show in the owner's embedding counts
        qvec = embed_query(deps, tenant_id, model, query)

    # each result's document and chunk, for its links once the answer is chosen, and its words (a hit id
    # stands for the same chunk at every depth)
    sources: dict[str, tuple[Knowledge, Chunk | None]] = {}
    words: dict[str, str] = {}
    read_chunks: dict[tuple[str, str], Chunk | None] = {}
    read_rows: dict[str, Knowledge | None] = {}
    # searched within one document, its further hits have no other document's to wait for
    cap = None if only is not None and len(only) == 1 else request.max_chunks_per_document

    def collect(depth: int) -> tuple[int, list[dict[str, Any]]]:
        """(the engine's hits at this depth, the results they make); their sources and words noted."""
        hits = deps.engine(kb.retrieval_engine).hybrid_search(
            IndexSpace.of(model),
            kb.id,
            query,
            qvec,
            depth,
            keyword=keyword,
            vector=vector,
            knowledge_ids=only,
            keyword_weight=None if request.vector_weight is None else 1.0 - request.vector_weight,
            min_score=request.min_score,
        )
        # Two batched reads for every hit's chunk and parent, one batched read for the documents; a deeper
        # round reads only the rows no shallower one did.
        hit_keys = [(hit.knowledge_id, hit.chunk_id) for hit in hits]
        new = _unread(read_chunks, hit_keys)
        chunks = _remembered(read_chunks, hit_keys, deps.chunks.get_many(new) if new else {})
        parent_keys = [
            (key[0], chunk.parent_chunk_id)
            for key, chunk in chunks.items()
            if chunk.parent_chunk_id and chunk.chunk_type == ChunkType.TEXT
        ]
        new = _unread(read_chunks, parent_keys)
        parents = _remembered(read_chunks, parent_keys, deps.chunks.get_many(new) if new else {})
        row_keys = [hit.knowledge_id for hit in hits]
        new_rows = _unread(read_rows, row_keys)
        rows = _remembered(read_rows, row_keys, deps.knowledge.get_many(new_rows) if new_rows else {})
        # the index's own switches and knowledge base say the same; read here as well, so no write that raced
        # a switch shows a disabled document, and a document moved out (its entries not yet repointed) is not
        # shown in the knowledge base it left, to a tenant it was shared with among others
        documents = {
            k: row
            for k, row in rows.items()
            if row.kb_id == kb.id
            and row.parse_status != ParseStatus.DELETING
            and row.enable_status == EnableStatus.ENABLED
        }
        # per document: each kept hit's words and its place in the results
        kept: dict[str, list[tuple[str, int]]] = {}
        results: list[dict[str, Any]] = []
        for hit in hits:
            knowledge = documents.get(hit.knowledge_id)
            if knowledge is None:  # deleted, being deleted or moved out: its entries are on their way
                continue
            chunk = chunks.get((hit.knowledge_id, hit.chunk_id))
            if chunk is not None and not chunk.is_enabled:
                # the row is the truth: an entry a racing write left on (a document's switch on that listed
                # the chunk before its switch-off) is not shown
                continue
            content = chunk.content if chunk else hit.content
            parent = (
                parents.get((hit.knowledge_id, chunk.parent_chunk_id))
                if chunk and chunk.parent_chunk_id
                else None
            )
            if (
                parent is not None
                and chunk is not None
                and chunk.chunk_type == ChunkType.TEXT
                # a child edited or switched off: the parent's text is no longer its children's (the child's
                # own text is shown, so no edited-away or switched-off text is)
                and not parent.metadata.get(CHILDREN_CHANGED)
            ):
                content = parent.content  # a child hit returns its parent's content (parent-child retrieval)
            terms = words_of(content)
            same_document = kept.setdefault(hit.knowledge_id, [])
            twin = next((place for other, place in same_document if near_duplicates(terms, other)), None)
            chunk_type = chunk.chunk_type.value if chunk else hit.extra.get("chunk_type", "text")
            if twin is not None and not (
                results[twin]["chunk_type"] == ChunkType.SUMMARY.value and chunk_type == ChunkType.TEXT.value
            ):
                continue  # the better hit of this text is already in (hits come best first)
            result: dict[str, Any] = {
                "id": hit.id,
                "chunk_id": hit.chunk_id,
                "knowledge_id": hit.knowledge_id,
                "knowledge_title": knowledge.title,
                "content": content,
                "score": hit.score,
                "match_type": "hybrid"
                if hit.bm25_rank is not None and hit.vector_rank is not None
                else ("keyword" if hit.bm25_rank is not None else "vector"),
                "chunk_type": chunk_type,
                "images": [],
                "start_at": chunk.start_at if chunk else None,
                "end_at": chunk.end_at if chunk else None,
                "copies": [],
            }
            sources[hit.id] = (knowledge, chunk)
            words[hit.id] = terms
            if twin is not None:
                # a summary that only repeats its short body ranked first: the body's chunk (with its place in the
                # document) stands for both, at the summary's score
                result["score"] = results[twin]["score"]
                results[twin] = result
                continue
            same_document.append((terms, len(results)))
            results.append(result)
            if len(results) == top_k and not deep:
                break
        return len(hits), results

    def answered(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The results folded (copies under the best) and capped per document, at most top_k."""
        if request.collapse_copies:
            folded = fold_copies(results, lambda r: r["knowledge_id"], lambda r: words[r["id"]])
            for result, copies in folded:
                result["copies"] = [
                    CopyRef(
                        knowledge_id=c["knowledge_id"],
                        knowledge_title=c["knowledge_title"],
                        chunk_id=c["chunk_id"],
                        score=c["score"],
                    )
                    for c in copies
                ]
            results = [result for result, _ in folded]
        return per_document_capped(
            results, lambda r: r["knowledge_id"], top_k, request.max_chunks_per_document
        )

    def answer_at(depth: int) -> tuple[int, list[dict[str, Any]], int]:
        found, results = collect(depth)
        answer = answered(results)
        return found, answer, past_cap(answer, lambda r: r["knowledge_id"], cap)

    # Hits fold (a parent's children, a summary and its body, copies) and deleted or disabled documents drop
    # out, and a capped document's waiting hits fill places another document's hit further down would take:
    # while fewer than top_k answers (not counting those waiting hits) are made of a full page of hits, the
    # engine is asked deeper, up to MAX_ENGINE_DEPTH hits.
    answer = deepened(answer_at, top_k, engine_depth(top_k, deep))
    links = _Links(deps)  # signed only for the hits answered (a local store's image is copied to sign it)
    links.look_up((result["content"], sources[result["id"]][1]) for result in answer)
    for result in answer:
        knowledge, chunk = sources[result["id"]]
        result["content"] = links.rewrite(knowledge, result["content"])
        result["images"] = links.images(knowledge, chunk)
    return within_answer_size(answer)


#: an answer's JSON (as the API writes it: non-ASCII escaped, a CJK character 6 bytes) stays under Lambda's 6 MB
#: response: 100 hits of long CJK chunks with their images' texts could pass it, and the caller got a 502
SEARCH_ANSWER_MAX_BYTES = ANSWER_MAX_BYTES
_IMAGE_TEXTS = ("caption", "ocr_text")


def within_answer_size(answer: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answer within SEARCH_ANSWER_MAX_BYTES: past it, the hits' images without their texts (each image's
    texts are hits of their own), then the last hits left out (logged, without text)."""
    if fitting(answer, SEARCH_ANSWER_MAX_BYTES) == len(answer):
        return answer
    for result in answer:
        result["images"] = [{k: v for k, v in i.items() if k not in _IMAGE_TEXTS} for i in result["images"]]
    kept = fitting(answer, SEARCH_ANSWER_MAX_BYTES)
    logger.warning(
        "search: the answer was cut to fit the response size", extra={"hits": len(answer), "kept": kept}
    )
    return answer[:kept]
