"""The ideographs and kana Lucene's cjk_bigram pairs are CJK for the shared tokenizer too (analysis 5).

CJK extension B and beyond (U+20000-U+3FFFF, the compatibility supplement among them), 〇 and the Hangzhou
numerals, the Katakana phonetic extensions and the kana supplements were word characters to the Python
tokenizer: a run of them was one term of any length, so the embedded engine found such a text only by the
whole run, and the OpenSearch term cap counted a run OpenSearch splits into a bigram per pair as one term.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from index_contract import DIM, entry, ids

from chalicelib.adapters.index.analysis import document_terms, index_terms
from chalicelib.adapters.index.embedded import ANALYSIS_VERSION, EmbeddedEngine
from chalicelib.ports import IndexSpace

SPACE = IndexSpace(model_id="test/mini", dimensions=DIM)
EXT_B = "".join(chr(0x20000 + n) for n in range(4))  # 𠀀𠀁𠀂𠀃


def test_runs_lucene_pairs_are_bigrams() -> None:
    assert index_terms(EXT_B) == [EXT_B[0:2], EXT_B[1:3], EXT_B[2:4]]
    assert index_terms("〇〡〢") == ["〇〡", "〡〢"]
    assert index_terms("ㇰㇱㇲ") == ["ㇰㇱ", "ㇱㇲ"]
    assert index_terms("\U0001b001\U0001b002") == ["\U0001b001\U0001b002"]  # hentaigana
    assert index_terms("中" + EXT_B[0] + "国") == [
        "中" + EXT_B[0],
        EXT_B[0] + "国",
    ]  # one run with its neighbours
    assert document_terms(EXT_B[:2]) == [EXT_B[:2], EXT_B[0], EXT_B[1]]
    # 々 stays a word of its own: Lucene's tokenizer keeps it apart from the ideograph before it too
    assert index_terms("人々") == ["人", "々"]


def test_a_pair_inside_a_run_of_supplementary_ideographs_finds_its_text(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    try:
        eng.batch_index(SPACE, [entry("t1", f"{EXT_B} harbour"), entry("t2", "harbour")])
        assert ids(eng.hybrid_search(SPACE, "kb1", EXT_B[1:3], None, 5, vector=False)) == ["t1"]
        assert ids(eng.hybrid_search(SPACE, "kb1", EXT_B[2], None, 5, vector=False)) == ["t1"]
    finally:
        eng.close()


def test_a_file_of_analysis_4_is_rebuilt(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, [entry("t1", f"{EXT_B} harbour")])
    path = eng.path_for(SPACE, "kb1")
    eng.close()
    with sqlite3.connect(path) as conn:  # as analysis 4 stored it: the run one word
        conn.execute("UPDATE entries SET terms = ? WHERE id = 't1'", (f"{EXT_B} harbour",))
        conn.execute("UPDATE meta SET value = '4' WHERE key = 'analysis'")
    eng = EmbeddedEngine(tmp_path)
    try:
        assert ids(eng.hybrid_search(SPACE, "kb1", EXT_B[1:3], None, 5, vector=False)) == ["t1"]
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone() == (
                ANALYSIS_VERSION,
            )
    finally:
        eng.close()
