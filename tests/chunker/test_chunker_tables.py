"""Table chunks carry as many rows as fit with the header once (issue 12)."""

from __future__ import annotations

import pytest
from chunker_helpers import check_chunks
from order_export import orders_csv
from test_chunker_properties import word_tokens

from chalicelib.chunker import ChunkingConfig, TokenCounter, split, split_parent_child

HEADER = "| id | package | version |\n|---|---|---|\n"


def table(rows: int) -> str:
    """A CSV-like pipe table as our CSV parser renders it (short rows)."""
    return HEADER + "".join(f"| {i} | pkg-{i % 997} | 1.{i % 13}-{i % 7} |\n" for i in range(rows))


def _rows(text: str) -> int:
    return sum(1 for line in text.split("\n") if line.startswith("| ") and "---" not in line) - (
        1 if text.startswith(HEADER) else 0
    )


@pytest.mark.parametrize("size", [120, 512, 2000])
def test_short_rows_pack_as_many_as_fit_with_the_header_once_per_chunk(size: int) -> None:
    md = "Packages:\n\n" + table(3000)
    chunks = split(md, ChunkingConfig(chunk_size=size, chunk_overlap=0))
    check_chunks(md, chunks, overlap=0)
    head = HEADER.split("\n")[0]
    for i, c in enumerate(chunks):
        assert len(c.content) <= size
        if i:
            assert c.content.startswith(HEADER) and c.header_prefix_len == len(HEADER)
            assert c.content.count(head) == 1
            assert c.content[c.header_prefix_len :] == md[c.start : c.end]
        if i + 1 < len(chunks):  # full: the next row would not have fitted
            nxt = md[c.end : md.index("\n", c.end) + 1]
            assert len(c.content) + len(nxt) > size
    per_chunk = 3000 / (len(chunks) - 1)
    row = len(table(3000)) / 3000
    assert per_chunk >= (size - len(HEADER)) / row - 2


def test_a_60000_row_table_becomes_few_full_chunks_with_overlap() -> None:
    md = table(60_000)
    chunks = split(md, ChunkingConfig(chunk_size=512, chunk_overlap=80))
    assert all(len(c.content) <= 512 for c in chunks)
    assert all(c.content.startswith(HEADER) for c in chunks)
    row = len(md) / 60_000
    ideal = 60_000 / ((512 - len(HEADER) - 80) / row)  # header once, overlap at most 80
    assert len(chunks) <= ideal, (len(chunks), ideal)
    # Full chunks: with the header counted twice no chunk could pass 512 - 41 runes.
    assert sum(len(c.content) for c in chunks) / len(chunks) >= 0.94 * 512
    for c in chunks[:: max(1, len(chunks) // 200)]:
        assert c.content[c.header_prefix_len :] == md[c.start : c.end]
    covered = sum(_rows(md[c.start : c.end]) for c in chunks)
    assert covered >= 60_000


def test_token_mode_tables_fit_the_token_budget_with_the_header_once() -> None:
    md = table(2000)
    chunks = split(
        md, ChunkingConfig(chunk_size=150, chunk_overlap=20), length_function=TokenCounter(word_tokens)
    )
    check_chunks(md, chunks)
    assert all(word_tokens(c.content) <= 150 for c in chunks)
    assert all(c.content.count("| id | package | version |") == 1 for c in chunks)
    assert len(chunks) < 2000 / 5


def test_a_60000_row_csv_as_parsed_packs_full_chunks_with_the_header_once() -> None:
    """Issue 12: the 3 MB, 60,000-row CSV made 50,383 one-row chunks (over the 50,000 cap); LangChain made
    about 10,000 (it repeats no header). With the header once a chunk holds floor((size - header) / row)
    rows, so the count is within the header's share of LangChain's."""
    from chalicelib.chunker import normalise_markdown
    from chalicelib.parsers.simple import csv_to_markdown
    from chalicelib.stages.chunking import MAX_CHUNKS_PER_DOCUMENT

    data = orders_csv(60_000)
    assert 2.9e6 < len(data) < 3.5e6
    md = normalise_markdown(csv_to_markdown(data, 10**9))
    chunks = split(md, ChunkingConfig(chunk_size=512, chunk_overlap=80))
    header = md[: md.index("\n", md.index("\n") + 1) + 1]
    body_rows = md[len(header) :].splitlines()
    row = max(len(r) + 1 for r in body_rows)
    per_chunk = (512 - len(header)) // row
    assert per_chunk >= 4
    assert len(chunks) <= 60_000 / per_chunk + 1, (len(chunks), per_chunk)
    assert len(chunks) < MAX_CHUNKS_PER_DOCUMENT / 3  # the cap stays a safety net far away
    # A header-less splitter (LangChain) fills size - overlap with new rows; here size - header, in whole rows.
    assert len(chunks) <= 1.2 * len(md) / (512 - len(header))
    assert all(len(c.content) <= 512 and c.content.startswith(header) for c in chunks)
    assert all(c.content.count(header) == 1 for c in chunks)
    seen = {line for c in chunks for line in c.content[len(header) :].splitlines()}
    assert seen == set(body_rows)  # every row in some chunk, with the header


def test_rows_of_a_table_never_take_an_earlier_tables_header() -> None:
    """A header-only table (its blank line ends it), then a table with the same column count: its rows are
    repeated under their own header, never the first table's."""
    customers = "| Customer | Balance |\n|---|---|\n"
    rows = "".join(f"| customer {i:03d} | {i * 37 % 1000} EUR |\n" for i in range(40))
    for between in ("", "Closed issues:\n\n"):
        md = "Open issues:\n\n| Issue | Owner |\n|---|---|\n\n" + between + customers + rows
        chunks = split(md, ChunkingConfig(chunk_size=200, chunk_overlap=0))
        check_chunks(md, chunks, overlap=0)
        repeated = [c.content[: c.header_prefix_len] for c in chunks if c.header_prefix_len]
        assert repeated and set(repeated) == {customers}, between
        assert all("customer" not in c.content or "| Customer |" in c.content for c in chunks)


def test_a_header_separator_inside_a_table_starts_a_new_table() -> None:
    second = "| Name | Team |\n|---|---|\n"
    md = "| id | package |\n|---|---|\n" + "".join(f"| {i} | pkg-{i} |\n" for i in range(30))
    md += second + "".join(f"| person {i} | team {i % 3} |\n" for i in range(30))
    chunks = split(md, ChunkingConfig(chunk_size=120, chunk_overlap=0))
    check_chunks(md, chunks, overlap=0)
    for c in chunks:
        if "person" in c.content:
            assert c.content.startswith(second), c.content
        else:
            assert c.content.startswith("| id | package |"), c.content


def test_parent_child_children_of_every_parent_of_a_long_table_repeat_its_header() -> None:
    """WeKnora splits a parent's content, which starts with the repeated header: so every child does too."""
    head = "| Product | Region | Price |\n|---|---|---|\n"
    md = (
        "Price list:\n\n"
        + head
        + "".join(f"| product {i:04d} | region {i % 7} | {i * 13 % 997}.00 |\n" for i in range(600))
    )
    for strategy in ("recursive", "auto"):
        res = split_parent_child(md, ChunkingConfig(enable_parent_child=True, strategy=strategy))
        assert len(res.parents) > 3
        for c in res.children:
            piece = c.piece
            assert piece.content.count("| Product |") == 1, (strategy, piece)
            assert piece.content[piece.header_prefix_len :] == md[piece.start : piece.end]
            assert len(piece.content) <= 384
            parent = res.parents[c.parent_index]
            assert parent.start <= piece.start and piece.end <= parent.end
        later = [c.piece for c in res.children if c.parent_index > 0]
        assert later and all(p.content.startswith(head) and p.header_prefix_len == len(head) for p in later)
