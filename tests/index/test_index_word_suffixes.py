"""A word's trailing `++` or `#` is part of it (`WORD_SUFFIXES`): the rule both engines share (the contract's
`test_a_words_trailing_plus_plus_or_sharp_is_part_of_it` runs it on each), how the files and indices made
before it keep answering, and that Java reads the shared patterns as Python does."""

from __future__ import annotations

import glob
import itertools
import os
import re
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from index_contract import DIM, entry, ids

from chalicelib.adapters.index import analysis, embedded
from chalicelib.adapters.index.analysis import (
    WORD_SUFFIXES,
    bounded_query_text,
    document_terms,
    index_terms,
    proximity_pairs,
)
from chalicelib.adapters.index.embedded import EmbeddedEngine
from chalicelib.adapters.index.opensearch import (
    OpenSearchEngine,
    bm25_body,
    build_opensearch_client,
    index_body,
)
from chalicelib.ports import IndexSpace, RetrieveEngine

SPACE = IndexSpace(model_id="test/mini", dimensions=DIM)
LANGUAGES = [
    entry("lang-c", "Pointers in C are plain addresses", knowledge="c"),
    entry("lang-cpp", "Templates in C++ are expanded at compile time", knowledge="cpp"),
    entry("lang-cs", "Generics in C# are reified at run time", knowledge="cs"),
]
#: text -> what Python makes of it; Java (OpenSearch's char filters) must make the same
REWRITES = {
    "C++ c# F# x++ a+b 1+1 #tag issue#12": "Cplusplus csharp Fsharp xplusplus a+b 1+1 #tag issue#12",
    "c#,f# C#.NET (c++) c++.": "csharp,fsharp Csharp.NET (cplusplus) cplusplus.",
    "a++b++ c+++ c++++ c++#": "a++bplusplus cplusplus+ cplusplus++ cplusplussharp",
    "x#y ++ # a ++ 9++ a_++ c++_x": "x#y ++ # a ++ 9plusplus a_plusplus c++_x",
    "c++é é++ ä# 中# c++中文 ｃ＋＋": "cplusplusé é++ ä# 中# cplusplus中文 ｃ＋＋",
}


def _rewrite(text: str) -> str:
    for pattern, letters in WORD_SUFFIXES:
        text = re.sub(pattern, letters, text, flags=re.ASCII)
    return text


def test_the_rule_on_terms_and_on_the_query_text_sent_to_opensearch() -> None:
    assert index_terms("C++ c# F# x++ a+b 1+1 #tag issue#12") == [
        "cplusplus",
        "csharp",
        "fsharp",
        "xplusplus",
        "a",
        "b",
        "1",
        "1",
        "tag",
        "issue",
        "12",
    ]
    assert document_terms("C#.NET 和 C++") == ["csharp", "net", "和", "cplusplus"]
    # OpenSearch gets the words as written: its index's char filters make `cplusplus` of `c++`, an index
    # created before them `c`, as its documents hold
    assert bounded_query_text("C++ templates, C# generics") == "c++ templates c# generics"
    assert proximity_pairs("C++ templates") == [("c++", "templates")]
    body = bm25_body("kb1", "C++ templates", 5)
    assert "c++ templates" in str(body) and "cplusplus" not in str(body)


def test_python_rewrites_as_the_patterns_say() -> None:
    for text, rewritten in REWRITES.items():
        assert _rewrite(text) == rewritten, text
        folded = text.lower()
        assert analysis._rewritten(folded).text == _rewrite(folded)


def test_the_opensearch_char_filters_are_the_shared_patterns_in_order() -> None:
    analysis = index_body(SPACE)["settings"]["analysis"]
    filters = analysis["char_filter"]
    for analyzer in analysis["analyzer"].values():
        chain = [filters[name] for name in analyzer["char_filter"]]
        assert [(f["pattern"], f["replacement"]) for f in chain[:-1]] == list(WORD_SUFFIXES)
        assert all(f["type"] == "pattern_replace" for f in chain)
        assert chain[-1]["replacement"] == " "  # the joiners after: `c#.net` is `csharp net`


def _java_19_or_later() -> str | None:
    """A `java` whose `\\b` is ASCII, as Python's re.ASCII (JDK 19+; OpenSearch bundles 21)."""
    home = os.environ.get("JAVA_HOME")
    candidates = [os.path.join(home, "bin", "java")] if home else []
    candidates += [shutil.which("java") or "", *sorted(glob.glob("/usr/lib/jvm/*/bin/java"))]
    for java in filter(None, candidates):
        try:
            version = subprocess.run(
                [java, "-version"], capture_output=True, text=True, check=True, timeout=60
            ).stderr
        except (OSError, subprocess.SubprocessError):
            continue
        found = re.search(r'version "(\d+)', version)
        if found and int(found.group(1)) >= 19:
            return java
    return None


JAVA_CHECK = """
import java.nio.file.*; import java.util.*; import java.util.regex.*;
public class Check {
  public static void main(String[] args) throws Exception {
    List<String> lines = Files.readAllLines(Path.of(args[0]));
    int rules = Integer.parseInt(lines.get(0));
    for (String text : lines.subList(1 + 2 * rules, lines.size())) {
      for (int i = 0; i < rules; i++) {
        text = Pattern.compile(lines.get(1 + 2 * i)).matcher(text).replaceAll(lines.get(2 + 2 * i));
      }
      System.out.println(text);
    }
  }
}
"""


def test_java_reads_the_patterns_as_python_does(tmp_path: Path) -> None:
    java = _java_19_or_later()
    if java is None:
        pytest.skip("no Java 19 or later here (OpenSearch's char filters run Java's regex)")
    (tmp_path / "Check.java").write_text(JAVA_CHECK)
    lines = [str(len(WORD_SUFFIXES)), *(part for rule in WORD_SUFFIXES for part in rule), *REWRITES]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = subprocess.run(
        [java, "-Dfile.encoding=UTF-8", "-Dstdout.encoding=UTF-8", str(tmp_path / "Check.java"), "in.txt"],
        capture_output=True,
        check=True,
        cwd=tmp_path,
        timeout=120,
    ).stdout.decode("utf-8")
    assert out.splitlines() == list(REWRITES.values())


# ---------------------------------------------------------------- files and indices from before the rule


def test_an_embedded_file_of_the_previous_analysis_is_rebuilt_and_finds_cpp(tmp_path: Path) -> None:
    eng = EmbeddedEngine(tmp_path)
    eng.batch_index(SPACE, LANGUAGES)
    path = eng.path_for(SPACE, "kb1")
    eng.close()
    previous = str(int(embedded.ANALYSIS_VERSION) - 1)
    with sqlite3.connect(path) as conn:  # as the previous analysis stored them: `C++` and `C#` are `c`
        for eid, content in [(e.id, e.content) for e in LANGUAGES]:
            terms = " ".join(re.findall(r"\w+", content.lower()))
            conn.execute("UPDATE entries SET terms = ? WHERE id = ?", (terms, eid))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'analysis'", (previous,))
    eng = EmbeddedEngine(tmp_path)
    try:
        assert ids(eng.hybrid_search(SPACE, "kb1", "C++", None, 5, vector=False)) == ["lang-cpp"]
        assert ids(eng.hybrid_search(SPACE, "kb1", "C#", None, 5, vector=False)) == ["lang-cs"]
        assert ids(eng.hybrid_search(SPACE, "kb1", "C", None, 5, vector=False)) == ["lang-c"]
        with sqlite3.connect(path) as conn:
            assert conn.execute("SELECT value FROM meta WHERE key = 'analysis'").fetchone() == (
                embedded.ANALYSIS_VERSION,
            )
    finally:
        eng.close()


@pytest.fixture
def space() -> IndexSpace:
    return IndexSpace(model_id=f"test-suffixes-{uuid.uuid4().hex[:8]}", dimensions=DIM)


@pytest.fixture
def opensearch(osmem_url: str) -> Iterator[OpenSearchEngine]:
    yield OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)


def _older_body(space: IndexSpace, meta: int | None) -> dict[str, Any]:
    """The create-index request as an older version made it: only the joiners' char filter (version 2), or
    no char filter and no `_meta` (before the joiners)."""
    body = index_body(space)
    analysis = body["settings"]["analysis"]
    joiners = "weknora_word_joiners"
    if meta is None:
        del analysis["char_filter"]
        for analyzer in analysis["analyzer"].values():
            del analyzer["char_filter"]
        del body["mappings"]["_meta"]
    else:
        analysis["char_filter"] = {joiners: analysis["char_filter"][joiners]}
        for analyzer in analysis["analyzer"].values():
            analyzer["char_filter"] = [joiners]
        body["mappings"]["_meta"] = {"weknora_analysis": meta}
    return body


def _knowledge_found(engine: RetrieveEngine, space: IndexSpace, query: str) -> set[str]:
    hits = engine.hybrid_search(space, "kb1", query, None, 10, keyword=True, vector=False)
    return {hit.knowledge_id for hit in hits}


@pytest.mark.parametrize("meta", [2, None], ids=["analysis-2", "no-meta"])
def test_an_older_opensearch_index_still_answers_as_before(
    opensearch: OpenSearchEngine, space: IndexSpace, meta: int | None
) -> None:
    """Its analyzers cannot change while it is open: `C++`, `C#` and `C` are all `c` there. The query text
    keeps `++` and `#` as written, so every one of them still finds the three (a `cplusplus` sent instead
    would find nothing there)."""
    opensearch.client.indices.create(index=space.name, body=_older_body(space, meta))
    opensearch.batch_index(space, LANGUAGES)
    for query in ("C", "c", "C++", "C#", "C++ templates"):
        assert _knowledge_found(opensearch, space, query) == {"c", "cpp", "cs"}, query
    assert _knowledge_found(opensearch, space, "templates") == {"cpp"}


def test_every_clause_of_a_query_with_a_suffix_after_an_underscore_reads_as_its_terms_on_opensearch(
    opensearch: OpenSearchEngine, space: IndexSpace
) -> None:
    """OpenSearch's own char filters read each clause of the BM25 request: `x_#` is `x` and `sharp` in the
    match and in the proximity phrases (a bare `#` there was no term at all), and the document is found."""
    opensearch.batch_index(space, [entry("under", "the x_# y and _++ z notes", knowledge="under")])
    query = "x_# y _++ z"
    body = bm25_body("kb1", query, 5)["query"]["bool"]
    texts = [body["must"][0]["dis_max"]["queries"][0]["match"]["content"]["query"]]
    texts += [
        clause["dis_max"]["queries"][0]["match_phrase"]["content"]["query"] for clause in body["should"]
    ]

    def analysed(text: str) -> list[str]:
        tokens = opensearch.client.indices.analyze(
            index=space.name, body={"analyzer": "weknora_query", "text": text}
        )
        return [token["token"] for token in tokens["tokens"]]

    terms = ["x", "sharp", "y", "plusplus", "z"]
    assert [analysed(text) for text in texts] == [terms, *(list(pair) for pair in itertools.pairwise(terms))]
    assert _knowledge_found(opensearch, space, "_#") == {"under"}
