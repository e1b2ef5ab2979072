"""The RetrieveEngine contract, run against every engine.

A test module subclasses `EngineContract` and provides an `engine` fixture (function scope, fresh
state) plus `stored_vector()`. Capability flags let an engine skip only what it cannot do, with the
reason shown in the pytest report:
- `KNN_SKIP`: a reason string when the engine cannot run kNN queries (osmem answers 400).
- `HANGUL_BIGRAM_SKIP`: a reason string when the engine does not bigram Hangul at index time.
- `UNIGRAM_SKIP`: a reason string when the engine does not index CJK characters alone beside bigrams.
Vectors are small and deterministic (8 dimensions), no model needed.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence

import numpy as np
import pytest
from project_paths import corpus_bytes

from chalicelib.adapters.index.fusion import KEYWORD_WEIGHT
from chalicelib.ports import IndexEntry, IndexSpace, RetrieveEngine, SearchHit

DIM = 8


def vec(*weights: float) -> np.ndarray:
    """A unit vector from up to DIM leading weights."""
    arr = np.zeros(DIM, dtype=np.float32)
    arr[: len(weights)] = weights
    return arr / np.linalg.norm(arr)


def entry(
    eid: str,
    content: str,
    *,
    kb: str = "kb1",
    knowledge: str = "k1",
    chunk: str | None = None,
    vector: np.ndarray | None = None,
    enabled: bool = True,
    source_id: str = "",
) -> IndexEntry:
    return IndexEntry(
        id=eid,
        kb_id=kb,
        knowledge_id=knowledge,
        chunk_id=chunk or eid,
        content=content,
        vector=vector,
        source_id=source_id or (chunk or eid),
        is_enabled=enabled,
    )


def ids(hits: Sequence[SearchHit]) -> list[str]:
    return [h.id for h in hits]


def constitution_articles() -> list[tuple[str, str]]:
    """(article number, text) for the main body's articles (제1조 … 제130조)."""
    text = corpus_bytes("korean-constitution.ko.txt").decode("utf-8")
    body = text.split("부칙")[0]
    parts = re.split(r"\n\s*(?=제\d+조[ ①])", body)
    out = []
    for part in parts:
        m = re.match(r"제(\d+)조", part.strip())
        if m:
            out.append((m.group(1), " ".join(part.split())))
    return out


# A small English corpus: two knowledge items in kb1, one in kb2.
CORPUS = [
    entry("c1", "The quick brown fox jumps over the lazy dog", vector=vec(1, 0, 0)),
    entry("c2", "A brown bear sleeps in the forest all winter", vector=vec(0.8, 0.6, 0)),
    entry("c3", "Kubernetes schedules containers onto nodes", vector=vec(0, 1, 0)),
    entry("c4", "Debian packages are installed with apt", knowledge="k2", vector=vec(0, 0, 1)),
    entry("c5", "The fox den is hidden under the roots", knowledge="k2", vector=vec(0.9, 0, 0.1)),
    entry(
        "d1", "The quick brown fox in another knowledge base", kb="kb2", knowledge="k9", vector=vec(1, 0, 0)
    ),
]


class EngineContract:
    KNN_SKIP: str | None = None
    HANGUL_BIGRAM_SKIP: str | None = None
    UNIGRAM_SKIP: str | None = None

    @pytest.fixture
    def space(self) -> IndexSpace:
        return IndexSpace(model_id=f"test-model-{uuid.uuid4().hex[:8]}", dimensions=DIM)

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        raise NotImplementedError

    def needs_knn(self) -> None:
        if self.KNN_SKIP:
            pytest.skip(self.KNN_SKIP)

    def keyword(self, engine: RetrieveEngine, space: IndexSpace, text: str, kb: str = "kb1", top_k: int = 10):
        return engine.hybrid_search(space, kb, text, None, top_k, keyword=True, vector=False)

    # ---------------------------------------------------------------- writes and counts

    def test_health(self, engine: RetrieveEngine) -> None:
        assert engine.health() is True
        assert isinstance(engine.engine_name, str) and engine.engine_name

    def test_index_and_count(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        assert engine.count(space, "kb1") == 0  # nothing indexed yet: no error
        engine.batch_index(space, CORPUS)
        assert engine.count(space, "kb1") == 5
        assert engine.count(space, "kb1", "k1") == 3
        assert engine.count(space, "kb1", "k2") == 2
        assert engine.count(space, "kb2") == 1
        assert engine.count(space, "kb1", "nope") == 0
        assert engine.count(space, "kb-unknown") == 0

    def test_upsert_by_id_never_duplicates(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        engine.batch_index(space, CORPUS)
        assert engine.count(space, "kb1") == 5
        engine.batch_index(
            space, [entry("c1", "Completely rewritten text about penguins", vector=vec(1, 0, 0))]
        )
        assert engine.count(space, "kb1") == 5
        assert ids(self.keyword(engine, space, "penguins")) == ["c1"]
        assert "c1" not in ids(self.keyword(engine, space, "lazy dog"))

    def test_empty_batch_and_entries_without_vector(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, [])
        engine.batch_index(space, [entry("n1", "a chunk indexed for keywords only", vector=None)])
        assert engine.count(space, "kb1") == 1
        assert ids(self.keyword(engine, space, "keywords")) == ["n1"]

    def test_wrong_dimension_rejected_before_any_write(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        bad = [
            entry("ok", "fine text", vector=vec(1)),
            entry("bad", "bad text", vector=np.ones(3, np.float32)),
        ]
        with pytest.raises(ValueError, match="dimensions"):
            engine.batch_index(space, bad)
        assert engine.count(space, "kb1") == 0
        engine.batch_index(space, CORPUS)
        with pytest.raises(ValueError, match="dimensions"):
            engine.hybrid_search(space, "kb1", "fox", np.ones(DIM + 1, np.float32), 5)

    # ---------------------------------------------------------------- BM25

    def test_bm25_english(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        hits = self.keyword(engine, space, "brown fox")
        assert ids(hits)[0] == "c1"  # both terms
        assert set(ids(hits)) == {"c1", "c2", "c5"}  # OR semantics, kb2's d1 excluded
        assert [h.bm25_rank for h in hits] == [1, 2, 3]
        assert all(h.vector_rank is None for h in hits)
        assert hits[0].score > hits[-1].score
        top = hits[0]
        assert (top.chunk_id, top.knowledge_id, top.kb_id) == ("c1", "k1", "kb1")
        assert top.content == CORPUS[0].content
        assert top.extra["bm25_score"] > hits[-1].extra["bm25_score"] > 0

    def test_query_words_close_together_outrank_the_same_words_scattered(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        # The same words, counts and length: only their distance differs (7 positions apart in "a-far",
        # beyond the proximity window). Without the proximity clause the two tie, and a tie goes to
        # "a-far" (indexed first, and first by id).
        filler = [
            "red",
            "green",
            "blue",
            "cyan",
            "pink",
            "gold",
            "gray",
            "teal",
            "navy",
            "plum",
            "lime",
            "rose",
        ]
        near = " ".join(["ocean", "harbour", "lantern", *filler])
        far = " ".join(["ocean", *filler[:6], "harbour", *filler[6:], "lantern"])
        engine.batch_index(space, [entry("a-far", far), entry("b-near", near)])
        hits = self.keyword(engine, space, "ocean harbour lantern")
        assert ids(hits) == ["b-near", "a-far"]
        assert hits[0].extra["bm25_score"] > hits[1].extra["bm25_score"]
        # one word alone has no pair to score: the tie stays a tie
        single = self.keyword(engine, space, "harbour")
        assert single[0].extra["bm25_score"] == pytest.approx(single[1].extra["bm25_score"])

    def test_bm25_case_insensitive_and_punctuation(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert ids(self.keyword(engine, space, "KUBERNETES?!"))[:1] == ["c3"]
        assert ids(self.keyword(engine, space, '"apt" AND (NOT')) == ["c4"]  # operators are plain words

    def test_a_words_trailing_plus_plus_or_sharp_is_part_of_it(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        """`C++`, `C#` and `C` are three words (both engines: `WORD_SUFFIXES`); a `#` or `+` anywhere else
        splits words as before."""
        engine.batch_index(
            space,
            [
                entry("lang-c", "Pointers in C are plain addresses"),
                entry("lang-cpp", "Templates in C++ are expanded at compile time"),
                entry("lang-cs", "Generics in C# are reified at run time"),
                entry("lang-fs", "Pattern matching in F# is exhaustive"),
                entry("counter", "Bump it with x++ in the loop"),
                entry("tags", "Label the post #release and see issue#12"),
                entry("sums", "In algebra a+b and 1+1 are sums"),
            ],
        )
        assert ids(self.keyword(engine, space, "C++")) == ["lang-cpp"]
        assert ids(self.keyword(engine, space, "c++ templates")) == ["lang-cpp"]
        assert ids(self.keyword(engine, space, "Ｃ＋＋")) == ["lang-cpp"]  # full width folds first
        assert ids(self.keyword(engine, space, "C#")) == ["lang-cs"]
        assert ids(self.keyword(engine, space, "F#")) == ["lang-fs"]
        assert ids(self.keyword(engine, space, "x++")) == ["counter"]
        assert ids(self.keyword(engine, space, "C")) == ["lang-c"]
        assert set(ids(self.keyword(engine, space, "C C++ C#"))) == {"lang-c", "lang-cpp", "lang-cs"}
        # as before: a leading `#`, a `#` or single `+` between words
        assert ids(self.keyword(engine, space, "#release")) == ["tags"]
        assert ids(self.keyword(engine, space, "release")) == ["tags"]
        assert ids(self.keyword(engine, space, "issue#12")) == ["tags"]
        assert ids(self.keyword(engine, space, "12")) == ["tags"]
        assert ids(self.keyword(engine, space, "a+b")) == ["sums"]
        assert ids(self.keyword(engine, space, "b")) == ["sums"]
        assert ids(self.keyword(engine, space, "1+1")) == ["sums"]

    def test_kb_isolation(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        hits = self.keyword(engine, space, "another knowledge base", kb="kb2")
        assert ids(hits) == ["d1"]
        assert ids(self.keyword(engine, space, "another knowledge base", kb="kb1")) == []

    def test_top_k_and_empty_inputs(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert len(self.keyword(engine, space, "the", top_k=2)) == 2
        assert self.keyword(engine, space, "fox", top_k=0) == []
        assert engine.hybrid_search(space, "kb1", "   ", None, 5) == []
        assert engine.hybrid_search(space, "kb1", "fox", vec(1), 5, keyword=False, vector=False) == []
        assert engine.hybrid_search(space, "kb-unknown", "fox", None, 5) == []

    def test_chinese_bm25(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(
            space,
            [
                entry("z1", "中华人民共和国是工人阶级领导的人民民主专政的社会主义国家"),
                entry("z2", "机器学习是人工智能的一个分支"),
            ],
        )
        assert ids(self.keyword(engine, space, "人工智能")) == ["z2"]
        assert ids(self.keyword(engine, space, "社会主义国家"))[:1] == ["z1"]

    def test_one_character_chinese_words_find_the_runs_they_sit_in(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        # issue 27: a query with the one-character words 心 and 弟 (Chinese writes many words with one
        # character) found nothing of them where the document has them inside longer runs
        if self.UNIGRAM_SKIP:
            pytest.skip(self.UNIGRAM_SKIP)
        engine.batch_index(
            space,
            [
                entry("u1", "他们赋有理性和良心，并应以兄弟关系的精神相对待。"),
                entry("u2", "机器学习是人工智能的一个分支"),
            ],
        )
        assert ids(self.keyword(engine, space, "心 弟")) == ["u1"]
        assert ids(self.keyword(engine, space, "他們 賦有 心、 並應 以兄 弟"))[:1] == ["u1"]
        # a query's runs still match as bigrams: one shared character alone does not rank a document
        assert ids(self.keyword(engine, space, "人工智能"))[:1] == ["u2"]

    def test_traditional_and_simplified_chinese_match_each_other(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        engine.batch_index(
            space,
            [
                entry("t1", "人人生而自由、在尊嚴和權利上一律平等。"),  # traditional
                entry("s1", "机器学习是人工智能的一个分支"),  # simplified
                entry("x1", "天气很好，我们去公园散步"),
            ],
        )
        assert ids(self.keyword(engine, space, "尊严 权利 平等"))[:1] == ["t1"]  # simplified query
        assert ids(self.keyword(engine, space, "機器學習 人工智慧"))[:1] == ["s1"]  # traditional query
        assert self.keyword(engine, space, "尊嚴")[0].content == "人人生而自由、在尊嚴和權利上一律平等。"

    def test_full_width_and_case_fold_in_queries_and_documents(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        engine.batch_index(
            space, [entry("w1", "ＤＥＢＩＡＮ パッケージ 管理"), entry("w2", "python sorting howto")]
        )
        assert ids(self.keyword(engine, space, "debian"))[:1] == ["w1"]
        assert ids(self.keyword(engine, space, "ＰＹＴＨＯＮ Sorting"))[:1] == ["w2"]
        assert ids(self.keyword(engine, space, "ﾊﾟｯｹｰｼﾞ"))[:1] == ["w1"]  # half-width katakana

    def test_korean_bm25_whole_words(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, [entry(f"a{n}", text) for n, text in constitution_articles()])
        hits = self.keyword(engine, space, "민주공화국이다.")
        assert ids(hits)[:1] == ["a1"]

    def test_korean_bm25_subwords(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        if self.HANGUL_BIGRAM_SKIP:
            pytest.skip(self.HANGUL_BIGRAM_SKIP)
        articles = constitution_articles()
        assert len(articles) == 130
        engine.batch_index(space, [entry(f"a{n}", text) for n, text in articles])
        # Queries drop the particles the articles carry (임기는, 국회의원의): only bigrams match them.
        assert ids(self.keyword(engine, space, "국회의원 임기"))[:1] == ["a42"]
        assert ids(self.keyword(engine, space, "대통령 임기 중임"))[:1] == ["a70"]
        assert ids(self.keyword(engine, space, "인간 존엄 행복 추구"))[:1] == ["a10"]
        assert "a1" in ids(self.keyword(engine, space, "민주공화국", top_k=3))

    # ---------------------------------------------------------------- vectors and hybrid

    def test_vector_only(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        hits = engine.hybrid_search(space, "kb1", "ignored", vec(1, 0, 0), 3, keyword=False)
        assert ids(hits) == ["c1", "c5", "c2"]
        assert [h.vector_rank for h in hits] == [1, 2, 3]
        assert all(h.bm25_rank is None for h in hits)
        assert hits[0].extra["vector_score"] == pytest.approx(1.0, abs=1e-3)  # cosine

    def test_hybrid_fuses_normalised_scores(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        # BM25 favours c3 (Kubernetes); the vector favours c4 (apt); c3 is second by vector too.
        hits = engine.hybrid_search(space, "kb1", "kubernetes containers", vec(0, 0.5, 1), 5)
        assert hits[0].id == "c3"
        assert hits[0].bm25_rank == 1 and hits[0].vector_rank == 2
        assert KEYWORD_WEIGHT < hits[0].score < 1.0  # BM25's best (its full share), not the vector's
        assert "c4" in ids(hits)
        assert {h.kb_id for h in hits} == {"kb1"}

    def test_keyword_flag_off_uses_vector_only(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        hits = engine.hybrid_search(space, "kb1", "kubernetes", vec(0, 0, 1), 1, keyword=False)
        assert ids(hits) == ["c4"]

    def test_vector_flag_off_ignores_vector(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        hits = engine.hybrid_search(space, "kb1", "kubernetes", vec(0, 0, 1), 5, vector=False)
        assert ids(hits) == ["c3"]
        assert hits[0].score == pytest.approx(1.0)  # one list alone: its own scale, the best is 1

    # ---------------------------------------------------------------- filters, scores, retrievers

    def test_knowledge_filter_is_a_pre_filter_in_bm25(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        """Filtered inside the query: k2's fox is found although k1's entries rank above it unfiltered, and a
        top_k of 1 still returns one hit (a post-filter of the unfiltered top 1 would return none)."""
        engine.batch_index(space, CORPUS)
        assert ids(self.keyword(engine, space, "brown fox", top_k=1)) == ["c1"]
        hits = engine.hybrid_search(space, "kb1", "brown fox", None, 1, vector=False, knowledge_ids=["k2"])
        assert ids(hits) == ["c5"]
        assert hits[0].score == pytest.approx(1.0)  # the best of the filtered list
        both = engine.hybrid_search(space, "kb1", "fox", None, 10, vector=False, knowledge_ids=["k1", "k2"])
        assert set(ids(both)) == {"c1", "c5"}
        assert engine.hybrid_search(space, "kb1", "fox", None, 10, knowledge_ids=[]) == []
        assert engine.hybrid_search(space, "kb1", "fox", None, 10, knowledge_ids=["k9"]) == []  # kb2's

    def test_knowledge_filter_is_a_pre_filter_in_knn(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        hits = engine.hybrid_search(space, "kb1", "x", vec(1, 0, 0), 1, keyword=False, knowledge_ids=["k2"])
        assert ids(hits) == ["c5"]  # c1 is nearer, but not in k2
        hybrid = engine.hybrid_search(space, "kb1", "containers", vec(0, 1, 0), 5, knowledge_ids=["k2"])
        assert {h.knowledge_id for h in hybrid} == {"k2"}

    def test_keyword_retriever_keeps_every_match_above_zero(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        """Min-max would map the last of two keyword matches to 0; alone, a list scores over its best."""
        engine.batch_index(space, CORPUS)
        hits = self.keyword(engine, space, "fox")
        assert set(ids(hits)) == {"c1", "c5"}
        assert hits[0].score == pytest.approx(1.0) and 0 < hits[1].score <= 1.0

    def test_a_tiny_knowledge_bases_weaker_keyword_match_is_found(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        """Two documents hold the query's word; the second matches it less (one mention in a longer text)
        and is the less similar by cosine. Min-max fusion mapped it to 0 in both lists, and the search
        returned one of the two documents that contain the word."""
        engine.batch_index(
            space,
            [
                entry("manual", "Rotate the backup tapes weekly; backup tapes age.", vector=vec(1, 0, 0)),
                entry(
                    "memo",
                    "Lunch menu for Friday, the parking rules, and where the backup tapes live now.",
                    knowledge="k2",
                    vector=vec(0.3, 1, 0),
                ),
            ],
        )
        keyword = self.keyword(engine, space, "backup tapes")
        assert ids(keyword) == ["manual", "memo"]  # both match; the memo less
        if self.KNN_SKIP:
            return
        hybrid = engine.hybrid_search(space, "kb1", "backup tapes", vec(1, 0.05, 0), 5)
        assert ids(hybrid) == ["manual", "memo"]
        assert hybrid[1].bm25_rank == 2 and hybrid[1].vector_rank == 2 and hybrid[1].score > 0

    def test_no_hit_scores_zero_and_min_score_cuts(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        hybrid = engine.hybrid_search(space, "kb1", "kubernetes containers", vec(0, 0.5, 1), 10)
        assert hybrid and all(h.score > 0 for h in hybrid)
        assert len(hybrid) < 5  # the entry last in the vector list and absent from BM25 scores 0: left out
        vector = engine.hybrid_search(space, "kb1", "x", vec(1, 0, 0), 10, keyword=False)
        assert all(h.score > 0 for h in vector)  # cosines; c3 and c4 are orthogonal to the query (0)
        assert ids(vector) == ["c1", "c5", "c2"]
        strict = engine.hybrid_search(space, "kb1", "x", vec(1, 0, 0), 10, keyword=False, min_score=0.9)
        assert ids(strict) == ["c1", "c5"]  # cosines 1.0 and 0.99; c2's is 0.8

    def test_min_score_on_keyword_scores(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        everything = self.keyword(engine, space, "brown fox")
        cut = engine.hybrid_search(space, "kb1", "brown fox", None, 10, vector=False, min_score=0.999)
        assert ids(cut) == ids(everything)[:1]
        assert engine.hybrid_search(space, "kb1", "brown fox", None, 10, vector=False, min_score=1.0) == cut

    def test_keyword_weight_moves_the_fusion(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        # BM25 favours c3 (Kubernetes); the vector favours c4 (apt).
        by_words = engine.hybrid_search(
            space, "kb1", "kubernetes containers", vec(0, 0, 1), 2, keyword_weight=1.0
        )
        assert ids(by_words)[0] == "c3"
        by_vector = engine.hybrid_search(
            space, "kb1", "kubernetes containers", vec(0, 0, 1), 2, keyword_weight=0.0
        )
        assert ids(by_vector)[0] == "c4"
        assert by_vector[0].score == pytest.approx(1.0)

    # ---------------------------------------------------------------- deletes

    def test_delete_by_knowledge(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert engine.delete_by_knowledge(space, "kb1", ["k1"]) == 3
        assert engine.count(space, "kb1") == 2
        assert engine.count(space, "kb1", "k1") == 0
        assert set(ids(self.keyword(engine, space, "brown fox"))) == {"c5"}
        assert engine.count(space, "kb2") == 1  # another kb untouched
        assert engine.delete_by_knowledge(space, "kb1", ["k1"]) == 0  # idempotent
        assert engine.delete_by_knowledge(space, "kb1", []) == 0
        assert engine.delete_by_knowledge(space, "kb-unknown", ["k1"]) == 0

    def test_delete_by_knowledge_many(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert engine.delete_by_knowledge(space, "kb1", ["k1", "k2", "k-missing"]) == 5
        assert engine.count(space, "kb1") == 0
        assert self.keyword(engine, space, "fox") == []

    def test_delete_by_ids(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert engine.delete_by_ids(space, "kb1", ["c1", "c5", "missing"]) == 2
        assert engine.count(space, "kb1") == 3
        assert set(ids(self.keyword(engine, space, "fox"))) == set()
        assert engine.delete_by_ids(space, "kb1", ["d1"]) == 0  # d1 lives in kb2
        assert engine.count(space, "kb2") == 1
        assert engine.delete_by_ids(space, "kb1", []) == 0

    def test_deleted_entries_leave_vector_results(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        engine.delete_by_knowledge(space, "kb1", ["k2"])
        hits = engine.hybrid_search(space, "kb1", "", vec(0, 0, 1), 10)
        assert "c4" not in ids(hits) and "c5" not in ids(hits)

    def test_entries_of_a_knowledge_as_indexed(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        engine.set_enabled(space, "kb1", ["c2"], False)
        got = {e.id: e for e in engine.entries_of(space, "kb1", "k1")}
        want = {e.id: e for e in CORPUS if e.kb_id == "kb1" and e.knowledge_id == "k1"}
        assert set(got) == set(want)
        for eid, e in got.items():
            assert (e.content, e.chunk_id, e.chunk_type) == (
                want[eid].content,
                want[eid].chunk_id,
                want[eid].chunk_type,
            )
            assert e.is_enabled == (eid != "c2") and e.vector is None
        assert engine.entries_of(space, "kb1", "k-missing") == []
        assert engine.entries_of(space, "kb-missing", "k1") == []

    # ---------------------------------------------------------------- copy

    def test_copy_remaps_ids_and_keeps_vectors(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(
            space,
            [
                *CORPUS,
                entry(
                    "c1-q0",
                    "What does the quick fox jump over?",
                    chunk="c1",
                    source_id="c1-q0",
                    vector=vec(0, 0, 0, 1),
                ),
            ],
        )
        id_map = {"c1": "n1", "c2": "n2"}  # c3 was not copied
        copied = engine.copy(space, "kb1", "k1", "kb3", "k-new", id_map)
        assert copied == 3
        assert engine.count(space, "kb3") == 3
        assert engine.count(space, "kb3", "k-new") == 3
        assert engine.count(space, "kb1") == 6  # the source keeps its entries
        hits = self.keyword(engine, space, "quick fox", kb="kb3")
        assert set(ids(hits)) == {"n1", "n1-q0"}
        question = next(h for h in hits if h.id == "n1-q0")
        assert (question.chunk_id, question.knowledge_id, question.kb_id) == ("n1", "k-new", "kb3")
        assert question.extra.get("source_id") == "n1-q0"
        np.testing.assert_allclose(
            self.stored_vector(engine, space, "kb3", "n1-q0"), vec(0, 0, 0, 1), atol=1e-6
        )
        np.testing.assert_allclose(self.stored_vector(engine, space, "kb3", "n2"), vec(0.8, 0.6), atol=1e-6)
        # Copying again upserts the same ids.
        assert engine.copy(space, "kb1", "k1", "kb3", "k-new", id_map) == 3
        assert engine.count(space, "kb3") == 3

    def test_copy_within_same_kb(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, CORPUS)
        assert engine.copy(space, "kb1", "k2", "kb1", "k2-copy", {"c4": "x4", "c5": "x5"}) == 2
        assert engine.count(space, "kb1", "k2-copy") == 2
        assert set(ids(self.keyword(engine, space, "fox den"))) >= {"c5", "x5"}

    def test_copy_of_missing_source_is_zero(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        assert engine.copy(space, "kb1", "k1", "kb3", "k2", {"a": "b"}) == 0
        engine.batch_index(space, CORPUS)
        assert engine.copy(space, "kb1", "k-missing", "kb3", "k2", {"a": "b"}) == 0

    def test_copied_vectors_are_searchable(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        engine.copy(space, "kb1", "k2", "kb3", "k2b", {"c4": "x4", "c5": "x5"})
        hits = engine.hybrid_search(space, "kb3", "", vec(0, 0, 1), 1)
        assert ids(hits) == ["x4"]

    # ---------------------------------------------------------------- move

    def test_move_knowledge_repoints_entries_with_their_vectors(
        self, engine: RetrieveEngine, space: IndexSpace
    ) -> None:
        engine.batch_index(
            space,
            [*CORPUS, entry("c4-q0", "Which tool installs Debian packages?", knowledge="k2", chunk="c4")],
        )
        engine.set_enabled(space, "kb1", ["c5"], False)
        assert engine.move_knowledge(space, "kb1", "kb3", ["k2"]) == 3
        assert (engine.count(space, "kb1"), engine.count(space, "kb3")) == (3, 3)
        assert engine.count(space, "kb3", "k2") == 3 and engine.count(space, "kb1", "k2") == 0
        hits = self.keyword(engine, space, "Debian packages apt", kb="kb3")
        assert set(ids(hits)) == {"c4", "c4-q0"}
        assert all((h.kb_id, h.knowledge_id) == ("kb3", "k2") for h in hits)
        assert self.keyword(engine, space, "Debian packages apt") == []  # the source keeps none
        assert "c5" not in ids(self.keyword(engine, space, "fox den roots", kb="kb3"))  # still disabled
        np.testing.assert_allclose(self.stored_vector(engine, space, "kb3", "c4"), vec(0, 0, 1), atol=1e-6)
        # A re-run finds nothing left to move; other knowledge and knowledge bases are untouched.
        assert engine.move_knowledge(space, "kb1", "kb3", ["k2"]) == 0
        assert engine.move_knowledge(space, "kb1", "kb1", ["k1"]) == 0
        assert engine.move_knowledge(space, "kb-unknown", "kb3", ["k1"]) == 0
        assert engine.move_knowledge(space, "kb1", "kb3", []) == 0
        assert (engine.count(space, "kb1", "k1"), engine.count(space, "kb2")) == (3, 1)

    def test_moved_vectors_are_searchable(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        engine.move_knowledge(space, "kb1", "kb3", ["k2"])
        assert ids(engine.hybrid_search(space, "kb3", "", vec(0, 0, 1), 1)) == ["c4"]
        assert "c4" not in ids(engine.hybrid_search(space, "kb1", "", vec(0, 0, 1), 10))

    # ---------------------------------------------------------------- enable / disable

    def test_set_enabled(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(space, [*CORPUS, entry("c1-q0", "fox question", chunk="c1", vector=vec(1))])
        assert engine.set_enabled(space, "kb1", ["c1", "missing"], False) == 2  # the chunk and its question
        assert "c1" not in ids(self.keyword(engine, space, "fox"))
        assert "c1-q0" not in ids(self.keyword(engine, space, "fox"))
        assert engine.count(space, "kb1") == 6  # disabled entries are kept
        assert engine.set_enabled(space, "kb1", ["c1"], False) == 2  # already disabled: same answer
        assert engine.set_enabled(space, "kb1", ["c1"], True) == 2
        assert ids(self.keyword(engine, space, "quick brown fox"))[:1] == ["c1"]
        assert engine.set_enabled(space, "kb1", [], True) == 0
        assert engine.set_enabled(space, "kb-unknown", ["c1"], True) == 0

    def test_disabled_at_index_time(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        engine.batch_index(
            space, [entry("off", "hidden walrus", enabled=False), entry("on", "visible walrus")]
        )
        assert ids(self.keyword(engine, space, "walrus")) == ["on"]

    def test_disabled_entries_leave_vector_results(self, engine: RetrieveEngine, space: IndexSpace) -> None:
        self.needs_knn()
        engine.batch_index(space, CORPUS)
        engine.set_enabled(space, "kb1", ["c1"], False)
        hits = engine.hybrid_search(space, "kb1", "", vec(1, 0, 0), 10)
        assert "c1" not in ids(hits) and "c5" in ids(hits)
        engine.set_enabled(space, "kb1", ["c1"], True)
        assert ids(engine.hybrid_search(space, "kb1", "", vec(1, 0, 0), 1)) == ["c1"]
