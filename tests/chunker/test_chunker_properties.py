"""Property tests: random Markdown and slices of the corpus, every strategy, char and token sizes.

Invariants (checked by chunker_helpers.check_chunks): offsets restore every chunk's content; no chunk
exceeds the 7,500-rune hard cap; no chunk boundary (start, end, overlap start) cuts a protected span, using
WeKnora's original patterns as the reference; overlap never exceeds the setting; all non-blank text is
covered.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
from chunker_helpers import check_chunks, corpus_texts, offline_cl100k, reference_spans
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from chalicelib.chunker import ChunkingConfig, ChunkPiece, TokenCounter, split, split_parent_child
from chalicelib.chunker.config import resolve
from chalicelib.chunker.lengths import TokenMeasure
from chalicelib.chunker.spans import find_spans

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

words = st.sampled_from(
    ["alpha", "beta", "gamma", "delta", "Über", "naïve", "x", "42", "안녕하세요", "中文", "—", "e.g."]
)
sentence = st.lists(words, min_size=1, max_size=14).map(lambda w: " ".join(w) + st_choice_end(w))


def st_choice_end(w: list[str]) -> str:
    return [". ", "? ", "! ", "。", "", "\n"][len(w) % 6]


line = st.lists(sentence, min_size=1, max_size=4).map("".join)
paragraph = st.lists(line, min_size=1, max_size=5).map("\n".join)
heading = st.tuples(st.integers(1, 4), line).map(lambda t: "#" * t[0] + " " + t[1].strip().replace("\n", " "))
cell = st.sampled_from(["a", "bb", "c c", "42", "ü", "", "`x`"])
table = st.tuples(st.integers(1, 4), st.integers(0, 12)).flatmap(
    lambda t: st.lists(st.lists(cell, min_size=t[0], max_size=t[0]), min_size=t[1], max_size=t[1]).map(
        lambda rows, n=t[0]: (
            "| "
            + " | ".join(f"h{i}" for i in range(n))
            + " |\n|"
            + "---|" * n
            + "\n"
            + "".join("| " + " | ".join(r) + " |\n" for r in rows)
        )
    )
)
fenced = st.lists(line, min_size=0, max_size=6).map(lambda ls: "```py\n" + "\n\n".join(ls) + "\n```")
inline = st.tuples(line, words).map(lambda t: f"{t[0].strip()} `{t[1]}. code` tail")
link = st.tuples(words, words).map(
    lambda t: f"see [{t[0]} link]({t[1]}/path) and ![img {t[0]}](i/{t[1]}.png)"
)
math = st.lists(line, min_size=1, max_size=3).map(lambda ls: "$$\n" + "\n\n".join(ls) + "\n$$")
misc = st.sampled_from(
    ["\f", "\n\n\n\n", "---", "Chapter 2: Begin", "1. First", "2.3 Methods", "SECTION TITLE", "   "]
)
block = st.one_of(paragraph, paragraph, heading, table, fenced, inline, link, math, misc)
markdown = st.lists(block, min_size=0, max_size=25).map(lambda bs: "\n\n".join(bs))

configs = st.builds(
    ChunkingConfig,
    chunk_size=st.integers(min_value=-1, max_value=700),
    chunk_overlap=st.integers(min_value=-1, max_value=300),
    strategy=st.sampled_from(["recursive", "heading", "heuristic", "auto", ""]),
)


def _check(md: str, conf: ChunkingConfig) -> None:
    chunks = split(md, conf)
    check_chunks(md, chunks, overlap=resolve(conf).overlap)


@FAST
@given(md=markdown, conf=configs)
def test_random_markdown_keeps_every_invariant(md: str, conf: ChunkingConfig) -> None:
    _check(md, conf)


@FAST
@given(md=markdown)
def test_scanner_matches_weknora_patterns_on_random_markdown(md: str) -> None:
    s = find_spans(md)
    assert list(zip(s.starts, s.ends, strict=True)) == reference_spans(md)


@FAST
@given(md=markdown, size=st.integers(50, 2000), child=st.integers(20, 600))
def test_parent_child_children_sit_inside_their_parents(md: str, size: int, child: int) -> None:
    r = split_parent_child(md, ChunkingConfig(parent_chunk_size=size, child_chunk_size=child))
    kids = [c.piece for c in r.children]
    check_chunks(md, kids)
    check_chunks(md, r.parents, cover=False)  # parents with one identical child are dropped
    child_overlap = resolve(ChunkingConfig(chunk_size=child, chunk_overlap=child // 5)).overlap
    for a, b in zip(r.children, r.children[1:], strict=False):
        if a.parent_index == b.parent_index >= 0 and b.piece.start < a.piece.end:
            assert a.piece.end - b.piece.start <= child_overlap
    for c in r.children:
        if c.parent_index >= 0:
            p = r.parents[c.parent_index]
            assert p.start <= c.piece.start and c.piece.end <= p.end
        else:
            assert c.piece.content  # a dropped parent's only child carries the text itself


CORPUS = [(name, text) for name, text in corpus_texts() if text.strip()]
KOREAN = [(n, t) for n, t in CORPUS if ".ko." in n]


@FAST
@given(
    doc=st.sampled_from(CORPUS),
    frac=st.floats(0, 1),
    length=st.integers(0, 30000),
    conf=configs,
)
def test_corpus_slices_keep_every_invariant(
    doc: tuple[str, str], frac: float, length: int, conf: ChunkingConfig
) -> None:
    text = doc[1]
    a = int(frac * max(0, len(text) - 1))
    _check(text[a : a + length], conf)


@FAST
@given(doc=st.sampled_from(KOREAN), size=st.integers(30, 600), overlap=st.integers(0, 200))
def test_korean_offsets_are_counted_in_runes(doc: tuple[str, str], size: int, overlap: int) -> None:
    text = doc[1]
    chunks = split(text, ChunkingConfig(chunk_size=size, chunk_overlap=overlap))
    check_chunks(
        text, chunks, overlap=resolve(ChunkingConfig(chunk_size=size, chunk_overlap=overlap)).overlap
    )
    # Rune budget: only single protected/unsplittable units may exceed it.
    big = [c for c in chunks if len(c.content) > size]
    assert all("\n" not in c.content.strip() or len(c.content) <= 7500 for c in big)
    assert any(len(c.content.encode()) > c.end - c.start for c in chunks), "bytes are not runes"


# ---------------------------------------------------------------- token mode with a real, additive tokenizer

_TOKEN = re.compile(r" ?[A-Za-z]+| ?[0-9]{1,3}| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def word_tokens(s: str) -> int:
    """A GPT-style pre-tokenizer used as the tokenizer itself: additive at "space + non-space" boundaries,
    so it exercises the segment cache exactly like tiktoken does."""
    return len(_TOKEN.findall(s))


@FAST
@given(md=markdown, frac_a=st.floats(0, 1), frac_b=st.floats(0, 1))
def test_token_measure_is_exact_for_an_additive_tokenizer(md: str, frac_a: float, frac_b: float) -> None:
    m = TokenMeasure(md, TokenCounter(word_tokens))
    a, b = sorted((int(frac_a * len(md)), int(frac_b * len(md))))
    assert m.length(a, b) == word_tokens(md[a:b]) or m.length(a, b) >= word_tokens(md[a:b])
    assert m.length(0, len(md)) == word_tokens(md)


@FAST
@given(md=markdown, conf=configs)
def test_token_mode_keeps_every_invariant(md: str, conf: ChunkingConfig) -> None:
    counter = TokenCounter(word_tokens)
    chunks = split(md, conf, length_function=counter)
    check_chunks(md, chunks)
    r = resolve(conf, token_mode=True)
    for a, b in itertools.pairwise(chunks):
        if b.start < a.end:
            assert word_tokens(md[b.start : a.end]) <= r.overlap


@FAST
@given(n=st.integers(5, 120), size=st.integers(10, 200))
def test_token_mode_chunks_of_plain_lines_fit_the_token_budget(n: int, size: int) -> None:
    md = "\n".join(f"line {i} has a few words in it" for i in range(n))
    chunks = split(md, ChunkingConfig(chunk_size=size, chunk_overlap=size // 5), length_function=word_tokens)
    check_chunks(md, chunks)
    assert all(word_tokens(c.content) <= size for c in chunks)


#: found by Hypothesis: repeated 8 times, 7,552 runes with no blank line fit 6,000 tokens, and a separator gap that fit its
#: token budget was kept whole past the rune hard cap
MD_OVER_CAP = "alpha? \nalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha. alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha. alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha! \n\nalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha\nalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha! alpha alpha alpha alpha alpha alpha alpha alpha alpha alphaalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha! \nalpha alpha alpha alpha alpha alpha alpha alpha! alpha alpha alpha alpha alpha alpha alpha alpha alpha。alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha? alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha! \nalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha\nalpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha alpha. "


@FAST
@given(md=markdown, strategy=st.sampled_from(["recursive", "heading", "heuristic", "auto"]))
@example(md=MD_OVER_CAP, strategy="recursive")
def test_token_mode_with_a_huge_token_budget_still_respects_the_rune_hard_cap(md: str, strategy: str) -> None:
    big = md * 8
    conf = ChunkingConfig(chunk_size=6000, chunk_overlap=100, strategy=strategy)
    check_chunks(big, split(big, conf, length_function=word_tokens))
    r = split_parent_child(
        big,
        ChunkingConfig(parent_chunk_size=8000, child_chunk_size=3000, strategy=strategy),
        length_function=word_tokens,
    )
    check_chunks(big, r.parents, cover=False)
    check_chunks(big, [c.piece for c in r.children])


@pytest.mark.slow
@SLOW
@given(md=markdown, conf=configs)
def test_random_markdown_keeps_every_invariant_many_examples(md: str, conf: ChunkingConfig) -> None:
    _check(md, conf)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["recursive", "heading", "heuristic", "auto"])
@pytest.mark.parametrize("size", [64, 512, 4096])
def test_whole_corpus_keeps_every_invariant(strategy: str, size: int) -> None:
    for _, text in CORPUS:
        _check(text, ChunkingConfig(chunk_size=size, chunk_overlap=size // 6, strategy=strategy))


@pytest.mark.slow
def test_tiktoken_counts_match_exactly_on_the_corpus() -> None:
    enc = offline_cl100k()
    counter = TokenCounter.from_encoding(enc)
    for _, text in CORPUS:
        m = TokenMeasure(text, counter)
        assert m.length(0, len(text)) == len(enc.encode_ordinary(text))
        for c in split(text, ChunkingConfig(chunk_size=512, chunk_overlap=50), length_function=counter):
            assert m.length(c.start, c.end) >= len(enc.encode_ordinary(c.content[c.header_prefix_len :]))


class RegexBPE:
    """A deterministic tokenizer with tiktoken's bulk interface: `word_tokens`'s pre-tokenizer, each piece
    one token whose id is its UTF-8 length. It drives TokenCounter's bulk path (one encode of all new
    words, counts read off token byte lengths) without tiktoken."""

    @staticmethod
    def counter() -> TokenCounter:
        c = TokenCounter(word_tokens)
        c._bulk = lambda s: np.array([len(p.encode()) for p in _TOKEN.findall(s)], dtype=np.uint32)
        c._tok_bytes = np.arange(1 << 16, dtype=np.int64)
        return c


def _key(chunks: list[ChunkPiece]) -> list[tuple[int, str, int, int, str, int]]:
    return [(c.seq, c.content, c.start, c.end, c.context_header, c.header_prefix_len) for c in chunks]


def test_bulk_counting_and_a_counter_reused_across_documents_give_the_same_chunks() -> None:
    conf = ChunkingConfig(chunk_size=128, chunk_overlap=20)
    texts = [t for _, t in CORPUS[:8]]
    plain = [_key(split(t, conf, length_function=TokenCounter(word_tokens))) for t in texts]
    shared = RegexBPE.counter()
    assert [_key(split(t, conf, length_function=shared)) for t in texts] == plain
    assert [_key(split(t, conf, length_function=RegexBPE.counter())) for t in texts] == plain


def test_a_failing_tokenizer_raises() -> None:
    def boom(s: str) -> int:
        raise ValueError("tokenizer down")

    with pytest.raises(ValueError, match="tokenizer down"):
        split("alpha beta\n\ngamma " * 50, ChunkingConfig(chunk_size=20), length_function=TokenCounter(boom))
