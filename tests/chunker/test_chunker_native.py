"""Differential tests: the C accelerator (_native.c) against the pure-Python chunker.

Both paths must return identical ChunkPiece lists (content, offsets, breadcrumbs, header prefixes), for
every strategy, flat and parent-child, in rune and token mode, on the corpus and on generated Markdown;
and identical protected spans on adversarial strings made of the pattern metacharacters.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from chunker_helpers import corpus_texts, offline_cl100k
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_chunker_properties import configs, markdown, word_tokens

from chalicelib.chunker import (
    ChunkingConfig,
    ChunkPiece,
    TokenCounter,
    _accel,
    preview,
    split,
    split_parent_child,
)
from chalicelib.chunker.spans import find_spans

pytestmark = pytest.mark.skipif(
    not _accel.available(),
    reason=f"C extension not built (no compiler at install time?): {_accel.IMPORT_ERROR}",
)

FAST = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRATEGIES = ["recursive", "heading", "heuristic", "auto"]
CORPUS = corpus_texts()


@contextmanager
def native(on: bool) -> Iterator[None]:
    was = _accel.use_native(on)
    try:
        yield
    finally:
        _accel.use_native(was)


def both(fn: Callable[[], Any]) -> tuple[Any, Any]:
    """fn() with the accelerator, then in pure Python."""
    with native(True):
        a = fn()
    with native(False):
        b = fn()
    return a, b


def key(pieces: list[ChunkPiece]) -> list[tuple[int, str, int, int, str, int]]:
    return [(p.seq, p.content, p.start, p.end, p.context_header, p.header_prefix_len) for p in pieces]


def run(md: str, conf: ChunkingConfig, counter: Callable[[], Any] | None) -> Any:
    """Flat or parent-child chunks as comparable tuples; `counter` makes a fresh length function."""
    lf = counter() if counter else None
    if conf.enable_parent_child:
        r = split_parent_child(md, conf, length_function=lf)
        return key(r.parents), key([c.piece for c in r.children]), [c.parent_index for c in r.children]
    return key(split(md, conf, length_function=lf))


class RegexBPE:
    """A deterministic tokenizer with tiktoken's bulk interface: the GPT-style pre-tokenizer of
    test_chunker_properties, each piece one token whose id is its UTF-8 length. It drives the C bulk
    counting path (one encode of all new words, counts read off token byte lengths) without tiktoken."""

    @staticmethod
    def counter() -> TokenCounter:
        c = TokenCounter(word_tokens)
        pat = re.compile(r" ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
        c._bulk = lambda s: np.array([len(p.encode()) for p in pat.findall(s)], dtype=np.uint32)
        c._tok_bytes = np.arange(1 << 16, dtype=np.int64)
        return c


TOKEN_COUNTERS: dict[str, Callable[[], Any]] = {
    "regex": lambda: TokenCounter(word_tokens),
    "regex-bulk": RegexBPE.counter,
    "plain function": lambda: word_tokens,  # non-additive path: every length measured exactly
}


# ---------------------------------------------------------------- spans


SPAN_ALPHABET = st.sampled_from(
    ["$", "$$", "`", "```", "|", "| a |", "|---|", ":---:", "-", "[", "]", "(", ")", "![", "](", "\n", "\r",
     " ", "\t", "a", "py", "é", "中", "\f", "x" * 210]
)  # fmt: skip


@FAST
@given(parts=st.lists(SPAN_ALPHABET, max_size=60))
def test_span_scanner_matches_python_on_metacharacter_soup(parts: list[str]) -> None:
    text = "".join(parts)
    a, b = both(lambda: find_spans(text))
    assert (a.starts, a.ends, a.headers) == (b.starts, b.ends, b.headers)


@FAST
@given(md=markdown)
def test_span_scanner_matches_python_on_random_markdown(md: str) -> None:
    a, b = both(lambda: find_spans(md))
    assert (a.starts, a.ends, a.headers) == (b.starts, b.ends, b.headers)


TABLE_PART = st.sampled_from(
    [
        "|",
        "| a ",
        "|b",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\r",
        ":",
        "--",
        "---",
        "----",
        "|---",
        "|:---:",
        "| --- ",
        "x",
    ]
)


@FAST
@given(lines=st.lists(st.lists(TABLE_PART, max_size=8).map("".join), max_size=8))
def test_span_scanner_matches_python_on_table_like_lines(lines: list[str]) -> None:
    text = "\n".join(lines)
    a, b = both(lambda: find_spans(text))
    assert (a.starts, a.ends, a.headers) == (b.starts, b.ends, b.headers)


@pytest.mark.parametrize("label", [0, 1, 199, 200, 201])
@pytest.mark.parametrize("target", [0, 1, 499, 500, 501])
def test_span_scanner_honours_the_image_and_link_length_limits(label: int, target: int) -> None:
    lab, tgt = "l" * label, "t" * target
    text = f"a ![{lab}]({tgt}) b [{lab}]({tgt}) c [é{lab}](中{tgt})\n"
    a, b = both(lambda: find_spans(text))
    assert (a.starts, a.ends) == (b.starts, b.ends)


@pytest.mark.parametrize(
    "text",
    [
        "| a | b |\n|---|---|\n",
        "| a |\n|---|\n---|x\n",  # the separator group must give back its last iteration
        "| a |\n| --- |\n :---: |\n ---- |y\n",
        "| a |\n|\n---|\n---|\n",
        "| a |\r\n  |:---:| ---- |\r\n| 1 | 2 |\n",
        "| a | b | trailing\n| c | d |\n",
        "  | a |\n   | b |\n",
        "```\ncode\n``` and ````py\nx\n```` and ```",
        "$$ a $$ $$ b",
        "`a` `` `b\nc` `d`",
    ],
)
def test_span_scanner_edge_cases(text: str) -> None:
    a, b = both(lambda: find_spans(text))
    assert (a.starts, a.ends, a.headers) == (b.starts, b.ends, b.headers)


def test_span_scanner_matches_python_on_the_corpus() -> None:
    for name, text in CORPUS:
        a, b = both(lambda text=text: find_spans(text))
        assert (a.starts, a.ends, a.headers) == (b.starts, b.ends, b.headers), name


# ---------------------------------------------------------------- chunks


@pytest.mark.parametrize("parent_child", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_corpus_chunks_are_identical_in_rune_mode(strategy: str, parent_child: bool) -> None:
    conf = ChunkingConfig(
        chunk_size=512, chunk_overlap=80, strategy=strategy, enable_parent_child=parent_child
    )
    for name, text in CORPUS:
        a, b = both(lambda text=text: run(text, conf, None))
        assert a == b, name


@pytest.mark.parametrize("parent_child", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_corpus_chunks_are_identical_in_token_mode(strategy: str, parent_child: bool) -> None:
    conf = ChunkingConfig(
        chunk_size=256, chunk_overlap=40, strategy=strategy, enable_parent_child=parent_child
    )
    for name, text in CORPUS:
        a, b = both(lambda text=text: run(text, conf, RegexBPE.counter))
        assert a == b, name


@FAST
@given(md=markdown, conf=configs, parent_child=st.booleans())
def test_random_markdown_chunks_are_identical_in_rune_mode(
    md: str, conf: ChunkingConfig, parent_child: bool
) -> None:
    conf.enable_parent_child = parent_child
    conf.child_chunk_size = max(conf.chunk_size // 3, 0)
    a, b = both(lambda: run(md, conf, None))
    assert a == b


@FAST
@given(
    md=markdown,
    conf=configs,
    parent_child=st.booleans(),
    counter=st.sampled_from(sorted(TOKEN_COUNTERS)),
)
def test_random_markdown_chunks_are_identical_in_token_mode(
    md: str, conf: ChunkingConfig, parent_child: bool, counter: str
) -> None:
    conf.enable_parent_child = parent_child
    conf.child_chunk_size = max(conf.chunk_size // 3, 0)
    a, b = both(lambda: run(md, conf, TOKEN_COUNTERS[counter]))
    assert a == b


PROSE = st.sampled_from(
    ["alpha", "beta", "안녕", " ", " ", ". ", "? ", "! ", "。", "？", "！", ".", "\n", "\n\n", "\n\n\n", "  \n",
     "`x y`", "[a b](c)", "| a |\n", "$$m\n\nn$$", "\f", "# H\n", "## I\n"]
)  # fmt: skip


@FAST
@given(
    parts=st.lists(PROSE, min_size=1, max_size=300),
    size=st.integers(8, 160),
    overlap=st.integers(0, 80),
    strategy=st.sampled_from(STRATEGIES),
)
def test_overlap_choices_are_identical_on_dense_boundaries(
    parts: list[str], size: int, overlap: int, strategy: str
) -> None:
    md = "".join(parts)
    conf = ChunkingConfig(chunk_size=size, chunk_overlap=overlap, strategy=strategy)
    a, b = both(lambda: run(md, conf, None))
    assert a == b
    a, b = both(lambda: run(md, conf, RegexBPE.counter))
    assert a == b


@FAST
@given(
    parts=st.lists(
        st.sampled_from(["alpha", "beta", "안녕", " ", ". ", "? ", "! ", "。", "？", "！", "."]), max_size=200
    ),
    size=st.integers(8, 120),
)
def test_sentence_end_overlap_is_identical_without_line_breaks(parts: list[str], size: int) -> None:
    md = "".join(parts)
    conf = ChunkingConfig(chunk_size=size, chunk_overlap=size // 2, separators=[" "])
    a, b = both(lambda: run(md, conf, None))
    assert a == b


@FAST
@given(md=markdown, strategy=st.sampled_from(STRATEGIES), size=st.sampled_from([16, 40, 6000, 9000]))
def test_extreme_sizes_are_identical(md: str, strategy: str, size: int) -> None:
    big = md * 6
    conf = ChunkingConfig(chunk_size=size, chunk_overlap=size // 4, strategy=strategy)
    a, b = both(lambda: run(big, conf, None))
    assert a == b
    a, b = both(lambda: run(big, conf, RegexBPE.counter))
    assert a == b


def test_tables_wider_than_the_chunk_keep_identical_repeated_headers() -> None:
    rows = "".join(f"| r{i} | {'x' * (i % 7)} | `c{i}` |\n" for i in range(300))
    md = (
        "intro\n\n| h1 | h2 | h3 |\n|---|:---:|---|\n" + rows + "\nafter\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    )
    for size in (40, 90, 200):
        conf = ChunkingConfig(chunk_size=size, chunk_overlap=size // 5)
        a, b = both(lambda conf=conf: run(md, conf, None))
        assert a == b
        assert any(p[5] > 0 for p in a), "some chunk must carry a repeated header"
        a, b = both(lambda conf=conf: run(md, conf, RegexBPE.counter))
        assert a == b


def test_preview_is_identical() -> None:
    md = CORPUS[0][1][:20000]
    for conf in (ChunkingConfig(strategy="auto"), ChunkingConfig(enable_parent_child=True)):
        a, b = both(lambda conf=conf: preview(md, conf, limit=50))
        assert a == b


def test_a_failing_tokenizer_raises_in_both_paths() -> None:
    def boom(s: str) -> int:
        raise ValueError("tokenizer down")

    for on in (True, False):
        with native(on), pytest.raises(ValueError, match="tokenizer down"):
            split(
                "alpha beta\n\ngamma " * 50, ChunkingConfig(chunk_size=20), length_function=TokenCounter(boom)
            )


def test_a_counter_reused_across_documents_gives_the_same_chunks_as_fresh_ones() -> None:
    conf = ChunkingConfig(chunk_size=128, chunk_overlap=20)
    shared = RegexBPE.counter()
    with native(True):
        warm = [key(split(t, conf, length_function=shared)) for _, t in CORPUS[:8]]
        cold = [key(split(t, conf, length_function=RegexBPE.counter())) for _, t in CORPUS[:8]]
    assert warm == cold


def test_tiktoken_chunks_are_identical_in_both_paths() -> None:
    enc = offline_cl100k()
    for strategy in STRATEGIES:
        conf = ChunkingConfig(chunk_size=512, chunk_overlap=50, strategy=strategy)
        for name, text in CORPUS:
            a, b = both(lambda text=text, conf=conf: run(text, conf, lambda: TokenCounter.from_encoding(enc)))
            assert a == b, (strategy, name)


def test_environment_variable_forces_pure_python() -> None:
    code = "from chalicelib.chunker import _accel; print(_accel.native is None, _accel.available())"
    env = {**os.environ, "WEKNORA_CHUNKER_PURE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
    env["WEKNORA_CHUNKER_PURE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


@FAST
@given(
    md=markdown,
    points=st.lists(st.floats(0, 1), min_size=4, max_size=4),
    budget=st.integers(0, 120),
    counter=st.sampled_from(sorted(TOKEN_COUNTERS)),
)
def test_native_token_measure_answers_like_the_python_one(
    md: str, points: list[float], budget: int, counter: str
) -> None:
    from chalicelib.chunker.lengths import TokenMeasure, token_measure

    make = TOKEN_COUNTERS[counter]
    lf = make()
    c = lf if isinstance(lf, TokenCounter) else TokenCounter(lf, additive=False, max_bytes_per_token=0)
    with native(True):
        nm = token_measure(md, c)
    pm = TokenMeasure(md, make() if isinstance(lf, TokenCounter) else c)
    assert type(nm) is not TokenMeasure
    a, b, x, y = sorted(int(p * len(md)) for p in points)
    ends = sorted({b, x, y, len(md)})
    assert nm.length(a, b) == pm.length(a, b)
    assert nm.fits(a, y, budget) == pm.fits(a, y, budget)
    assert nm.window_start(a, y, budget) == pm.window_start(a, y, budget)
    assert nm.last_fitting(a, budget, ends, 0, len(ends)) == pm.last_fitting(a, budget, ends, 0, len(ends))
    assert nm.text_len(md[x:y]) == pm.text_len(md[x:y])
    assert nm.token_mode and nm.text is md


def test_make_pieces_also_fills_classes_without_slots() -> None:
    from dataclasses import dataclass

    @dataclass
    class Plain:
        seq: int
        content: str
        start: int
        end: int
        context_header: str = ""
        header_prefix_len: int = 0

    text = "alpha beta gamma"
    got = _accel._module.make_pieces(Plain, text, [(0, 5, ""), (6, 10, "H|", "ctx")])
    assert got == [Plain(0, "alpha", 0, 5, "", 0), Plain(1, "H|beta", 6, 10, "ctx", 2)]
    slotted = _accel._module.make_pieces(ChunkPiece, text, [(11, 16, "", "c")])
    assert slotted == [ChunkPiece(seq=0, content="gamma", start=11, end=16, context_header="c")]
    with pytest.raises(IndexError):
        _accel._module.make_pieces(ChunkPiece, text, [(11, 99, "")])


def test_a_counter_shared_by_threads_gives_the_same_chunks() -> None:
    import threading

    conf = ChunkingConfig(chunk_size=128, chunk_overlap=20)
    texts = [t for _, t in CORPUS[:8]]
    with native(True):
        expected = [key(split(t, conf, length_function=RegexBPE.counter())) for t in texts]
        shared = RegexBPE.counter()
        results: list[list[Any]] = [[] for _ in range(4)]
        errors: list[BaseException] = []

        def work(i: int) -> None:
            try:
                results[i] = [
                    key(split(t, conf, length_function=shared)) for t in texts[i % 2 :] + texts[: i % 2]
                ]
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-5)  # switch threads often, also inside tokenizer callbacks
        try:
            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            sys.setswitchinterval(old)
    assert not errors
    for i, r in enumerate(results):
        order = texts[i % 2 :] + texts[: i % 2]
        assert r == [expected[texts.index(t)] for t in order]


def test_spans_used_with_an_equal_but_distinct_text_object() -> None:
    from chalicelib.chunker.lengths import CharMeasure
    from chalicelib.chunker.recursive import overlap_start, split_range

    text = CORPUS[1][1][:30000]
    twin = "".join(list(text))
    assert twin == text and twin is not text
    with native(True):
        spans = find_spans(text)
        first = split_range(twin, 0, len(twin), spans, ("\n\n", "\n"), 300, 60, CharMeasure(twin))
        again = split_range(text, 0, len(text), spans, ("\n\n", "\n"), 300, 60, CharMeasure(text))
        ov = [overlap_start(twin, spans, CharMeasure(twin), s, e, 60) for s, e, _ in first[:50]]
    with native(False):
        pure = split_range(text, 0, len(text), find_spans(text), ("\n\n", "\n"), 300, 60, CharMeasure(text))
        pov = [overlap_start(text, find_spans(text), CharMeasure(text), s, e, 60) for s, e, _ in pure[:50]]
    assert first == again == pure
    assert ov == pov
