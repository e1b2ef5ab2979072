"""OpenSearch retrieval engine (managed domains, OpenSearch Serverless, or any 2.x/3.x cluster).

Over 600 lines: it is one adapter of one port (the engine contract in tests/index), and splitting the
mapping, the bulk writer and the queries apart would spread one index's format over three files.

One index per IndexSpace, or per space and tenant (`opensearch_names`: the index scope). Each has a
`knn_vector` field (HNSW, cosinesimil) at the space's dimension, a `content` text field analysed for BM25
with the standard tokenizer + `cjk_width`, `lowercase` and `cjk_bigram` (the same bigrams the embedded engine builds, so Korean, Chinese and
Japanese words match without a morphological plugin), and keyword fields to filter on. Before the
tokenizer a `pattern_replace` char filter makes a space of each character the standard tokenizer would keep
inside a word (`WORD_JOINERS`: `node.js`, `parse_config`, `3.14`, `don't`), so words split there as in the
embedded engine and a query `config` finds `parse_config` on both (a query `node.js` finds it as `node`
and `js`, close together). Before that, a char filter per `WORD_SUFFIXES` pattern keeps a word's trailing
`++` or `#` as letters (`c++` is `cplusplus`, `c#` is `csharp`), so `C++`, `C#` and `C` are three words, as
in the embedded engine. At index time
the bigram filter also outputs unigrams (a query's one-character Chinese word finds the runs it sits
in); the search analyzer keeps bigrams alone (`weknora_query`), as the embedded engine does. An index
created before that split keeps the analyzer it was created with (an index's analyzers cannot change
while it is open): its documents match as before.

Existing indices (`ANALYSIS_VERSION`, in the index's `_meta` as `weknora_analysis`): none, before the joiner
split; 2, before the word suffixes; 3, now. An older index keeps its analyzers, and the query text is written
so that every version's analyzer reads it as its documents were read (`bounded_query_text`, `proximity_pairs`:
the joiners and the `++`/`#` stay as the user wrote them): on an index without `_meta` the tokens keep
`node.js` whole, so its documents match as before but `config` does not find `parse_config`; on one of
version 2 or before, `c++`, `c#` and `c` are all `c` there, as before (a `C++` query still finds C and C#
text). `scripts/rebuild_opensearch_index.py` (`opensearch_rebuild`) rebuilds one from its own `_source` (no
re-embedding) as `versioned_name(name)`, the form `ensure_index` creates, behind an alias `name` (the space's
name, which requests use), swapped in atomically; writes are blocked on the old index while it is copied.

Folding (`chalicelib.domain.text_fold.fold`: NFKC width folding, traditional → simplified Chinese with OpenCC,
lowercase) runs here in Python, because no stock OpenSearch analyzer has OpenCC's dictionary: a document
whose folded text differs from its lowercased text also gets the folded text in `search_text` (same
analyzer; `content` stays as written, for display), and a BM25 query is the folded query text matched
against both fields (`dis_max`: a document scores by its better field). Queries and documents therefore
see the same folding as in the embedded engine. An index created before `search_text` existed gets the
field added to its mapping on first use; its older documents keep matching through `content`.

Query size: the match text is the query's distinct pieces, at most 128 terms (`bounded_query_text`), so
no repeat, run of ideographs or emoji makes more than OpenSearch's 1,024 clauses; a BM25 query the server
still refuses (a 400: its only free part is the text) is the tenant's 400 `query_too_complex`.

Term proximity: each two consecutive words of the query (`proximity_pairs`, the embedded engine's
rule) add a `match_phrase` with slop `PROXIMITY_WINDOW - 1` to the `bool`'s `should`, so a chunk holding
them close together scores again, as the embedded engine's FTS5 `NEAR` clauses do.

Hybrid search sends a BM25 `match` query and a `knn` query as two requests and fuses them
client-side with the same fusion as the embedded engine, so it needs no neural-search plugin or search
pipeline.

Deletes: managed domains use `_delete_by_query`. `record_ids=True` is for engines without it
(OpenSearch Serverless): the ids are read with a `search_after` scan and deleted with `_bulk`.
`server_ids=True` (the default with record_ids) is for Serverless VECTORSEARCH collections, which
assign document `_id`s themselves: documents are indexed without `_id`, and an upsert first deletes
the documents whose `id` field matches, so re-indexing never duplicates (given a refresh between).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import numpy as np
import numpy.typing as npt
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as TransportUnreachable
from opensearchpy.exceptions import NotFoundError, RequestError, TransportError

from chalicelib.adapters.index.analysis import (
    WORD_JOINERS,
    WORD_SUFFIXES,
    bounded_query_text,
    proximity_pairs,
)
from chalicelib.adapters.index.common import (
    DEFAULT_CANDIDATES,
    PROXIMITY_WINDOW,
    QueryTooComplex,
    remap_entry,
    unit_vector,
)
from chalicelib.adapters.index.fusion import KEYWORD_WEIGHT, rank
from chalicelib.adapters.index.opensearch_names import IndexNames, kb_filters, tenant_indexes
from chalicelib.domain.text_fold import fold
from chalicelib.ports import IndexEntry, IndexSpace, IndexUnavailable, IndexWriteError, SearchHit
from chalicelib.ports.index import IndexRefused

VECTOR_FIELD = "embedding"
SEARCH_FIELD = "search_text"
TEXT_ANALYZER = "weknora_text"
QUERY_ANALYZER = "weknora_query"
#: the index analysis `index_body` creates, in the index's `_meta` (none: before the joiner split; 2: before
#: WORD_SUFFIXES)
ANALYSIS_VERSION = 3
_JOINERS_FILTER = "weknora_word_joiners"
#: one `pattern_replace` char filter per WORD_SUFFIXES pattern, run in its order before the joiners' filter
_SUFFIX_FILTERS = {f"weknora_word_suffix_{i}": rule for i, rule in enumerate(WORD_SUFFIXES)}
_CHAR_FILTERS = [*_SUFFIX_FILTERS, _JOINERS_FILTER]
_TEXT_MAPPING = {"type": "text", "analyzer": TEXT_ANALYZER, "search_analyzer": QUERY_ANALYZER}
_SEARCH_MAPPING = dict(_TEXT_MAPPING)
_LEGACY_SEARCH_MAPPING = {"type": "text", "analyzer": TEXT_ANALYZER}  # indices created before weknora_query
TERMS_BATCH = 1000  # values per `terms` filter / delete request
#: answers that mean "not now": throttled, a node down or overloaded, a gateway timing out
_BUSY_STATUSES = frozenset({429, 502, 503, 504})
#: an item error that a later retry can pass: a full write queue, an index blocked while its disk fills
_BUSY_ITEM_ERRORS = frozenset({"es_rejected_execution_exception", "cluster_block_exception"})
Refresh = bool | Literal["wait_for"]


#: the key of an index's `_meta` that records its analysis version
ANALYSIS_META_KEY = "weknora_analysis"
_VERSIONED = re.compile(r"(?P<name>.+)-a\d+")


def versioned_name(name: str, version: int = ANALYSIS_VERSION) -> str:
    """The index behind the alias `name`, created with that analysis version (the current one by default)."""
    return f"{name}-a{version}"


def unversioned(concrete: str) -> str | None:
    """The alias a `versioned_name` (of any analysis version) stands behind; None for another name."""
    found = _VERSIONED.fullmatch(concrete)
    return found["name"] if found else None


#: replicas of a managed domain's indexes: 0 on one data node, 1 on two or more
AUTO_EXPAND_REPLICAS = "0-1"


def index_body(
    space: IndexSpace,
    *,
    knn_engine: str = "lucene",
    shards: int | None = None,
    replicas: int | None = None,
    auto_expand_replicas: str | None = AUTO_EXPAND_REPLICAS,
    ef_construction: int = 128,
    m: int = 16,
) -> dict[str, Any]:
    """The create-index request for a space. Shards are left to the cluster unless given; replicas follow
    the data nodes (`auto_expand_replicas`: none on a one-node domain, whose replica could never be placed
    and kept the index yellow for ever) unless given. OpenSearch Serverless rejects both."""
    index_settings: dict[str, Any] = {"knn": True}
    if shards is not None:
        index_settings["number_of_shards"] = shards
    if replicas is not None:
        index_settings["number_of_replicas"] = replicas
    elif auto_expand_replicas:
        index_settings["auto_expand_replicas"] = auto_expand_replicas
    return {
        "settings": {
            "index": index_settings,
            "analysis": {
                # a joiner is never a token of its own, so a space in its place splits and drops nothing;
                # none of them is special inside a character class
                "char_filter": {
                    **{
                        name: {"type": "pattern_replace", "pattern": pattern, "replacement": letters}
                        for name, (pattern, letters) in _SUFFIX_FILTERS.items()
                    },
                    _JOINERS_FILTER: {
                        "type": "pattern_replace",
                        "pattern": f"[{WORD_JOINERS}]",
                        "replacement": " ",
                    },
                },
                "filter": {"cjk_bigram_unigrams": {"type": "cjk_bigram", "output_unigrams": True}},
                "analyzer": {
                    TEXT_ANALYZER: {
                        "type": "custom",
                        "char_filter": list(_CHAR_FILTERS),
                        "tokenizer": "standard",
                        "filter": ["cjk_width", "lowercase", "cjk_bigram_unigrams"],
                    },
                    QUERY_ANALYZER: {
                        "type": "custom",
                        "char_filter": list(_CHAR_FILTERS),
                        "tokenizer": "standard",
                        "filter": ["cjk_width", "lowercase", "cjk_bigram"],
                    },
                },
            },
        },
        "mappings": {
            "dynamic": "strict",
            "_meta": {ANALYSIS_META_KEY: ANALYSIS_VERSION},
            "properties": {
                "id": {"type": "keyword"},
                "kb_id": {"type": "keyword"},
                "knowledge_id": {"type": "keyword"},
                "chunk_id": {"type": "keyword"},
                "source_id": {"type": "keyword"},
                "source_type": {"type": "keyword"},
                "chunk_type": {"type": "keyword"},
                "is_enabled": {"type": "boolean"},
                "content": dict(_TEXT_MAPPING),
                SEARCH_FIELD: dict(_SEARCH_MAPPING),
                VECTOR_FIELD: {
                    "type": "knn_vector",
                    "dimension": space.dimensions,
                    "method": {
                        "name": "hnsw",
                        "space_type": "cosinesimil",
                        "engine": knn_engine,
                        "parameters": {"ef_construction": ef_construction, "m": m},
                    },
                },
            },
        },
    }


def search_text(content: str) -> str | None:
    """The folded text a document carries in `search_text`, or None when folding changes nothing the
    analyzer's own lowercasing would not."""
    folded = fold(content)
    return None if folded == content.lower() else folded


def bm25_body(
    kb_id: str,
    query_text: str,
    size: int,
    knowledge_ids: Sequence[str] | None = None,
    bounded: str | None = None,
) -> dict[str, Any]:
    """`bounded`: `bounded_query_text(query_text)` when the caller has it already."""
    query = bounded_query_text(query_text) if bounded is None else bounded
    scoring: dict[str, Any] = {
        "must": [
            {
                "dis_max": {
                    "queries": [
                        {"match": {"content": {"query": query}}},
                        {"match": {SEARCH_FIELD: {"query": query}}},
                    ]
                }
            }
        ]
    }
    proximity = [
        {
            "dis_max": {
                "queries": [
                    {"match_phrase": {field: {"query": f"{a} {b}", "slop": PROXIMITY_WINDOW - 1}}}
                    for field in ("content", SEARCH_FIELD)
                ]
            }
        }
        for a, b in proximity_pairs(query_text)
    ]
    if proximity:  # scores on top of `must`, never required: the embedded engine's NEAR clauses
        scoring["should"] = proximity
    return {
        "size": size,
        "_source": {"excludes": [VECTOR_FIELD, SEARCH_FIELD]},
        "query": {
            "bool": {
                **scoring,
                "filter": kb_filters(kb_id, enabled_only=True, knowledge_ids=knowledge_ids),
            }
        },
        "sort": [{"_score": "desc"}, {"id": "asc"}],  # deterministic ties
        "track_scores": True,  # keep `_score` in hits although a sort is given
    }


def knn_body(
    kb_id: str, vector: npt.NDArray[np.float32], size: int, knowledge_ids: Sequence[str] | None = None
) -> dict[str, Any]:
    # The filter sits inside the knn clause (efficient filtering: Lucene ≥2.4, Faiss ≥2.9), so k
    # neighbours are found among this kb's enabled entries instead of being cut after the search.
    return {
        "size": size,
        "_source": {"excludes": [VECTOR_FIELD, SEARCH_FIELD]},
        "query": {
            "knn": {
                VECTOR_FIELD: {
                    "vector": [float(x) for x in vector],
                    "k": size,
                    "filter": {
                        "bool": {"filter": kb_filters(kb_id, enabled_only=True, knowledge_ids=knowledge_ids)}
                    },
                }
            }
        },
    }


@contextlib.contextmanager
def unavailable_when_busy() -> Iterator[None]:
    """The transport's "not now" as the port's IndexUnavailable: no connection, a timeout, a TLS failure,
    or an HTTP status in _BUSY_STATUSES. Any other error status is the port's IndexRefused (a bad request,
    a refused credential: not retried as an outage). Only the class, the status and the error's type are
    kept, not chained (`from None`): the answer's reason (in the transport error's text) stays out."""
    try:
        yield
    except TransportUnreachable as error:  # refused, reset, timed out (opensearch-py's own class)
        raise IndexUnavailable(f"index unreachable ({type(error).__name__})") from None
    except TransportError as error:
        if error.status_code in _BUSY_STATUSES:
            raise IndexUnavailable(f"index busy (HTTP {error.status_code})") from None
        info = error.info if isinstance(error.info, Mapping) else {}
        status, kind = _failure(error.status_code, info.get("error")).split(" ", 1)
        raise IndexRefused(status, kind) from None


def _item_error_kind(result: Mapping[str, Any]) -> str | None:
    """A bulk item's error type (`version_conflict_engine_exception`, ...), None without one."""
    error = result.get("error") or result.get(
        "cause"
    )  # a bulk item's error, a delete_by_query failure's cause
    return error.get("type") if isinstance(error, Mapping) else None


def _busy_item(result: Mapping[str, Any]) -> bool:
    return result.get("status") in _BUSY_STATUSES or _item_error_kind(result) in _BUSY_ITEM_ERRORS


def _nothing_to_change(op: str, result: Mapping[str, Any]) -> bool:
    """An item whose document is gone: a delete that finds nothing, or a partial update (a switch, a move) of
    an entry deleted between its scan and the update (a chunk deleted, a reparse): nothing to do, no failure."""
    if result.get("status") != 404:
        return False
    return op == "delete" or (op == "update" and _item_error_kind(result) == "document_missing_exception")


def _failure(status: Any, error: Any) -> str:
    """A failed item as an error message keeps it: its HTTP status and the kind of error
    (`400 mapper_parsing_exception`), never the server's reason text, which may quote the document or the
    cluster's internals (the message reaches logs)."""
    kind = error.get("type") if isinstance(error, Mapping) else None
    if not (
        isinstance(kind, str) and len(kind) <= 100 and kind.isascii() and kind.replace("_", "").isalnum()
    ):
        kind = "error"
    return f"{status if isinstance(status, int) else '?'} {kind}"


class OpenSearchEngine:
    """RetrieveEngine on opensearch-py. Thread-safe as far as the client is (opensearch-py is)."""

    engine_name = "opensearch"

    def __init__(
        self,
        client: OpenSearch,
        *,
        bulk_max_bytes: int = 5_000_000,
        refresh: Refresh = "wait_for",
        record_ids: bool = False,
        server_ids: bool | None = None,
        candidates: int = DEFAULT_CANDIDATES,
        keyword_weight: float = KEYWORD_WEIGHT,
        knn_engine: str = "lucene",
        shards: int | None = None,
        replicas: int | None = None,
        auto_expand_replicas: str | None = AUTO_EXPAND_REPLICAS,
        page_size: int = 1000,
        aliased: bool = True,
        tenant_of: Callable[[str], str | None] | None = None,
    ) -> None:
        """`refresh`: "wait_for" (writes visible to the next search without forcing a refresh),
        True (force), False (Serverless, or bulk loads that tolerate ~1 s of staleness).
        `record_ids`: delete by scanning ids + `_bulk` instead of `_delete_by_query`.
        `server_ids`: let the engine assign `_id` (defaults to `record_ids`).
        `aliased`: create a new index as `versioned_name(name)` behind an alias `name` (opensearch_rebuild).
        `tenant_of`: a knowledge base's tenant (None: gone), for the "tenant" index scope (`IndexNames`)."""
        self.client = client
        self.bulk_max_bytes = bulk_max_bytes
        self.refresh = refresh
        self.record_ids = record_ids
        self.server_ids = record_ids if server_ids is None else server_ids
        self.candidates = candidates
        self.keyword_weight = keyword_weight
        self.knn_engine = knn_engine
        self.shards = shards
        self.replicas = replicas
        self.auto_expand_replicas = auto_expand_replicas
        self.page_size = page_size
        self.aliased = aliased
        self.names = IndexNames(tenant_of)
        self._ready: set[str] = set()
        self._lock = threading.Lock()

    @classmethod
    def for_serverless(cls, client: OpenSearch, **kwargs: Any) -> OpenSearchEngine:
        """Settings for an OpenSearch Serverless VECTORSEARCH collection: no refresh parameter, no
        `_delete_by_query`, server-assigned `_id`s, and the Faiss engine (the one it runs)."""
        options: dict[str, Any] = {
            "refresh": False,
            "record_ids": True,
            "knn_engine": "faiss",
            "auto_expand_replicas": None,
            "aliased": False,  # nothing to rebuild with there: no `_reindex`
        }
        options.update(kwargs)
        return cls(client, **options)

    # ------------------------------------------------------------ index management

    def ensure_index(self, space: IndexSpace, name: str | None = None) -> None:
        """Creates the index `name` (the space's own by default) of the space's mapping, if missing."""
        name = name or space.name
        with self._lock:
            if name in self._ready:
                return
        if not self.client.indices.exists(index=name):
            body = index_body(
                space,
                knn_engine=self.knn_engine,
                shards=self.shards,
                replicas=self.replicas,
                auto_expand_replicas=self.auto_expand_replicas,
            )
            if self.aliased:
                body["aliases"] = {name: {}}
            try:
                self.client.indices.create(index=versioned_name(name) if self.aliased else name, body=body)
            except RequestError as exc:
                if exc.error != "resource_already_exists_exception":  # another worker won the race
                    raise
        else:  # an index from before `search_text`: adding a field to a mapping is allowed, and idempotent
            try:
                self.client.indices.put_mapping(
                    index=name, body={"properties": {SEARCH_FIELD: dict(_SEARCH_MAPPING)}}
                )
            except RequestError:  # an index from before the query analyzer: the field as its analysis has it
                self.client.indices.put_mapping(
                    index=name, body={"properties": {SEARCH_FIELD: dict(_LEGACY_SEARCH_MAPPING)}}
                )
        with self._lock:
            self._ready.add(name)

    def drop_index(self, space: IndexSpace) -> None:
        """Deletes the space's indexes (its own, its tenants'), those behind aliases too (tests, tear-down)."""
        for pattern in (space.name, tenant_indexes(space)):
            # `DELETE <alias>` is refused: name the indices behind it
            with contextlib.suppress(NotFoundError):
                if behind := self.client.indices.get_alias(index=pattern):
                    self.client.indices.delete(index=",".join(behind))
        with self._lock:
            self._ready.clear()  # the next write of any index checks it again

    def _refresh_param(self) -> str | None:
        if self.refresh is True:
            return "true"
        if self.refresh == "wait_for":
            return "wait_for"
        return None

    # ------------------------------------------------------------ bulk

    def _bulk(self, lines: Sequence[tuple[bytes, ...]]) -> list[dict[str, Any]]:
        """Sends actions (each a tuple of NDJSON lines) in requests of at most bulk_max_bytes.

        Returns every item result. When items failed (a document already gone is not a failure:
        `_nothing_to_change`): IndexUnavailable if every failure is the cluster asking to wait, else
        IndexWriteError."""
        items: list[dict[str, Any]] = []
        for chunk in self._split(lines):
            params: dict[str, Any] = {}
            refresh = self._refresh_param()
            if refresh:
                params["refresh"] = refresh
            resp = self.client.bulk(body=b"".join(chunk), params=params)
            items.extend(resp.get("items", []))
            if resp.get("errors"):
                failed = [
                    (op, res)
                    for item in resp["items"]
                    for op, res in item.items()
                    if res.get("error") and not _nothing_to_change(op, res)
                ]
                if failed:
                    if all(_busy_item(res) for _, res in failed):
                        raise IndexUnavailable(f"bulk: {len(failed)} actions rejected as busy")
                    op, res = next((op, res) for op, res in failed if not _busy_item(res))
                    raise IndexWriteError(
                        f"bulk: {len(failed)} of {len(resp['items'])} actions failed; first {op} "
                        f"{res.get('_id')}: {_failure(res.get('status'), res.get('error'))}"
                    )
        return items

    def _split(self, actions: Sequence[tuple[bytes, ...]]) -> Iterator[list[bytes]]:
        chunk: list[bytes] = []
        size = 0
        for action in actions:
            action_size = sum(len(line) for line in action)
            if chunk and size + action_size > self.bulk_max_bytes:
                yield chunk
                chunk, size = [], 0
            chunk.extend(action)  # an action larger than the cap still goes, alone
            size += action_size
        if chunk:
            yield chunk

    @staticmethod
    def _line(obj: Mapping[str, Any]) -> bytes:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"

    # ------------------------------------------------------------ writes

    @unavailable_when_busy()
    def batch_index(self, space: IndexSpace, entries: Sequence[IndexEntry]) -> None:
        if not entries:
            return
        actions: list[tuple[bytes, ...]] = []
        ids_by_index: dict[str, list[str]] = {}
        for entry in entries:  # validate everything before sending anything
            if (index := self.names.of(space, entry.kb_id)) is None:
                raise IndexWriteError(f"knowledge base {entry.kb_id} is gone: it has no index")
            ids_by_index.setdefault(index, []).append(entry.id)
            doc: dict[str, Any] = {
                "id": entry.id,
                "kb_id": entry.kb_id,
                "knowledge_id": entry.knowledge_id,
                "chunk_id": entry.chunk_id,
                "source_id": entry.source_id,
                "source_type": entry.source_type,
                "chunk_type": entry.chunk_type,
                "is_enabled": entry.is_enabled,
                "content": entry.content,
            }
            folded = search_text(entry.content)
            if folded is not None:
                doc[SEARCH_FIELD] = folded
            if entry.vector is not None:
                vec = unit_vector(entry.vector, space)
                if vec is not None:
                    doc[VECTOR_FIELD] = [float(x) for x in vec]
            meta: dict[str, Any] = {"_index": index}
            if not self.server_ids:
                meta["_id"] = entry.id
            actions.append((self._line({"index": meta}), self._line(doc)))
        for index, ids in ids_by_index.items():
            self.ensure_index(space, index)
            if self.server_ids:
                # No custom _id: the upsert is "delete what holds these ids, then index".
                unique = list(dict.fromkeys(ids))
                for start in range(0, len(unique), TERMS_BATCH):
                    self._delete_matching(index, [{"terms": {"id": unique[start : start + TERMS_BATCH]}}])
        self._bulk(actions)

    def _scan(
        self, index: str, query: Mapping[str, Any], source: bool | list[str] | dict[str, Any] = False
    ) -> Iterator[dict[str, Any]]:
        """Every hit of a filter query, paged with search_after on the `id` keyword (no scroll
        context, which Serverless lacks)."""
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": self.page_size,
                "query": query,
                "sort": [{"id": "asc"}],
                "_source": source,
            }
            if after is not None:
                body["search_after"] = after
            try:
                hits = self.client.search(index=index, body=body)["hits"]["hits"]
            except NotFoundError:
                return
            yield from hits
            if len(hits) < self.page_size:
                return
            after = hits[-1]["sort"]

    def _delete_matching(self, index: str, filters: list[dict[str, Any]]) -> int:
        query = {"bool": {"filter": filters}}
        if not self.record_ids:
            try:
                resp = self.client.delete_by_query(
                    index=index,
                    body={"query": query},
                    params={"refresh": "true" if self.refresh else "false", "conflicts": "proceed"},
                )
            except NotFoundError:
                return 0
            except TransportError as error:
                # failed deletes answer with the worst one's status: 403 on a write block, with the failures
                if not (isinstance(error.info, Mapping) and error.info.get("failures")):
                    raise
                resp = error.info
            failures = resp.get("failures")
            if failures:
                first = failures[0] if isinstance(failures[0], Mapping) else {}
                if all(isinstance(f, Mapping) and _busy_item(f) for f in failures):
                    raise IndexUnavailable(f"delete_by_query: {len(failures)} deletes rejected as busy")
                raise IndexWriteError(
                    f"delete_by_query: {len(failures)} failures; first: "
                    f"{_failure(first.get('status'), first.get('cause'))}"
                )
            return int(resp.get("deleted", 0))
        # a pattern (`_found_in`) names no index to write to: each hit is deleted where it is
        actions = [
            (self._line({"delete": {"_index": hit["_index"] if "*" in index else index, "_id": hit["_id"]}}),)
            for hit in self._scan(index, query)
        ]
        items = self._bulk(actions) if actions else []
        return sum(1 for item in items if item.get("delete", {}).get("result") == "deleted")

    def _found_in(self, space: IndexSpace, kb_id: str) -> str:
        """Where deletes, counts and reads look for `kb_id`'s entries: its index, or, when its tenant is
        unknown (the "tenant" scope, the knowledge base gone), every tenant index of the space. The kb_id
        filter is enough there, as knowledge base ids are never reused: a clean-up by a gone knowledge
        base's id (a re-embed's `_gone`, a move's leftovers) finds what a process that knew it wrote."""
        return self.names.of(space, kb_id) or tenant_indexes(space)

    @unavailable_when_busy()
    def delete_by_knowledge(self, space: IndexSpace, kb_id: str, knowledge_ids: Sequence[str]) -> int:
        index = self._found_in(space, kb_id)
        deleted = 0
        for start in range(0, len(knowledge_ids), TERMS_BATCH):
            batch = list(knowledge_ids[start : start + TERMS_BATCH])
            deleted += self._delete_matching(index, [*kb_filters(kb_id), {"terms": {"knowledge_id": batch}}])
        return deleted

    @unavailable_when_busy()
    def delete_by_ids(self, space: IndexSpace, kb_id: str, entry_ids: Sequence[str]) -> int:
        index = self._found_in(space, kb_id)
        deleted = 0
        for start in range(0, len(entry_ids), TERMS_BATCH):
            batch = list(entry_ids[start : start + TERMS_BATCH])
            deleted += self._delete_matching(index, [*kb_filters(kb_id), {"terms": {"id": batch}}])
        return deleted

    @unavailable_when_busy()
    def entries_of(self, space: IndexSpace, kb_id: str, knowledge_id: str) -> list[IndexEntry]:
        index = self._found_in(space, kb_id)
        query = {"bool": {"filter": [*kb_filters(kb_id), {"term": {"knowledge_id": knowledge_id}}]}}
        fields = ["id", "chunk_id", "content", "source_id", "source_type", "chunk_type", "is_enabled"]
        return [
            IndexEntry(
                id=hit["_source"].get("id", hit["_id"]),
                kb_id=kb_id,
                knowledge_id=knowledge_id,
                chunk_id=hit["_source"]["chunk_id"],
                content=hit["_source"].get("content", ""),
                source_id=hit["_source"].get("source_id", ""),
                source_type=hit["_source"].get("source_type", "chunk"),
                chunk_type=hit["_source"].get("chunk_type", "text"),
                is_enabled=bool(hit["_source"].get("is_enabled", True)),
            )
            for hit in self._scan(index, query, source=fields)
        ]

    @unavailable_when_busy()
    def copy(
        self,
        space: IndexSpace,
        src_kb_id: str,
        src_knowledge_id: str,
        dst_kb_id: str,
        dst_knowledge_id: str,
        id_map: Mapping[str, str],
    ) -> int:
        """Copies the knowledge's documents with their stored vectors (read from `_source`, nothing
        re-embedded) to the target's index; entries of chunks missing from `id_map` are not copied."""
        if (index := self.names.of(space, src_kb_id)) is None:
            return 0
        query = {"bool": {"filter": [*kb_filters(src_kb_id), {"term": {"knowledge_id": src_knowledge_id}}]}}
        copies: list[IndexEntry] = []
        for hit in self._scan(index, query, source=True):
            src = hit["_source"]
            vector = src.get(VECTOR_FIELD)
            entry = IndexEntry(
                id=src.get("id", hit["_id"]),
                kb_id=src_kb_id,
                knowledge_id=src_knowledge_id,
                chunk_id=src["chunk_id"],
                content=src.get("content", ""),
                vector=np.asarray(vector, dtype=np.float32) if vector is not None else None,
                source_id=src.get("source_id", ""),
                source_type=src.get("source_type", "chunk"),
                chunk_type=src.get("chunk_type", "text"),
                is_enabled=bool(src.get("is_enabled", True)),
            )
            new = remap_entry(entry, dst_kb_id, src_knowledge_id, dst_knowledge_id, id_map)
            if new is not None:
                copies.append(new)
        self.batch_index(space, copies)
        return len(copies)

    @unavailable_when_busy()
    def move_knowledge(
        self, space: IndexSpace, src_kb_id: str, dst_kb_id: str, knowledge_ids: Sequence[str]
    ) -> int:
        """Repoints the knowledge's documents at another knowledge base: one partial `_bulk` update of
        `kb_id` per document (vectors stay where they are, nothing is re-sent or re-embedded). A re-run
        finds nothing left under the source. Returns how many documents moved."""
        if src_kb_id == dst_kb_id:
            return 0
        if (index := self.names.of(space, src_kb_id)) is None:
            return 0
        target = self.names.of(space, dst_kb_id)
        if target is None:  # deleted mid-move: the next delivery undoes the move
            raise IndexWriteError(f"knowledge base {dst_kb_id} is gone: it has no index")
        if index != target:  # never asked: a move stays within one tenant
            raise IndexWriteError("a move between knowledge bases of different tenants' indexes")
        moved = 0
        for start in range(0, len(knowledge_ids), TERMS_BATCH):
            batch = list(knowledge_ids[start : start + TERMS_BATCH])
            query = {"bool": {"filter": [*kb_filters(src_kb_id), {"terms": {"knowledge_id": batch}}]}}
            hits = list(self._scan(index, query))
            actions = [
                (
                    self._line({"update": {"_index": index, "_id": hit["_id"]}}),
                    self._line({"doc": {"kb_id": dst_kb_id}}),
                )
                for hit in hits
            ]
            if actions:
                self._bulk(actions)
            moved += len(hits)
        return moved

    @unavailable_when_busy()
    def set_enabled(self, space: IndexSpace, kb_id: str, chunk_ids: Sequence[str], enabled: bool) -> int:
        """Sets is_enabled on every entry of these chunks (partial `_bulk` updates, which Serverless
        also accepts, unlike `_update_by_query`); returns how many entries matched."""
        if (index := self.names.of(space, kb_id)) is None:
            return 0
        matched = 0
        for start in range(0, len(chunk_ids), TERMS_BATCH):
            batch = list(chunk_ids[start : start + TERMS_BATCH])
            query = {"bool": {"filter": [*kb_filters(kb_id), {"terms": {"chunk_id": batch}}]}}
            hits = list(self._scan(index, query, source=["is_enabled"]))
            matched += len(hits)
            actions = [
                (
                    self._line({"update": {"_index": index, "_id": hit["_id"]}}),
                    self._line({"doc": {"is_enabled": enabled}}),
                )
                for hit in hits
                if hit.get("_source", {}).get("is_enabled") is not enabled
            ]
            if actions:
                self._bulk(actions)
        return matched

    # ------------------------------------------------------------ reads

    @unavailable_when_busy()
    def count(self, space: IndexSpace, kb_id: str, knowledge_id: str | None = None) -> int:
        index = self._found_in(space, kb_id)
        filters = kb_filters(kb_id)
        if knowledge_id is not None:
            filters.append({"term": {"knowledge_id": knowledge_id}})
        try:
            resp = self.client.count(index=index, body={"query": {"bool": {"filter": filters}}})
        except NotFoundError:
            return 0
        return int(resp["count"])

    @unavailable_when_busy()
    def hybrid_search(
        self,
        space: IndexSpace,
        kb_id: str,
        query_text: str,
        query_vector: npt.NDArray[np.float32] | None,
        top_k: int,
        *,
        keyword: bool = True,
        vector: bool = True,
        knowledge_ids: Sequence[str] | None = None,
        keyword_weight: float | None = None,
        min_score: float = 0.0,
    ) -> list[SearchHit]:
        if top_k <= 0 or (knowledge_ids is not None and not knowledge_ids):
            return []
        qvec = unit_vector(query_vector, space) if (vector and query_vector is not None) else None
        text = query_text.strip() if keyword else ""
        if not text and qvec is None:
            return []
        if (index := self.names.of(space, kb_id)) is None:  # a shared knowledge base: its owner's index
            return []
        pool = max(top_k, self.candidates)
        only = knowledge_ids
        try:
            bm25 = self._keyword_search(index, kb_id, text, pool, only) if text else None
            vec = (
                self._search(index, knn_body(kb_id, qvec, pool, only), "vector_score")
                if qvec is not None
                else None
            )
        except NotFoundError:
            return []
        weight = self.keyword_weight if keyword_weight is None else keyword_weight
        return rank(bm25, vec, top_k, keyword_weight=weight, min_score=min_score)

    def _keyword_search(
        self, index: str, kb_id: str, text: str, size: int, knowledge_ids: Sequence[str] | None
    ) -> list[SearchHit]:
        """The BM25 list. A text with no term the analysis keeps (emoji, punctuation) finds nothing, as on the
        embedded engine, and is not sent."""
        bounded = bounded_query_text(text)
        if not bounded:
            return []
        try:
            return self._search(index, bm25_body(kb_id, text, size, knowledge_ids, bounded), "bm25_score")
        except RequestError:
            # the rest of the request is fixed: a 400 here is the query's text. Not chained: the error
            # carries the server's reason, which may quote the query or the cluster
            raise QueryTooComplex() from None

    def _search(self, index: str, body: Mapping[str, Any], score_key: str) -> list[SearchHit]:
        resp = self.client.search(index=index, body=body)
        hits: list[SearchHit] = []
        for hit in resp["hits"]["hits"]:
            src = hit["_source"]
            raw = float(hit.get("_score") or 0.0)
            # cosinesimil scores are (1 + cos) / 2; report the cosine, as the embedded engine does.
            score = 2.0 * raw - 1.0 if score_key == "vector_score" else raw
            hits.append(
                SearchHit(
                    id=src.get("id", hit["_id"]),
                    chunk_id=src.get("chunk_id", ""),
                    knowledge_id=src.get("knowledge_id", ""),
                    kb_id=src.get("kb_id", ""),
                    content=src.get("content", ""),
                    score=score,
                    extra={
                        "source_id": src.get("source_id", ""),
                        "source_type": src.get("source_type", ""),
                        "chunk_type": src.get("chunk_type", ""),
                        score_key: score,
                    },
                )
            )
        return hits

    def health(self) -> bool:
        try:
            return bool(self.client.ping())
        except Exception:  # any transport failure means unhealthy, never an exception
            return False


def build_opensearch_client(
    url: str,
    *,
    region: str | None = None,
    aws_auth: bool = False,
    service: str | None = None,
    timeout: float = 30.0,
    max_retries: int = 3,
) -> OpenSearch:
    """A client for `url`. With aws_auth, requests are SigV4-signed with the default boto3
    credentials (service `aoss` for Serverless endpoints, `es` otherwise); basic auth may ride in the
    URL (`https://user:pass@host`)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"not an OpenSearch URL: {url!r}")
    use_ssl = parsed.scheme == "https"
    host: dict[str, Any] = {
        "host": parsed.hostname,
        "port": parsed.port or (443 if use_ssl else 80),
        "scheme": parsed.scheme,
    }
    if parsed.path and parsed.path != "/":
        host["url_prefix"] = parsed.path
    kwargs: dict[str, Any] = {
        "hosts": [host],
        "use_ssl": use_ssl,
        "verify_certs": use_ssl,
        "timeout": timeout,
        "max_retries": max_retries,
        "retry_on_timeout": True,
        "http_compress": True,
    }
    if aws_auth:
        import boto3  # adapters only: keeps boto3 out of the import path of non-AWS users
        from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

        credentials = boto3.Session().get_credentials()
        if credentials is None:
            raise RuntimeError("aws_auth=True but boto3 found no AWS credentials")
        region = region or boto3.Session().region_name
        if not region:
            raise ValueError("aws_auth=True needs a region")
        signing_service = service or ("aoss" if ".aoss." in parsed.hostname else "es")
        kwargs["http_auth"] = AWSV4SignerAuth(credentials, region, signing_service)
        kwargs["connection_class"] = RequestsHttpConnection
        kwargs["http_compress"] = False  # the signature covers the uncompressed body
    elif parsed.username:
        kwargs["http_auth"] = (unquote(parsed.username), unquote(parsed.password or ""))
    return OpenSearch(**kwargs)
