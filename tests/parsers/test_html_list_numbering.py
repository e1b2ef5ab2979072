"""An HTML ordered list keeps the labels a reader sees: letters and roman numerals (`type`, or inline CSS
`list-style-type`) stay in the text, as items of a Markdown list, with `start`, `reversed` and `<li value>`."""

from __future__ import annotations

from markdown_it import MarkdownIt

from chalicelib.parsers.html import html_to_markdown


def _md(html: str) -> str:
    return html_to_markdown(html).markdown


def test_type_letters_and_roman_numerals_are_the_item_labels(read) -> None:
    page = b"<html><body><ol type='A'><li>Antrag</li><li>Anlage</li><li>Frist</li></ol></body></html>"
    assert "- A. Antrag\n- B. Anlage\n- C. Frist" in read("forms.html", data=page).markdown
    assert "- a. x\n- b. y" in _md("<ol type=a><li>x</li><li>y</li></ol>")
    assert "- I. x\n- II. y\n- III. z\n- IV. w" in _md("<ol type=I>" + "<li>x<li>y<li>z<li>w" + "</ol>")
    assert "- i. x\n- ii. y" in _md("<ol type='i'><li>x</li><li>y</li></ol>")
    assert "1. x\n2. y" in _md("<ol type='1'><li>x</li><li>y</li></ol>")


def test_start_reversed_and_value_count_in_the_style() -> None:
    assert "- iii. x\n- iv. y" in _md("<ol type=i start=3><li>x</li><li>y</li></ol>")
    assert "- B. x\n- A. y" in _md("<ol type=A reversed><li>x</li><li>y</li></ol>")
    assert "- z. x\n- aa. y" in _md("<ol type=a start=26><li>x</li><li>y</li></ol>")
    assert "7. x\n8. y" in _md("<ol><li value=7>x</li><li>y</li></ol>")
    # Outside the style's range (alpha from 1, roman up to 3999) the number is decimal, as in a browser.
    assert "- 0. x" in _md("<ol type=a start=0><li>x</li></ol>")
    assert "- 4000. x" in _md("<ol type=I start=4000><li>x</li></ol>")


def test_inline_css_list_style_type_wins_over_type() -> None:
    assert "- I. x\n- II. y" in _md("<ol style='list-style-type: upper-roman'><li>x</li><li>y</li></ol>")
    assert "- a. x" in _md("<ol type=I style='color:red; list-style: lower-alpha inside'><li>x</li></ol>")
    assert "- C. x" in _md("<ol start=3 style='LIST-STYLE-TYPE:upper-latin'><li>x</li></ol>")


def test_lettered_items_stay_list_items_with_their_nested_lists() -> None:
    md = _md("<ol type=a><li>one<ul><li>sub</li></ul></li><li>two</li></ol>")
    assert md.strip() == "- a. one\n\n  - sub\n- b. two"
    tokens = MarkdownIt("commonmark").parse(md)
    items = [t.level for t in tokens if t.type == "list_item_open"]
    assert items == [1, 3, 1]  # a., its nested bullet, b.: the line after the nested list is not swallowed
