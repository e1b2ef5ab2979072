"""A vision model's OCR or caption reply as it is indexed (spec §1.11: fences stripped, HTML→Markdown): the
text of an image of code or formulas keeps its `<` and `>`, line-break tags become line breaks and an HTML
table becomes a Markdown table, not its cells run together."""

from __future__ import annotations

import pytest

from chalicelib.enrich.images import clean


@pytest.mark.parametrize(
    "text",
    [
        "for (i = 0; i<n; i++) if (a[i] > 0) s++;",
        "x < 10 and y > 5",
        "List<String> names = new ArrayList<>();",
        "See <https://example.com/manual> for details",
    ],
)
def test_text_with_angle_brackets_is_kept_whole(text: str) -> None:
    assert clean(text) == text


def test_line_break_tags_become_line_breaks_and_other_tags_go() -> None:
    assert clean("<p>Line <b>one</b><br>Line two</p>") == "Line one\nLine two"


def test_an_html_table_becomes_a_markdown_table() -> None:
    reply = "Prices:\n<table><tr><th>Item</th><th>Cost</th></tr><tr><td>Tea</td><td>3</td></tr></table>"
    assert clean(reply) == "Prices:\n\n| Item | Cost |\n|---|---|\n| Tea | 3 |"


def test_fences_and_the_no_text_answer_as_before() -> None:
    assert clean("```markdown\n# Title\n\nbody\n```") == "# Title\n\nbody"
    assert clean("NO_TEXT") == ""
