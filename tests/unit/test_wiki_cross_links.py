"""The wiki's cross-links find, in one pass over each page, the same links as pairing every page with every
title did: a page links to every other page whose title (over two characters) its body contains,
casefolded, overlapping and nested titles included, in page order."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from chalicelib.enrich.wiki import MAX_TITLE_CHARS, cross_links


def every_pair(titles: Sequence[str], contents: Sequence[str]) -> list[list[int]]:
    """The definition: each page against each title."""
    folded = [t.casefold() for t in titles]
    return [
        [j for j, title in enumerate(folded) if j != i and len(title) > 2 and title in content.casefold()]
        for i, content in enumerate(contents)
    ]


def test_nested_overlapping_repeated_and_casefolded_titles_are_all_found() -> None:
    titles = ["Lamp", "Lamp oil", "oil store", "Straße", "lamp", "ab", "a.*b", "(x|y)"]
    contents = [
        "Fill the LAMP OIL STORE first.",  # nested (lamp, lamp oil) and overlapping (lamp oil, oil store)
        "the lamp",  # its own title: no link to itself, but to the other page titled the same
        "STRASSE and a.*b",  # casefolded (ß is ss), regex characters taken as they are
        "(x|y) ab",  # a title of two characters links nothing
        "",
        "lamp",
        "a.*b",
        "x or y",
    ]
    assert cross_links(titles, contents) == every_pair(titles, contents)
    assert cross_links(titles, contents)[0] == [1, 2, 4]


def test_titles_as_long_as_a_title_may_be_and_prefixes_of_each_other() -> None:
    titles = ["a" * n for n in range(1, MAX_TITLE_CHARS + 1)] + ["a" * n + "b" for n in range(2, 100)]
    contents = ["a" * 150 + "b", "a" * MAX_TITLE_CHARS, *[""] * (len(titles) - 2)]
    assert cross_links(titles, contents) == every_pair(titles, contents)


def test_no_titles_or_no_pages() -> None:
    assert cross_links([], []) == []
    assert cross_links(["ab", ""], ["ab", "ab"]) == [[], []]


letters = st.sampled_from(list("abAB sSß.*(|İi\nΣσς"))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(letters, max_size=6), st.text(letters, max_size=30), st.integers(0, 7)),
        max_size=8,
    )
)
def test_the_links_are_those_of_every_pair(pages: list[tuple[str, str, int]]) -> None:
    titles = [title for title, _, _ in pages]
    # some bodies quote another page's title, so links are found as well as missed
    contents = [body + (titles[k % len(titles)] if k % 2 else "") for _, body, k in pages]
    assert cross_links(titles, contents) == every_pair(titles, contents)
