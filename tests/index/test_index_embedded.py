"""EmbeddedEngine: the shared contract plus what only a local file engine has to prove."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from index_contract import CORPUS, DIM, EngineContract, constitution_articles, entry, ids, vec

from chalicelib.adapters.index.analysis import document_terms, index_terms, proximity_pairs
from chalicelib.adapters.index.embedded import ANALYSIS_VERSION, EmbeddedEngine, match_expression
from chalicelib.ports import IndexSpace, RetrieveEngine


def _stored_vector(engine: EmbeddedEngine, space: IndexSpace, kb_id: str, entry_id: str) -> np.ndarray:
    with sqlite3.connect(engine.path_for(space, kb_id)) as conn:
        row = conn.execute("SELECT vector FROM entries WHERE id = ?", (entry_id,)).fetchone()
    assert row is not None and row[0] is not None
    return np.frombuffer(row[0], dtype=np.float32)


class TestEmbeddedContract(EngineContract):
    @pytest.fixture
    def engine(self, tmp_path: Path) -> Iterator[EmbeddedEngine]:
        eng = EmbeddedEngine(tmp_path / "index")
        yield eng
        eng.close()

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        assert isinstance(engine, EmbeddedEngine)
        return _stored_vector(engine, space, kb_id, entry_id)


SPACE = IndexSpace(model_id="test/mini", dimensions=DIM)


def test_tokeniser_bigrams_cjk_and_keeps_words() -> None:
    assert index_terms("대한민국은 Hello-World 法 中华") == [
        "대한",
        "한민",
        "민국",
        "국은",
        "hello",
        "world",
        "法",
        "中华",
    ]
    assert index_terms("ＡＢＣ１２") == ["abc12"]  # NFKC folds full width like cjk_width
    assert match_expression('say "hi" OR') == (
        '"say" OR "hi" OR "or" OR NEAR("say" "hi", 4) OR NEAR("hi" "or", 4)'  # the proximity pairs
    )
    assert match_expression("  ...  ") == ""
    assert match_expression("alone") == '"alone"'


def test_proximity_pairs_are_consecutive_distinct_words_without_cjk_runs() -> None:
    assert proximity_pairs("through program or through") == [("through", "program"), ("program", "or")]
    # CJK runs already match as adjacent bigrams; the words around them still pair up
    assert proximity_pairs("대한민국 헌법 Free License") == [("free", "license")]
    assert proximity_pairs("대한민국 헌법") == []
    assert proximity_pairs("one") == []


def test_a_document_indexes_each_cjk_character_beside_the_bigrams() -> None:
    assert document_terms("大韩 法 ok") == ["大韩", "大", "韩", "法", "ok"]
    assert index_terms("大韩 法 ok") == ["大韩", "法", "ok"]  # a query: bigrams alone


def test_tokeniser_folds_traditional_chinese_like_the_query_side() -> None:
    assert index_terms("尊嚴 ＡＢＣ") == index_terms("尊严 abc") == ["尊严", "abc"]


def test_file_from_an_older_analysis_gets_its_terms_rebuilt(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, [entry("t1", "在尊嚴和權利上一律平等")])
    path = eng.path_for(SPACE, "kb1")
    eng.close()
    with sqlite3.connect(path) as conn:  # as an engine before traditional/simplified folding left it
        conn.execute("UPDATE entries SET terms = '在尊 尊嚴 嚴和 和權 權利 利上 上一 一律 律平 平等'")
        conn.execute("DELETE FROM meta WHERE key = 'analysis'")
    eng = EmbeddedEngine(tmp_path)
    try:
        assert ids(eng.hybrid_search(SPACE, "kb1", "尊严 权利", None, 5, vector=False)) == ["t1"]
        with sqlite3.connect(path) as conn:
            assert (
                conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone()[0]
                == ANALYSIS_VERSION
            )
        assert ids(eng.hybrid_search(SPACE, "kb1", "权", None, 5, vector=False)) == [
            "t1"
        ]  # and its characters
    finally:
        eng.close()


def test_combining_marks_stay_inside_their_words() -> None:
    """`\\w` has no combining marks: हिन्दी was cut into ह, न, द, so any Hindi word with those consonants
    matched it. Marks now join their word on both sides of the index; Latin ones still fold away."""
    assert index_terms("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert index_terms("مُحَمَّد") == ["مُحَمَّد"]


def test_a_hindi_word_finds_its_own_text_not_texts_sharing_its_consonants(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    try:
        eng.batch_index(SPACE, [entry("t1", "हिन्दी भाषा में लिखा गया पाठ"), entry("t2", "हिंदू नदी के पास")])
        assert ids(eng.hybrid_search(SPACE, "kb1", "हिन्दी", None, 5, vector=False)) == ["t1"]
        assert ids(eng.hybrid_search(SPACE, "kb1", "istanbul", None, 5, vector=False)) == []
        eng.batch_index(SPACE, [entry("t3", "İstanbul")])  # folds to i + U+0307: the FTS drops the dot
        assert ids(eng.hybrid_search(SPACE, "kb1", "istanbul", None, 5, vector=False)) == ["t3"]
    finally:
        eng.close()


def test_a_file_of_the_old_fts_tokenizer_is_rebuilt_with_the_new_one(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, [entry("t1", "हिन्दी भाषा"), entry("t2", "हिंदू नदी")])
    path = eng.path_for(SPACE, "kb1")
    eng.close()
    with sqlite3.connect(path) as conn:  # as analysis 3 left it: marks split words, in both tokenizers
        for trigger in ("entries_ai", "entries_ad", "entries_au"):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE entries_fts")
        conn.execute(
            "CREATE VIRTUAL TABLE entries_fts USING fts5 (terms, content='entries', content_rowid='rid', "
            "tokenize='unicode61 remove_diacritics 2')"
        )
        conn.execute("UPDATE entries SET terms = 'ह न द भ ष' WHERE id = 't1'")
        conn.execute("UPDATE entries SET terms = 'ह द न द' WHERE id = 't2'")
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('rebuild')")
        conn.execute("UPDATE meta SET value = '3' WHERE key = 'analysis'")
    eng = EmbeddedEngine(tmp_path)
    try:
        assert ids(eng.hybrid_search(SPACE, "kb1", "हिन्दी", None, 5, vector=False)) == ["t1"]
        with sqlite3.connect(path) as conn:
            (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'entries_fts'").fetchone()
            triggers = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()
        assert "categories" in sql and triggers == (3,)
        eng.delete_by_knowledge(SPACE, "kb1", ["k1"])  # the triggers keep the rebuilt FTS table in step
        assert ids(eng.hybrid_search(SPACE, "kb1", "हिन्दी", None, 5, vector=False)) == []
    finally:
        eng.close()


def test_one_file_per_kb_under_space_dir(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, CORPUS)
    assert eng.path_for(SPACE, "kb1") == tmp_path / SPACE.name / "kb1.sqlite"
    assert sorted(p.name for p in (tmp_path / SPACE.name).glob("*.sqlite")) == ["kb1.sqlite", "kb2.sqlite"]
    weird = eng.path_for(SPACE, "../escape/kb")
    assert weird.parent == tmp_path / SPACE.name and weird.name.startswith("_")
    eng.close()


def test_a_thread_keeps_a_bounded_number_of_files_open_and_still_answers_for_every_one(
    tmp_path: Path,
) -> None:
    """A long-running process meets ever more knowledge bases: a connection per file per thread, each with
    its page cache, grew `up`'s memory by a file's worth with every new knowledge base (issue 27's soak)."""
    import chalicelib.adapters.index.embedded as embedded

    eng = EmbeddedEngine(tmp_path)
    kbs = [f"kb{n}" for n in range(embedded.OPEN_FILES_PER_THREAD * 2 + 3)]
    for n, kb in enumerate(kbs):
        eng.batch_index(SPACE, [entry(f"e{n}", f"lighthouse keeper number {n}", kb=kb, vector=vec(1, 0, 0))])
    assert len(eng._local.conns) == embedded.OPEN_FILES_PER_THREAD
    assert len(eng._all_conns) <= embedded.OPEN_FILES_PER_THREAD  # the closed ones are let go
    for n, kb in enumerate(kbs):  # a closed file is opened again when asked for
        assert ids(eng.hybrid_search(SPACE, kb, "lighthouse", vec(1, 0, 0), 1)) == [f"e{n}"]
    eng.close()


def test_decoded_vectors_are_kept_within_their_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import chalicelib.adapters.index.embedded as embedded

    eng = EmbeddedEngine(tmp_path)
    for kb in ("kb1", "kb2", "kb3"):
        eng.batch_index(SPACE, [entry(f"{kb}-e", "harbour", kb=kb, vector=vec(1, 0, 0))])
    eng.hybrid_search(SPACE, "kb1", "harbour", vec(1, 0, 0), 1)
    one_file = sum(m.vectors.nbytes + m.rids.nbytes for m in eng._matrices.values())
    monkeypatch.setattr(embedded, "MATRIX_CACHE_BYTES", 2 * one_file)
    for kb in ("kb2", "kb3", "kb1"):
        assert eng.hybrid_search(SPACE, kb, "harbour", vec(1, 0, 0), 1)[0].id == f"{kb}-e"
    assert [p.stem for p in eng._matrices] == ["kb3", "kb1"]  # the least recently searched went first
    eng.close()


def test_persists_across_reopen(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, CORPUS)
    eng.set_enabled(SPACE, "kb1", ["c2"], False)
    before = eng.hybrid_search(SPACE, "kb1", "brown fox", vec(1, 0, 0), 5)
    eng.close()
    with pytest.raises(RuntimeError):
        eng.count(SPACE, "kb1")

    reopened = EmbeddedEngine(tmp_path)
    assert reopened.count(SPACE, "kb1") == 5
    after = reopened.hybrid_search(SPACE, "kb1", "brown fox", vec(1, 0, 0), 5)
    assert [(h.id, h.bm25_rank, h.vector_rank) for h in after] == [
        (h.id, h.bm25_rank, h.vector_rank) for h in before
    ]
    assert "c2" not in ids(after)
    reopened.close()


def test_reopen_with_other_dimensions_is_refused(tmp_path: Path) -> None:
    EmbeddedEngine(tmp_path).batch_index(SPACE, CORPUS)
    # Same space name, other dimensions cannot happen via IndexSpace.name; simulate a corrupted meta.
    with sqlite3.connect(tmp_path / SPACE.name / "kb1.sqlite") as conn:
        conn.execute("UPDATE meta SET value = 3 WHERE key = 'dimensions'")
    with pytest.raises(ValueError, match="dimensions"):
        EmbeddedEngine(tmp_path).count(SPACE, "kb1")


def test_delete_by_knowledge_is_one_transaction(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, CORPUS)
    # Make the delete fail on the last row of the second knowledge: nothing may be deleted.
    with sqlite3.connect(eng.path_for(SPACE, "kb1")) as conn:
        conn.execute(
            "CREATE TRIGGER boom BEFORE DELETE ON entries WHEN old.id = 'c5' "
            "BEGIN SELECT RAISE(ABORT, 'boom'); END"
        )
    with pytest.raises(sqlite3.IntegrityError, match="boom"):
        eng.delete_by_knowledge(SPACE, "kb1", ["k1", "k2"])
    assert eng.count(SPACE, "kb1") == 5
    assert set(ids(eng.hybrid_search(SPACE, "kb1", "brown fox", None, 10))) == {"c1", "c2", "c5"}
    assert ids(eng.hybrid_search(SPACE, "kb1", "", vec(1, 0, 0), 1, keyword=False)) == ["c1"]

    with sqlite3.connect(eng.path_for(SPACE, "kb1")) as conn:
        conn.execute("DROP TRIGGER boom")
    assert eng.delete_by_knowledge(SPACE, "kb1", ["k1", "k2"]) == 5
    # Text index and vectors went together.
    with sqlite3.connect(eng.path_for(SPACE, "kb1")) as conn:
        assert (
            conn.execute("SELECT COUNT(*) FROM entries_fts WHERE entries_fts MATCH 'fox'").fetchone()[0] == 0
        )
    assert eng.hybrid_search(SPACE, "kb1", "fox", vec(1, 0, 0), 10) == []
    eng.close()


def test_reader_snapshot_never_sees_half_a_delete(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, CORPUS)
    reader = sqlite3.connect(eng.path_for(SPACE, "kb1"), isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 5
    assert eng.delete_by_knowledge(SPACE, "kb1", ["k1", "k2"]) == 5  # WAL: the writer is not blocked
    assert reader.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 5
    reader.execute("COMMIT")
    assert reader.execute("SELECT COUNT(*) FROM entries").fetchone()[0] == 0
    reader.close()
    eng.close()


def test_vector_cache_sees_writes_of_another_engine(tmp_path: Path) -> None:
    # Two engine objects on one root behave like two processes: each has its own matrix cache.
    a, b = EmbeddedEngine(tmp_path), EmbeddedEngine(tmp_path)
    a.batch_index(SPACE, CORPUS)
    assert ids(a.hybrid_search(SPACE, "kb1", "", vec(0, 0, 0, 1), 1)) != ["new"]
    b.batch_index(SPACE, [entry("new", "new entry", vector=vec(0, 0, 0, 1))])
    assert ids(a.hybrid_search(SPACE, "kb1", "", vec(0, 0, 0, 1), 1)) == ["new"]
    b.delete_by_ids(SPACE, "kb1", ["new"])
    assert "new" not in ids(a.hybrid_search(SPACE, "kb1", "", vec(0, 0, 0, 1), 10))
    a.close()
    b.close()


def test_korean_constitution_hybrid(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    articles = constitution_articles()
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(len(articles), DIM)).astype(np.float32)
    eng.batch_index(SPACE, [entry(f"a{n}", t, vector=v) for (n, t), v in zip(articles, vectors, strict=True)])
    assert eng.count(SPACE, "kb1") == 130
    # The vector points at article 70, the text at article 42: each leads its own list.
    query_vector = vectors[[n for n, _ in articles].index("70")]
    hits = eng.hybrid_search(SPACE, "kb1", "국회의원 임기", query_vector, 130)
    by_id = {h.id: h for h in hits}
    assert by_id["a42"].bm25_rank == 1 and by_id["a70"].vector_rank == 1
    assert by_id["a70"].extra["vector_score"] == pytest.approx(1.0, abs=1e-5)
    assert eng.bm25_search(SPACE, "kb1", "헌법재판소", 3)[0].content.count("헌법재판소") >= 1
    eng.close()


def test_concurrent_writers_and_readers_from_threads(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    errors: list[BaseException] = []
    writers, per_writer = 6, 40

    def write(w: int) -> None:
        try:
            for i in range(0, per_writer, 5):
                batch = [
                    entry(
                        f"w{w}-{j}",
                        f"writer {w} chunk {j} shared words",
                        knowledge=f"k{w}",
                        vector=vec(w + 1, j + 1),
                    )
                    for j in range(i, i + 5)
                ]
                eng.batch_index(SPACE, batch)
                eng.batch_index(SPACE, batch[:2])  # re-index: upsert, no duplicates
        except BaseException as exc:  # collected and re-raised in the main thread
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(30):
                hits = eng.hybrid_search(SPACE, "kb1", "shared words", vec(1, 1), 10)
                assert len(hits) == len({h.id for h in hits})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    threads += [threading.Thread(target=read) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert eng.count(SPACE, "kb1") == writers * per_writer
    assert eng.delete_by_knowledge(SPACE, "kb1", ["k0", "k1"]) == 2 * per_writer
    assert eng.count(SPACE, "kb1") == (writers - 2) * per_writer
    eng.close()


def _process_writer(root: str, worker: int) -> None:
    eng = EmbeddedEngine(root)
    for i in range(0, 30, 3):
        eng.batch_index(
            SPACE,
            [
                entry(
                    f"p{worker}-{j}",
                    f"process {worker} text {j}",
                    knowledge=f"p{worker}",
                    vector=vec(worker + 1, j + 1),
                )
                for j in range(i, i + 3)
            ],
        )
    eng.close()


def test_concurrent_writers_from_processes(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_process_writer, args=(str(tmp_path), w)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    eng = EmbeddedEngine(tmp_path)
    assert eng.count(SPACE, "kb1") == 90
    assert len(eng.hybrid_search(SPACE, "kb1", "process text", vec(1, 1), 100)) == 90
    eng.close()


def test_connections_of_finished_threads_are_released(tmp_path: Path) -> None:
    import gc

    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, CORPUS)
    opened_before = len(eng._all_conns)
    workers = [threading.Thread(target=eng.count, args=(SPACE, "kb1")) for _ in range(4)]
    for t in workers:
        t.start()
        t.join()
    gc.collect()
    assert len(eng._all_conns) == opened_before  # the four per-thread connections are gone
    eng.close()
