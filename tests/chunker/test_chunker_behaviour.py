"""One test per WeKnora chunker behaviour (weknora-behaviour.md §1.8-§1.10), named after the behaviour."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from chunker_helpers import check_chunks, reference_spans

from chalicelib.chunker import (
    HARD_CAP,
    ChunkingConfig,
    ChunkPiece,
    index_text,
    normalise_markdown,
    preview,
    split,
    split_parent_child,
)
from chalicelib.chunker.config import resolve
from chalicelib.chunker.lengths import CharMeasure
from chalicelib.chunker.profile import profile_document, select_chain
from chalicelib.chunker.spans import find_spans
from chalicelib.chunker.tiers import Ctx, validate


def cfg(**kw: object) -> ChunkingConfig:
    return ChunkingConfig(**kw)  # type: ignore[arg-type]


def prose(n: int, word: str = "lorem") -> str:
    return " ".join(f"{word}{i}" for i in range(n))


# ---------------------------------------------------------------- configuration


def test_defaults_are_512_runes_overlap_80_and_three_separators() -> None:
    r = resolve(cfg(chunk_size=0, chunk_overlap=-1, separators=[]))
    assert (r.size, r.overlap, r.separators) == (512, 80, ("\n\n", "\n", "。"))
    assert resolve(cfg(chunk_size=-5)).size == 512


def test_explicit_zero_overlap_is_honoured_not_reset_to_80() -> None:
    # Deliberate difference: WeKnora silently turns 0 into 80.
    assert resolve(cfg(chunk_overlap=0)).overlap == 0
    md = "\n\n".join(prose(30, f"p{i}x") for i in range(12))
    chunks = split(md, cfg(chunk_size=300, chunk_overlap=0))
    assert len(chunks) > 3
    for a, b in itertools.pairwise(chunks):
        assert b.start >= a.end


def test_overlap_is_capped_at_half_the_chunk_size() -> None:
    assert resolve(cfg(chunk_size=100, chunk_overlap=90)).overlap == 50
    md = ".\n".join(prose(6, f"s{i}w") for i in range(80))
    chunks = split(md, cfg(chunk_size=100, chunk_overlap=90))
    check_chunks(md, chunks, overlap=50)
    assert any(b.start < a.end for a, b in itertools.pairwise(chunks))


@pytest.mark.parametrize(("lang", "size"), [("en", 360), ("de", 405), ("zh", 153), ("mixed", 270), ("", 270)])
def test_token_limit_caps_size_at_tokens_times_chars_per_token_times_0_9(lang: str, size: int) -> None:
    assert resolve(cfg(chunk_size=1000, token_limit=100, language=lang)).size == size
    # A limit above the configured size leaves the size alone.
    assert resolve(cfg(chunk_size=200, token_limit=1000, language=lang)).size == 200


# ---------------------------------------------------------------- strategy, profiler, validator


def test_strategy_empty_legacy_and_recursive_all_run_the_recursive_tier_only() -> None:
    md = "# A\n\n" + "\n\n".join(f"## S{i}\n\n{prose(40)}" for i in range(6))
    for s in ("", "legacy", "recursive"):
        p = preview(md, cfg(strategy=s, chunk_size=300))
        assert p["tier"] == "recursive"
        assert p["diagnostics"]["tier_chain"] == ["recursive"]


def test_profiler_picks_heading_tier_for_three_headings_dense_with_a_dominant_level() -> None:
    md = "\n\n".join(f"## Part {i}\n\n{prose(30)}" for i in range(4))
    prof = profile_document(md)
    assert prof.md_heading_total == 4 and prof.dominant_heading_level() == 2
    assert prof.heading_density() > 0.005
    assert select_chain(prof) == ["heading", "recursive"]
    # Two headings are not enough.
    assert select_chain(profile_document("# a\n\n" + prose(20) + "\n\n# b\n\ntext")) == ["recursive"]


def test_profiler_ignores_headings_inside_fenced_code() -> None:
    md = "```\n# not\n# a\n# heading\n```\n\n" + prose(50)
    assert profile_document(md).md_heading_total == 0


def test_profiler_picks_heuristic_tier_for_five_markers_or_any_form_feed_or_chapter_word() -> None:
    numbered = "\n\n".join(f"{i}. Section title {i}\n{prose(20)}" for i in range(1, 6))
    assert "heuristic" in select_chain(profile_document(numbered))
    assert "heuristic" not in select_chain(profile_document(numbered.split("5.")[0]))
    assert "heuristic" in select_chain(profile_document(prose(50) + "\f" + prose(50)))
    assert "heuristic" in select_chain(profile_document(prose(50) + "\nChapter 1: Start\n" + prose(50)))
    assert "heuristic" in select_chain(profile_document("第一章 总则\n" + "内容。" * 50))


def _ctx(size: int) -> Ctx:
    r = resolve(cfg(chunk_size=size))
    return Ctx("x" * 100000, find_spans(""), r, CharMeasure("x" * 100000))


def test_validator_rejects_empty_single_chunk_tiny_chunks_far_below_target_and_oversize() -> None:
    c = _ctx(100)
    assert validate(c, [], 500) == "no chunks produced"
    assert validate(c, [(0, 250, "", "")], 250) == "single chunk for large document"
    assert validate(c, [(0, 200, "", "")], 200) == ""  # exactly 2x size is fine
    tiny = [(i * 10, i * 10 + 10, "", "") for i in range(8)] + [(80, 180, "", "")]
    assert validate(c, tiny, 180) == "too many tiny chunks"
    small = [(i * 60, i * 60 + 60, "", "") for i in range(10)]  # >= 50 runes but < 400 / 4
    assert validate(_ctx(400), small, 600) == "all chunks far below target size"
    assert validate(c, [(0, 100, "", ""), (100, 301, "", "")], 301) == "chunk exceeds 2x target size"
    assert validate(c, [(0, 100, "", ""), (100, 200, "", "")], 200) == ""


def test_rejected_tier_falls_back_to_recursive_with_the_reason_recorded() -> None:
    # Heading sections of 20 runes each -> the heading tier makes tiny chunks that coalescing cannot merge
    # (no shared breadcrumb) and the validator rejects it.
    md = "\n".join(f"# H{i}\nabc" for i in range(40))
    p = preview(md, cfg(strategy="heading", chunk_size=400, chunk_overlap=0))
    assert p["diagnostics"]["tier_chain"] == ["heading", "recursive"]
    assert p["diagnostics"]["rejected"] == [{"tier": "heading", "reason": "too many tiny chunks"}]
    assert p["tier"] == "recursive"


# ---------------------------------------------------------------- protected spans


PROTECTED_CASES = {
    "latex_block": "$$\n" + "\n\n".join(["x^2 + y^2"] * 12) + "\n$$",
    "image": "![" + "alt text " * 8 + "](https://example.com/a/very/long/path/image.png)",
    "link": "[" + "link text " * 8 + "](https://example.com/" + "seg/" * 20 + ")",
    "fenced_code": "```python\n" + "\n\n".join(f"print({i})" for i in range(20)) + "\n```",
    "inline_code": "`" + "code. " * 20 + "`",
}


@pytest.mark.parametrize("name", sorted(PROTECTED_CASES))
def test_protected_span_is_never_split(name: str) -> None:
    span = PROTECTED_CASES[name]
    md = prose(20) + ".\n\n" + span + "\n\n" + prose(20) + ".\n"
    chunks = split(md, cfg(chunk_size=60, chunk_overlap=20))
    check_chunks(md, chunks, overlap=20)
    start = md.index(span)
    assert any(c.start <= start and start + len(span) <= c.end for c in chunks), "span must sit in one chunk"


def test_table_header_with_separator_and_each_row_are_atomic() -> None:
    rows = "".join(f"| row {i} cell | value {i} |\n" for i in range(30))
    md = "Intro.\n\n| Name | Value |\n| --- | --- |\n" + rows + "\nAfter."
    spans = reference_spans(md)
    assert any(md[s:e] == "| Name | Value |\n| --- | --- |\n" for s, e in spans)
    chunks = split(md, cfg(chunk_size=80, chunk_overlap=0))
    check_chunks(md, chunks)
    for c in chunks:
        body = c.content[c.header_prefix_len :]
        assert body.count("|") % 3 == 0 or not body.strip().startswith("|"), "no row is cut"


def test_protected_unit_over_the_hard_cap_is_split_near_a_newline_or_space() -> None:
    code = "```\n" + "".join(f"line {i:05d} of a very long generated listing\n" for i in range(600)) + "```"
    assert len(code) > 2 * HARD_CAP
    chunks = split(code, cfg(chunk_size=512))
    assert all(len(c.content) <= HARD_CAP for c in chunks)
    assert all(code[c.end - 1] in " \n" for c in chunks[:-1]), "cut right after a newline or space"
    assert "".join(c.content for c in chunks) == code


def test_optimised_span_scanner_matches_weknora_patterns() -> None:
    md = (
        "a | b | c\n  | x | y |\n| --- | :-: |\n|1|2|\n\n`code` [l](u) ![i](j) $$m$$ ```py\nz\n```\n"
        "text |not| a row\n   | indented | row |\n|   |\n|a|b|\n|---|---|\n"
    )
    s = find_spans(md)
    assert list(zip(s.starts, s.ends, strict=True)) == reference_spans(md)


# ---------------------------------------------------------------- separators and hard cap


def test_separators_apply_by_priority_and_lower_ones_only_inside_oversize_pieces() -> None:
    small = "alpha line one\nalpha line two"  # fits: its inner newline must not become a boundary
    big = "\n".join(f"beta line {i} " + "z" * 30 for i in range(12))  # oversize: split at newlines
    md = small + "\n\n" + big
    chunks = split(md, cfg(chunk_size=120, chunk_overlap=0))
    check_chunks(md, chunks)
    inner = md.index("\nalpha line two")
    assert all(c.end != inner and c.start != inner + 1 for c in chunks)
    assert len([c for c in chunks if c.start >= len(small)]) >= 4


def test_cjk_full_stop_is_the_last_separator() -> None:
    md = "。".join(["这是一个很长的中文句子用于测试分块"] * 30) + "。"
    chunks = split(md, cfg(chunk_size=60, chunk_overlap=0))
    check_chunks(md, chunks)
    assert len(chunks) > 5
    assert all(md[c.end - 1] == "。" for c in chunks[:-1])


def test_text_without_separators_is_capped_at_7500_runes_near_a_space() -> None:
    md = " ".join(["word"] * 5000)  # 24,999 runes, no newline
    chunks = split(md, cfg(chunk_size=512))
    check_chunks(md, chunks)
    assert max(len(c.content) for c in chunks) <= HARD_CAP
    assert all(md[c.end - 1] == " " for c in chunks[:-1])


# ---------------------------------------------------------------- overlap


def _two_chunks(md: str, size: int, overlap: int) -> tuple[ChunkPiece, ChunkPiece]:
    chunks = split(md, cfg(chunk_size=size, chunk_overlap=overlap, separators=["\n\n\n"]))
    assert len(chunks) >= 2
    return chunks[0], chunks[1]


def test_overlap_prefers_a_paragraph_break_over_a_line_break_and_sentence_end() -> None:
    first = "A" * 40 + ". Line one.\nLine two\n\nPara two. End"
    md = first + "\n\n\n" + "B" * 70
    _a, b = _two_chunks(md, 100, 30)
    assert b.start == md.index("Para two")


def test_overlap_takes_a_line_break_when_no_paragraph_break() -> None:
    first = "A" * 40 + " first. sentence\nsecond line. Tail end"
    md = first + "\n\n\n" + "B" * 70
    _a, b = _two_chunks(md, 100, 30)
    assert b.start == md.index("second line")


def test_overlap_takes_the_earliest_sentence_end_when_no_line_break() -> None:
    first = "A" * 40 + " one. two. three. four"
    md = first + "\n\n\n" + "B" * 70
    _a, b = _two_chunks(md, 100, 30)
    assert b.start == md.index("one.") + len("one. ")


def test_no_semantic_boundary_in_the_window_means_no_overlap() -> None:
    md = "A" * 40 + " " + "x" * 40 + "\n\n\n" + "B" * 70
    a, b = _two_chunks(md, 100, 30)
    assert b.start == a.end


def test_overlap_never_starts_inside_a_protected_span() -> None:
    first = "A" * 40 + " `code. with. dots. inside` tail"
    md = first + "\n\n\n" + "B" * 70
    a, b = _two_chunks(md, 100, 30)
    code = md.index("`code")
    assert not (code < b.start < code + len("`code. with. dots. inside`"))
    assert b.start == a.end  # the only sentence ends are inside the inline code


def test_overlap_shrinks_to_fit_the_next_unit() -> None:
    md = "A" * 40 + ". one.\ntwo.\nthree" + "\n\n\n" + "B" * 90
    a, b = _two_chunks(md, 100, 30)
    # The next unit is 90 runes: only 10 runes of overlap fit, so the window is the last 10 runes and
    # its only usable boundary is the line break before "three".
    assert b.end - b.start <= 100
    assert b.start == md.index("three")
    md2 = "A" * 40 + ". one.\ntwo.\nthree" + "\n\n\n" + "B" * 96
    a, b = _two_chunks(md2, 100, 30)
    assert b.start == a.end  # 4 runes left: nothing fits


# ---------------------------------------------------------------- tables


TABLE = "| Name | Value |\n| --- | --- |\n" + "".join(f"| item {i:02d} | {i * 7:04d} |\n" for i in range(40))


def test_table_header_is_reprepended_to_following_chunks_outside_the_offsets() -> None:
    md = "Intro paragraph.\n\n" + TABLE
    chunks = split(md, cfg(chunk_size=150, chunk_overlap=0))
    check_chunks(md, chunks)
    header = "| Name | Value |\n| --- | --- |\n"
    with_header = [c for c in chunks if c.header_prefix_len]
    assert len(with_header) >= 3
    for c in with_header:
        assert c.content.startswith(header) and c.header_prefix_len == len(header)
        assert c.content[c.header_prefix_len :] == md[c.start : c.end]


def test_chunk_is_flushed_at_a_table_boundary_and_the_next_table_has_its_own_header() -> None:
    t2 = "| A | B | C |\n| - | - | - |\n" + "".join(f"| a{i} | b{i} | c{i} |\n" for i in range(3))
    t2 = t2.replace("| - | - | - |", "| --- | --- | --- |")
    md = TABLE + "\n" + t2
    chunks = split(md, cfg(chunk_size=200, chunk_overlap=0))
    check_chunks(md, chunks)
    second = md.index("| A | B | C |")
    assert any(c.start == second for c in chunks), "flush before the second table"
    assert not any("| Name | Value |" in c.content and c.end > second for c in chunks)


def test_table_header_ends_on_a_non_table_line() -> None:
    md = TABLE + "Plain text after the table. " * 12
    chunks = split(md, cfg(chunk_size=150, chunk_overlap=0))
    check_chunks(md, chunks)
    after = md.index("Plain text")
    assert all(c.header_prefix_len == 0 for c in chunks if c.start >= after)


def test_table_header_ends_when_the_column_count_changes() -> None:
    rows3 = "".join(f"| x{i} | y{i} | z{i} |\n" for i in range(20))
    md = TABLE + rows3
    chunks = split(md, cfg(chunk_size=150, chunk_overlap=0))
    check_chunks(md, chunks)
    change = md.index("| x0 |")
    assert any(c.start == change for c in chunks)
    assert all(c.header_prefix_len == 0 for c in chunks if c.start >= change)


# ---------------------------------------------------------------- heading tier


DOC = "# Guide\n\nIntro text.\n\n" + "".join(
    f"## Section {i}\n\n{prose(25, f's{i}w')}\n\n### Detail {i}\n\n{prose(25, f'd{i}w')}\n\n"
    for i in range(4)
)


def test_heading_tier_cuts_at_headings_of_the_dominant_level_and_keeps_breadcrumbs_out_of_content() -> None:
    chunks = split(DOC, cfg(strategy="heading", chunk_size=600, chunk_overlap=0))
    check_chunks(DOC, chunks)
    for i in (1, 2, 3):  # section 0 is merged into the small intro that shares "# Guide"
        pos = DOC.index(f"## Section {i}")
        assert any(c.start == pos for c in chunks)
    assert chunks[0].context_header == "# Guide" and "## Section 0" in chunks[0].content
    sec = next(c for c in chunks if c.start == DOC.index("## Section 2"))
    assert sec.context_header == "# Guide\n## Section 2"
    assert sec.content.startswith("## Section 2")  # the heading line is source text, the crumb is not added


def test_heading_tier_ignores_headings_inside_fences() -> None:
    fenced = "```\n## not a heading\n```\n"
    md = DOC.replace("## Section 2\n\n", "## Section 2\n\n" + fenced)
    chunks = split(md, cfg(strategy="heading", chunk_size=600, chunk_overlap=0))
    assert not any(c.start == md.index("## not a heading") for c in chunks)


def test_oversize_section_is_split_recursively_with_per_offset_breadcrumbs() -> None:
    lines_a = "\n".join(prose(8, f"a{i}w") for i in range(12))
    lines_b = "\n".join(prose(8, f"b{i}w") for i in range(12))
    md = "# Top\n\n" + prose(60, "i") + "\n\n## Big\n\n" + lines_a + "\n\n### Deep\n\n" + lines_b
    md += "\n\n## Next\n\nend\n\n## Last\n\nx"
    chunks = split(md, cfg(strategy="heading", chunk_size=300, chunk_overlap=0))
    check_chunks(md, chunks)
    deep = md.index("### Deep")
    assert any(c.context_header == "# Top\n## Big" for c in chunks if c.start < deep)
    assert any(c.context_header == "# Top\n## Big\n### Deep" for c in chunks if c.start > deep)


def test_small_neighbour_sections_sharing_a_heading_prefix_are_merged() -> None:
    md = "# Top\n\n" + "".join(f"## S{i}\n\nshort {i}.\n\n" for i in range(6))
    chunks = split(md, cfg(strategy="heading", chunk_size=1000, chunk_overlap=0))
    check_chunks(md, chunks)
    assert len(chunks) == 1
    assert chunks[0].context_header == "# Top"
    # Merging stops once the running chunk reaches max(size/2, 200).
    big = "# Top\n\n" + "".join(f"## S{i}\n\n{prose(30)}\n\n" for i in range(6))
    chunks = split(big, cfg(strategy="heading", chunk_size=1000, chunk_overlap=0))
    assert all(len(c.content) < 500 + 400 for c in chunks) and len(chunks) > 1


# ---------------------------------------------------------------- heuristic tier


def test_heuristic_tier_cuts_at_weighted_boundaries_with_a_minimum_chunk() -> None:
    parts = [f"{i}. Heading number {i}\n{prose(25, f'h{i}w')}\n" for i in range(1, 9)]
    md = "".join(parts)
    chunks = split(md, cfg(strategy="heuristic", chunk_size=400, chunk_overlap=0))
    check_chunks(md, chunks)
    starts = {md.index(f"{i}. Heading") for i in range(1, 9)}
    assert all(c.start in starts or c.start == 0 for c in chunks)
    assert all(len(c.content) >= max(400 // 4, 50) for c in chunks[:-1])


def test_form_feed_is_a_heuristic_boundary() -> None:
    md = prose(100, "a") + "\f" + prose(100, "b")
    p = preview(md, cfg(strategy="auto", chunk_size=500, chunk_overlap=0))
    assert p["tier"] == "heuristic"
    assert any(c["start"] == md.index("\f") for c in p["chunks"])


# ---------------------------------------------------------------- offsets, normalisation, index text


def test_offsets_are_rune_offsets_into_the_normalised_markdown() -> None:
    raw = "가나다 라마바.\r\n\r\n" + "한국어 문장입니다. " * 60
    md = normalise_markdown(raw)
    assert "\r" not in md
    chunks = split(md, cfg(chunk_size=100, chunk_overlap=20))
    check_chunks(md, chunks, overlap=20)
    assert all(c.end - c.start == len(c.content) for c in chunks)
    assert len(md.encode()) > len(md)  # bytes would differ from runes


def test_normalise_markdown_turns_crlf_and_cr_into_lf_and_drops_a_bom() -> None:
    assert normalise_markdown("\ufeffa\r\nb\rc\n") == "a\nb\nc\n"


def test_index_text_is_title_breadcrumb_and_trimmed_content() -> None:
    assert index_text("Doc", "# A\n## B", "  body \n") == "Doc\n# A\n## B\n\nbody"
    assert index_text("Doc", "", "\nbody\n") == "Doc\nbody"


def test_preview_reports_tier_diagnostics_and_at_most_limit_chunks() -> None:
    md = "\n\n".join(prose(40, f"q{i}w") for i in range(30))
    p = preview(md, cfg(strategy="auto", chunk_size=200), limit=3)
    assert p["total_chunks"] > 3 and len(p["chunks"]) == 3
    assert p["strategy_used"] == "auto" and p["tier"] == "recursive"
    assert p["diagnostics"]["profile"]["total_chars"] == len(md)
    assert p["diagnostics"]["effective_chunk_size"] == 200


def test_preview_with_parent_child_lists_children_with_their_parent_index() -> None:
    md = "\n\n".join(prose(40, f"v{i}w") + "." for i in range(60))
    p = preview(md, cfg(enable_parent_child=True), limit=1000)
    r = split_parent_child(md, cfg())
    assert p["total_chunks"] == len(r.children) and p["total_parents"] == len(r.parents)
    assert [c["parent_index"] for c in p["chunks"]] == [c.parent_index for c in r.children]
    assert p["diagnostics"]["effective_chunk_size"] == 384


def test_empty_text_gives_no_chunks() -> None:
    assert split("", cfg()) == []
    assert split_parent_child("", cfg()).parents == []


# ---------------------------------------------------------------- parent-child


def sentences(i: int) -> str:
    return "\n".join(f"Line {j} of part {i} says something. More words here." for j in range(6))


def test_parent_child_uses_4096_parents_and_384_children_with_child_overlap_a_fifth() -> None:
    md = "\n\n".join(sentences(i) for i in range(80))
    r = split_parent_child(md, cfg(enable_parent_child=True))
    assert r.parents and r.children
    assert max(len(p.content) for p in r.parents) <= 4096
    assert max(len(c.piece.content) for c in r.children) <= 384
    for c in r.children:
        p = r.parents[c.parent_index]
        assert p.start <= c.piece.start and c.piece.end <= p.end
    kids = [c.piece for c in r.children]
    overlaps = [a.end - b.start for a, b in itertools.pairwise(kids) if b.start < a.end]
    assert overlaps and max(overlaps) <= 384 // 5
    assert [c.piece.seq for c in r.children] == list(range(len(r.children)))


def test_token_limit_only_caps_children() -> None:
    md = "\n\n".join(sentences(i) for i in range(80))
    r = split_parent_child(md, cfg(token_limit=50, language="en"))  # children capped at 180 runes
    assert max(len(c.piece.content) for c in r.children) <= 180
    assert max(len(p.content) for p in r.parents) > 180


def test_parent_with_a_single_identical_child_is_dropped() -> None:
    md = "Short document."
    r = split_parent_child(md, cfg())
    assert r.parents == []
    assert [(c.parent_index, c.piece.content) for c in r.children] == [(-1, md)]


def test_child_breadcrumb_is_parent_plus_child_minus_the_duplicated_line() -> None:
    body = "\n\n".join(f"### Sub {j}\n\n{prose(40, f'k{j}w')}" for j in range(4))
    md = "# Root\n\n" + "\n\n".join(f"## Part {i}\n\n{body}" for i in range(3))
    conf = cfg(strategy="heading", parent_chunk_size=1500, child_chunk_size=300)
    r = split_parent_child(md, conf)
    crumbs = {c.piece.context_header for c in r.children}
    assert any(x.startswith("# Root\n## Part 1\n### Sub") for x in crumbs)
    assert not any("## Part 1\n## Part 1" in x for x in crumbs)


def test_child_breadcrumb_is_the_flat_modes_path_without_sibling_headings() -> None:
    """A child under `### Configure` in a parent that starts under its sibling `### Install` has the path
    `# Manual / ## Setup / ### Configure`, as in flat mode, not both siblings."""

    def para(topic: str) -> str:
        return " ".join([f"Details about {topic}."] * 12) + "\n\n"

    md = "# Manual\n\n" + "".join(f"## {s}\n\n" + para(s) for s in ("Overview", "Usage", "Support"))
    md += "## Setup\n\n### Install\n\n" + para("install") * 12 + "### Configure\n\n" + para("configure") * 6
    r = split_parent_child(
        md, cfg(enable_parent_child=True, strategy="heading", parent_chunk_size=2048, child_chunk_size=384)
    )
    flat = split(md, cfg(strategy="heading", chunk_size=384))
    configure = md.index("### Configure")
    in_configure = [c.piece for c in r.children if c.piece.start >= configure]
    # The case in question: a parent starting under `### Install` holds the start of `### Configure`.
    assert any(r.parents[c.parent_index].start < configure <= c.piece.start for c in r.children)
    assert {c.context_header for c in in_configure} == {"# Manual\n## Setup\n### Configure"}
    flat_crumbs = {c.start: c.context_header for c in flat}
    for c in r.children:
        if c.piece.start in flat_crumbs:
            assert c.piece.context_header == flat_crumbs[c.piece.start], c.piece.start


def test_config_object_is_not_mutated() -> None:
    c = cfg(chunk_size=100, chunk_overlap=0)
    before = dataclasses.asdict(c)
    split_parent_child("x " * 500, c)
    split("x " * 500, c)
    assert dataclasses.asdict(c) == before


# ---------------------------------------------------------------- words around inline spans (beyond WeKnora)


@pytest.mark.parametrize("size", [48, 64, 80, 120])
@pytest.mark.parametrize("overlap", [0, 20])
def test_an_inline_span_keeps_the_punctuation_and_word_around_it(size: int, overlap: int) -> None:
    """WeKnora makes a protected span its own unit, so a chunk could end at the `(` before a code span or
    the next one start with the `),` after it. The span's unit now reaches to the whitespace on each side (two
    spans joined without a space, `a`/`b`, are still two units)."""
    sentences = [
        "The worker reads (`queue_name`), then writes `row_id`, and stops.",
        "See [the guide](https://example.com/guide); it names `deps.settings`.",
        "Images like ![a chart](img/chart.png), or (`x`), stay whole words.",
    ]
    md = normalise_markdown("\n".join(sentences * 6))
    chunks = split(md, cfg(chunk_size=size, chunk_overlap=overlap))
    check_chunks(md, chunks)
    for chunk in chunks:
        text = chunk.content.strip()
        assert text[:1] not in ",.;:)]", f"a chunk starts with the rest of a word: {text[:30]!r}"
        assert text[-1:] not in "([", f"a chunk ends with the start of a word: {text[-30:]!r}"
