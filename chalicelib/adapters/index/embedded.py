"""Embedded retrieval engine: SQLite FTS5 for BM25 plus numpy brute-force cosine for vectors.

Over 600 lines: one engine whose text index and vectors live in one file and change in one
transaction; the analysis and fusion it shares with OpenSearch live beside it.

One SQLite file per knowledge base (`<root>/<space.name>/<kb>.sqlite`) holds the text index and the
vectors together, so a delete by knowledge is one transaction across both and a crash cannot leave
them out of step. Files run in WAL mode: readers never block the single writer, and several threads
or processes can share a file (writers serialise on a per-file lock in-process and on SQLite's own
lock across processes, with a busy timeout).

Terms: each text is pre-tokenised in Python as the OpenSearch index's analysis does (`analysis`:
`document_terms`), and the term string goes into a `unicode61` FTS5 table. The query's terms are OR-ed,
like an OpenSearch `match` query, with a proximity clause per pair of consecutive words
(`proximity_pairs`, FTS5 `NEAR`), like `match_phrase` clauses with slop in a `bool` `should` on
OpenSearch. A file whose stored terms came from an older analysis (`ANALYSIS_VERSION`) has them rebuilt
from the stored content when it is first opened.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from chalicelib.adapters.index.analysis import document_terms, non_cjk_pairs, query_terms
from chalicelib.adapters.index.common import DEFAULT_CANDIDATES, PROXIMITY_WINDOW, remap_entry, unit_vector
from chalicelib.adapters.index.fusion import KEYWORD_WEIGHT, rank
from chalicelib.ports import IndexEntry, IndexSpace, IndexUnavailable, SearchHit

SCHEMA_VERSION = "1"
#: bumped whenever analysis.document_terms changes; files indexed under another version get their terms rebuilt
#: (5: the supplementary planes' ideographs, the Hangzhou numerals and the kana supplements pair up;
#: 6: a word's trailing `++`/`#` is part of it, `WORD_SUFFIXES`)
ANALYSIS_VERSION = "6"
_SQL_BATCH = 500  # bound host parameters per statement

#: the FTS5 tokenizer of the stored term strings: combining marks are part of a word (Devanagari vowel signs,
#: Thai tone marks, Arabic harakat), as on the Python side; remove_diacritics drops Latin ones (İ = i + U+0307)
_FTS_TOKENIZER = "unicode61 remove_diacritics 2 categories 'L* N* Co M*'"


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value);
CREATE TABLE IF NOT EXISTS entries (
    rid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    kb_id TEXT NOT NULL,
    knowledge_id TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    content TEXT NOT NULL,
    terms TEXT NOT NULL,
    source_id TEXT NOT NULL DEFAULT '',
    source_type TEXT NOT NULL DEFAULT 'chunk',
    chunk_type TEXT NOT NULL DEFAULT 'text',
    is_enabled INTEGER NOT NULL DEFAULT 1,
    vector BLOB
);
CREATE INDEX IF NOT EXISTS entries_knowledge ON entries (knowledge_id);
CREATE INDEX IF NOT EXISTS entries_chunk ON entries (chunk_id);
CREATE VIRTUAL TABLE IF NOT EXISTS entries_fts USING fts5 (
    terms, content='entries', content_rowid='rid', tokenize="{tokenizer}"
);
CREATE TRIGGER IF NOT EXISTS entries_ai AFTER INSERT ON entries BEGIN
    INSERT INTO entries_fts (rowid, terms) VALUES (new.rid, new.terms);
END;
CREATE TRIGGER IF NOT EXISTS entries_ad AFTER DELETE ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, terms) VALUES ('delete', old.rid, old.terms);
END;
CREATE TRIGGER IF NOT EXISTS entries_au AFTER UPDATE OF terms ON entries BEGIN
    INSERT INTO entries_fts (entries_fts, rowid, terms) VALUES ('delete', old.rid, old.terms);
    INSERT INTO entries_fts (rowid, terms) VALUES (new.rid, new.terms);
END;
""".replace("{tokenizer}", _FTS_TOKENIZER)

_COLUMNS = "rid, id, kb_id, knowledge_id, chunk_id, content, source_id, source_type, chunk_type, is_enabled"


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(query: str) -> str:
    """An FTS5 MATCH string OR-ing the query's distinct terms (quoted, so no term is an operator) and a
    `NEAR` per proximity pair. FTS5's `bm25()` sums over every phrase of the expression and a NEAR phrase
    counts only its instances inside the window, so a chunk holding a pair close together scores those
    words again, as a sloppy `match_phrase` in a `bool` `should` adds its score on OpenSearch. NEAR's N
    is the tokens between the two words: PROXIMITY_WINDOW - 1 (FTS5 ignores their order, Lucene's slop
    charges a swap two)."""
    terms = query_terms(query)
    clauses = [_quoted(t) for t in terms]
    clauses += [f"NEAR({_quoted(a)} {_quoted(b)}, {PROXIMITY_WINDOW - 1})" for a, b in non_cjk_pairs(terms)]
    return " OR ".join(clauses)


def _file_stem(kb_id: str) -> str:
    # Safe ids are used as they are (readable on disk); anything else is hashed. Hashed names start
    # with "_", which safe names cannot, so the two forms never collide.
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,120}", kb_id) and ".." not in kb_id:
        return kb_id
    return "_" + hashlib.sha256(kb_id.encode()).hexdigest()


def _batches(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _SQL_BATCH):
        yield items[start : start + _SQL_BATCH]


def _marks(n: int) -> str:
    return ",".join("?" * n)


#: files each thread keeps open: a long-running process (`up`, a warm Lambda) meets ever more knowledge
#: bases, and a connection per file per thread (each with its page cache) grew its memory without end
OPEN_FILES_PER_THREAD = 8
#: vectors kept decoded across files (the least recently searched file's are dropped first)
MATRIX_CACHE_BYTES = 256 * 1024 * 1024


class _Connection(sqlite3.Connection):
    """A subclass only so connections can sit in a WeakSet: a dead thread's connection is closed
    when its thread-local dict goes, instead of leaking until close()."""


_BUSY_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


@contextlib.contextmanager
def _unavailable_when_busy() -> Iterator[None]:
    """Another process held the file past the busy timeout: the port's IndexUnavailable (try again later).
    Every other SQLite error goes on as it is."""
    try:
        yield
    except sqlite3.OperationalError as error:
        if error.sqlite_errorcode & 0xFF not in _BUSY_CODES:  # the primary code, without the extended bits
            raise
        raise IndexUnavailable(f"index file busy ({error.sqlite_errorname})") from error


@dataclass(frozen=True)
class _Matrix:
    generation: int
    rids: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float32]


class EmbeddedEngine:
    """RetrieveEngine on SQLite FTS5 + numpy. Thread-safe; files may be shared by processes."""

    engine_name = "embedded"

    def __init__(
        self,
        root_dir: str | os.PathLike[str],
        *,
        candidates: int = DEFAULT_CANDIDATES,
        keyword_weight: float = KEYWORD_WEIGHT,
        busy_timeout_ms: int = 30_000,
    ) -> None:
        self.root = Path(root_dir)
        self.candidates = candidates
        self.keyword_weight = keyword_weight
        self._busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._guard = threading.Lock()
        self._write_locks: dict[Path, threading.Lock] = {}
        self._all_conns: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._matrices: OrderedDict[Path, _Matrix] = OrderedDict()
        self._closed = False

    # ------------------------------------------------------------ files and connections

    def path_for(self, space: IndexSpace, kb_id: str) -> Path:
        return self.root / space.name / f"{_file_stem(kb_id)}.sqlite"

    def _write_lock(self, path: Path) -> threading.Lock:
        with self._guard:
            lock = self._write_locks.get(path)
            if lock is None:
                lock = self._write_locks[path] = threading.Lock()
            return lock

    def _conn(self, path: Path, space: IndexSpace, kb_id: str, *, create: bool) -> sqlite3.Connection | None:
        """This thread's connection to the file; None when the file does not exist and create=False."""
        if self._closed:
            raise RuntimeError("engine is closed")
        conns: OrderedDict[Path, sqlite3.Connection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = OrderedDict()
        conn = conns.get(path)
        if conn is not None:
            conns.move_to_end(path)
            return conn
        if not path.exists():
            if not create:
                return None
            path.parent.mkdir(parents=True, exist_ok=True)
        # check_same_thread=False only so close() can close every thread's connection; each
        # connection is still used by the one thread that opened it.
        conn = sqlite3.connect(
            path,
            isolation_level=None,
            check_same_thread=False,
            timeout=self._busy_timeout_ms / 1000,
            factory=_Connection,
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            self._init_schema(conn, space, kb_id)
        except BaseException:
            conn.close()
            raise
        conns[path] = conn
        with self._guard:
            self._all_conns.add(conn)
        while len(conns) > OPEN_FILES_PER_THREAD:  # this thread's least recently used file is closed
            _, stale = conns.popitem(last=False)
            with self._guard:
                self._all_conns.discard(stale)  # type: ignore[arg-type]
            stale.close()
        return conn

    @staticmethod
    def _init_schema(conn: sqlite3.Connection, space: IndexSpace, kb_id: str) -> None:
        conn.execute("BEGIN IMMEDIATE")  # two processes creating one file must not race
        try:
            for statement in _split_sql(_SCHEMA):
                conn.execute(statement)
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            if not meta:
                conn.executemany(
                    "INSERT INTO meta (key, value) VALUES (?, ?)",
                    [
                        ("schema_version", SCHEMA_VERSION),
                        ("space", space.name),
                        ("dimensions", space.dimensions),
                        ("kb_id", kb_id),
                        ("generation", 0),
                        ("analysis", ANALYSIS_VERSION),
                    ],
                )
            elif int(meta.get("dimensions", -1)) != space.dimensions or meta.get("kb_id") != kb_id:
                raise ValueError(
                    f"index file holds kb {meta.get('kb_id')!r} at {meta.get('dimensions')} dimensions, "
                    f"not kb {kb_id!r} at {space.dimensions}"
                )
            elif str(meta.get("analysis", "1")) != ANALYSIS_VERSION:
                _reanalyse(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextlib.contextmanager
    def _write(self, space: IndexSpace, kb_id: str) -> Iterator[sqlite3.Connection]:
        """One short write transaction on the knowledge base's file; bumps the generation on commit."""
        path = self.path_for(space, kb_id)
        with self._write_lock(path), _unavailable_when_busy():
            conn = self._conn(path, space, kb_id, create=True)
            assert conn is not None
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    @contextlib.contextmanager
    def _read(self, space: IndexSpace, kb_id: str) -> Iterator[sqlite3.Connection | None]:
        """A read transaction (one consistent WAL snapshot); yields None for a missing file."""
        path = self.path_for(space, kb_id)
        with _unavailable_when_busy():  # a first open sets the file up in a write transaction
            conn = self._conn(path, space, kb_id, create=False)
        if conn is None:
            yield None
            return
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def close(self) -> None:
        """Closes every connection this engine opened (any thread). The engine is unusable after."""
        with self._guard:
            self._closed = True
            conns, self._all_conns = list(self._all_conns), weakref.WeakSet()
            self._matrices.clear()
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    # ------------------------------------------------------------ writes

    def batch_index(self, space: IndexSpace, entries: Sequence[IndexEntry]) -> None:
        by_kb: dict[str, list[tuple[object, ...]]] = {}
        for entry in entries:  # validate everything before writing anything
            blob: bytes | None = None
            if entry.vector is not None:
                vec = unit_vector(entry.vector, space)
                blob = vec.tobytes() if vec is not None else None
            row = (
                entry.id,
                entry.kb_id,
                entry.knowledge_id,
                entry.chunk_id,
                entry.content,
                " ".join(document_terms(entry.content)),
                entry.source_id,
                entry.source_type,
                entry.chunk_type,
                1 if entry.is_enabled else 0,
                blob,
            )
            by_kb.setdefault(entry.kb_id, []).append(row)
        for kb_id, rows in by_kb.items():
            with self._write(space, kb_id) as conn:
                self._upsert(conn, rows)

    @staticmethod
    def _upsert(conn: sqlite3.Connection, rows: Sequence[tuple[object, ...]]) -> None:
        conn.executemany(
            """INSERT INTO entries (id, kb_id, knowledge_id, chunk_id, content, terms, source_id,
                                    source_type, chunk_type, is_enabled, vector)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (id) DO UPDATE SET
                 kb_id = excluded.kb_id, knowledge_id = excluded.knowledge_id,
                 chunk_id = excluded.chunk_id, content = excluded.content, terms = excluded.terms,
                 source_id = excluded.source_id, source_type = excluded.source_type,
                 chunk_type = excluded.chunk_type, is_enabled = excluded.is_enabled,
                 vector = excluded.vector""",
            rows,
        )

    def delete_by_knowledge(self, space: IndexSpace, kb_id: str, knowledge_ids: Sequence[str]) -> int:
        if not knowledge_ids or not self.path_for(space, kb_id).exists():
            return 0
        deleted = 0
        with self._write(space, kb_id) as conn:  # one transaction for all knowledge ids
            for batch in _batches(list(knowledge_ids)):
                cur = conn.execute(f"DELETE FROM entries WHERE knowledge_id IN ({_marks(len(batch))})", batch)
                deleted += cur.rowcount
        return deleted

    def delete_by_ids(self, space: IndexSpace, kb_id: str, entry_ids: Sequence[str]) -> int:
        if not entry_ids or not self.path_for(space, kb_id).exists():
            return 0
        deleted = 0
        with self._write(space, kb_id) as conn:
            for batch in _batches(list(entry_ids)):
                cur = conn.execute(f"DELETE FROM entries WHERE id IN ({_marks(len(batch))})", batch)
                deleted += cur.rowcount
        return deleted

    def entries_of(self, space: IndexSpace, kb_id: str, knowledge_id: str) -> list[IndexEntry]:
        select = (
            "SELECT id, chunk_id, content, source_id, source_type, chunk_type, is_enabled "
            "FROM entries WHERE knowledge_id = ? ORDER BY rid"
        )
        with self._read(space, kb_id) as conn:
            if conn is None:
                return []
            rows = conn.execute(select, (knowledge_id,)).fetchall()
        return [
            IndexEntry(
                id=str(eid),
                kb_id=kb_id,
                knowledge_id=knowledge_id,
                chunk_id=str(chunk_id),
                content=str(content),
                source_id=str(source_id),
                source_type=str(source_type),
                chunk_type=str(chunk_type),
                is_enabled=bool(enabled),
            )
            for eid, chunk_id, content, source_id, source_type, chunk_type, enabled in rows
        ]

    def copy(
        self,
        space: IndexSpace,
        src_kb_id: str,
        src_knowledge_id: str,
        dst_kb_id: str,
        dst_knowledge_id: str,
        id_map: Mapping[str, str],
    ) -> int:
        """Copies the knowledge's entries with their stored vectors; entries of chunks missing from
        `id_map` are not copied. Re-running the copy upserts the same destination ids."""
        select = (
            "SELECT id, chunk_id, content, terms, source_id, source_type, chunk_type, is_enabled, vector "
            "FROM entries WHERE knowledge_id = ? ORDER BY rid"
        )

        def remapped(rows: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
            out: list[tuple[object, ...]] = []
            for eid, chunk_id, content, terms, source_id, source_type, chunk_type, enabled, blob in rows:
                entry = IndexEntry(
                    id=str(eid),
                    kb_id=src_kb_id,
                    knowledge_id=src_knowledge_id,
                    chunk_id=str(chunk_id),
                    content=str(content),
                    source_id=str(source_id),
                    source_type=str(source_type),
                    chunk_type=str(chunk_type),
                    is_enabled=bool(enabled),
                )
                new = remap_entry(entry, dst_kb_id, src_knowledge_id, dst_knowledge_id, id_map)
                if new is None:
                    continue
                out.append((
                    new.id, dst_kb_id, dst_knowledge_id, new.chunk_id, content, terms, new.source_id,
                    source_type, chunk_type, enabled, blob,
                ))  # fmt: skip
            return out

        if src_kb_id == dst_kb_id:
            if not self.path_for(space, src_kb_id).exists():
                return 0
            with self._write(space, dst_kb_id) as conn:
                rows = remapped(conn.execute(select, (src_knowledge_id,)).fetchall())
                self._upsert(conn, rows)
            return len(rows)
        with self._read(space, src_kb_id) as src:
            if src is None:
                return 0
            rows = remapped(src.execute(select, (src_knowledge_id,)).fetchall())
        if rows:
            with self._write(space, dst_kb_id) as conn:
                self._upsert(conn, rows)
        return len(rows)

    def move_knowledge(
        self, space: IndexSpace, src_kb_id: str, dst_kb_id: str, knowledge_ids: Sequence[str]
    ) -> int:
        """Moves the knowledge's entries (vectors included, nothing re-embedded) from one knowledge base's
        file to another's: copied into the target first, then dropped from the source, so a crash between
        the two leaves both copies and a re-run finishes the move. Returns how many entries moved."""
        if not knowledge_ids or src_kb_id == dst_kb_id:
            return 0
        select = (
            "SELECT id, knowledge_id, chunk_id, content, terms, source_id, source_type, chunk_type, "
            "is_enabled, vector FROM entries WHERE knowledge_id IN ({}) ORDER BY rid"
        )
        with self._read(space, src_kb_id) as src:
            if src is None:
                return 0
            rows: list[tuple[object, ...]] = []
            for batch in _batches(list(knowledge_ids)):
                for eid, kid, chunk_id, content, terms, sid, stype, ctype, enabled, blob in src.execute(
                    select.format(_marks(len(batch))), batch
                ):
                    rows.append(
                        (eid, dst_kb_id, kid, chunk_id, content, terms, sid, stype, ctype, enabled, blob)
                    )
        if not rows:
            return 0
        with self._write(space, dst_kb_id) as conn:
            self._upsert(conn, rows)
        self.delete_by_knowledge(space, src_kb_id, knowledge_ids)
        return len(rows)

    def set_enabled(self, space: IndexSpace, kb_id: str, chunk_ids: Sequence[str], enabled: bool) -> int:
        """Sets is_enabled on every entry of these chunks; returns how many entries matched."""
        if not chunk_ids or not self.path_for(space, kb_id).exists():
            return 0
        matched = 0
        with self._write(space, kb_id) as conn:
            for batch in _batches(list(chunk_ids)):
                marks = _marks(len(batch))
                matched += conn.execute(
                    f"SELECT COUNT(*) FROM entries WHERE chunk_id IN ({marks})", batch
                ).fetchone()[0]
                conn.execute(
                    f"UPDATE entries SET is_enabled = ? WHERE chunk_id IN ({marks}) AND is_enabled != ?",
                    (int(enabled), *batch, int(enabled)),
                )
        return matched

    # ------------------------------------------------------------ reads

    def count(self, space: IndexSpace, kb_id: str, knowledge_id: str | None = None) -> int:
        with self._read(space, kb_id) as conn:
            if conn is None:
                return 0
            if knowledge_id is None:
                return int(conn.execute("SELECT COUNT(*) FROM entries").fetchone()[0])
            return int(
                conn.execute(
                    "SELECT COUNT(*) FROM entries WHERE knowledge_id = ?", (knowledge_id,)
                ).fetchone()[0]
            )

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
        match = match_expression(query_text) if keyword else ""
        if not match and qvec is None:
            return []
        pool = max(top_k, self.candidates)
        only = json.dumps(list(dict.fromkeys(knowledge_ids))) if knowledge_ids is not None else None
        with self._read(space, kb_id) as conn:
            if conn is None:
                return []
            bm25 = (
                self._bm25(conn, match, pool, only)
                if match
                else ([] if keyword and query_text.strip() else None)
            )
            path = self.path_for(space, kb_id)
            vec = self._vector(conn, path, qvec, pool, only) if qvec is not None else None
        weight = self.keyword_weight if keyword_weight is None else keyword_weight
        return rank(bm25, vec, top_k, keyword_weight=weight, min_score=min_score)

    def bm25_search(self, space: IndexSpace, kb_id: str, query_text: str, top_k: int) -> list[SearchHit]:
        """BM25 alone, best first, score = -bm25() (higher is better)."""
        match = match_expression(query_text)
        with self._read(space, kb_id) as conn:
            return self._bm25(conn, match, top_k, None) if conn is not None and match and top_k > 0 else []

    @staticmethod
    def _hit(row: Sequence[object], score: float, score_key: str) -> SearchHit:
        _rid, eid, kb, kid, cid, content, source_id, source_type, chunk_type, _enabled = row[:10]
        return SearchHit(
            id=str(eid),
            chunk_id=str(cid),
            knowledge_id=str(kid),
            kb_id=str(kb),
            content=str(content),
            score=score,
            extra={
                "source_id": source_id,
                "source_type": source_type,
                "chunk_type": chunk_type,
                score_key: score,
            },
        )

    def _bm25(self, conn: sqlite3.Connection, match: str, limit: int, only: str | None) -> list[SearchHit]:
        """Best first; `only` (a JSON list of knowledge ids) filters inside the query."""
        within = "AND e.knowledge_id IN (SELECT value FROM json_each(?))" if only is not None else ""
        params: tuple[object, ...] = (match, only, limit) if only is not None else (match, limit)
        rows = conn.execute(
            f"""SELECT {", ".join("e." + c.strip() for c in _COLUMNS.split(","))}, bm25(entries_fts) AS s
                FROM entries_fts JOIN entries e ON e.rid = entries_fts.rowid
                WHERE entries_fts MATCH ? AND e.is_enabled = 1 {within}
                ORDER BY s, e.rid LIMIT ?""",
            params,
        ).fetchall()
        return [self._hit(row, -float(row[10]), "bm25_score") for row in rows]

    def _matrix(self, conn: sqlite3.Connection, path: Path) -> _Matrix:
        """The enabled vectors of the file, cached until any writer (any process) bumps the generation."""
        generation = int(conn.execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()[0])
        with self._guard:
            cached = self._matrices.get(path)
            if cached is not None:
                self._matrices.move_to_end(path)
        if cached is not None and cached.generation == generation:
            return cached
        rows = conn.execute(
            "SELECT rid, vector FROM entries WHERE is_enabled = 1 AND vector IS NOT NULL ORDER BY rid"
        ).fetchall()
        rids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        if rows:
            vectors = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
        else:
            vectors = np.zeros((0, 0), dtype=np.float32)
        matrix = _Matrix(generation, rids, vectors)
        with self._guard:
            current = self._matrices.get(path)
            if current is None or current.generation <= generation:
                self._matrices[path] = matrix
                self._matrices.move_to_end(path)
                held = sum(m.vectors.nbytes + m.rids.nbytes for m in self._matrices.values())
                while held > MATRIX_CACHE_BYTES and len(self._matrices) > 1:
                    _, dropped = self._matrices.popitem(last=False)
                    held -= dropped.vectors.nbytes + dropped.rids.nbytes
        return matrix

    def _vector(
        self,
        conn: sqlite3.Connection,
        path: Path,
        qvec: npt.NDArray[np.float32],
        limit: int,
        only: str | None,
    ) -> list[SearchHit]:
        """Best first; `only` (a JSON list of knowledge ids) keeps those rows of the matrix before the top k
        is taken (brute force: a filter costs one indexed lookup of the rows, never a recall loss)."""
        matrix = self._matrix(conn, path)
        if only is not None and matrix.rids.shape[0]:
            kept = np.fromiter(
                (
                    r[0]
                    for r in conn.execute(
                        "SELECT rid FROM entries WHERE knowledge_id IN (SELECT value FROM json_each(?))",
                        (only,),
                    )
                ),
                dtype=np.int64,
            )
            mask = np.isin(matrix.rids, kept)
            matrix = _Matrix(matrix.generation, matrix.rids[mask], matrix.vectors[mask])
        n = matrix.rids.shape[0]
        if n == 0:
            return []
        scores = matrix.vectors @ qvec
        take = min(limit, n)
        idx = np.argpartition(-scores, take - 1)[:take] if take < n else np.arange(n)
        idx = idx[np.lexsort((matrix.rids[idx], -scores[idx]))]
        rids = [int(r) for r in matrix.rids[idx]]
        score_by_rid = {int(matrix.rids[i]): float(scores[i]) for i in idx}
        rows: dict[int, Sequence[object]] = {}
        for start in range(0, len(rids), _SQL_BATCH):
            batch = rids[start : start + _SQL_BATCH]
            for row in conn.execute(
                f"SELECT {_COLUMNS} FROM entries WHERE rid IN ({_marks(len(batch))})", batch
            ):
                rows[int(row[0])] = row
        return [self._hit(rows[r], score_by_rid[r], "vector_score") for r in rids if r in rows]

    def health(self) -> bool:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if not os.access(self.root, os.W_OK):
                return False
            with contextlib.closing(sqlite3.connect(":memory:")) as conn:
                conn.execute("CREATE VIRTUAL TABLE t USING fts5 (x)")
            return not self._closed
        except (OSError, sqlite3.Error):
            return False


def _reanalyse(conn: sqlite3.Connection) -> None:
    """Rebuilds every entry's terms from its stored content with the current index_terms, and the FTS
    table with the current tokenizer from them, inside the caller's transaction; bumps the generation."""
    for trigger in ("entries_ai", "entries_ad", "entries_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS entries_fts")
    last = 0
    while True:
        rows = conn.execute(
            "SELECT rid, content FROM entries WHERE rid > ? ORDER BY rid LIMIT ?", (last, _SQL_BATCH)
        ).fetchall()
        if not rows:
            break
        conn.executemany(
            "UPDATE entries SET terms = ? WHERE rid = ?",
            [(" ".join(document_terms(c)), rid) for rid, c in rows],
        )
        last = rows[-1][0]
    for statement in _split_sql(_SCHEMA):  # the FTS table and its triggers again, then indexed in one go
        conn.execute(statement)
    conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('rebuild')")
    conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('analysis', ?)", (ANALYSIS_VERSION,))
    conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")


def _split_sql(script: str) -> list[str]:
    """Splits the schema script into statements (triggers contain `;` inside BEGIN … END)."""
    statements: list[str] = []
    buf: list[str] = []
    for line in script.strip().splitlines():
        buf.append(line)
        text = "\n".join(buf).strip()
        if text.endswith(";") and sqlite3.complete_statement(text):
            statements.append(text)
            buf = []
    return statements
