"""The numbers of an HTML ordered list as a reader sees them: `start`, `reversed`, `<li value>`, and the
numbering style (`type="A|a|I|i|1"`, or an inline CSS `list-style-type`, which wins as CSS does).

Markdown's ordered lists are decimal only, so a list numbered A., B. or i., ii. is written as a bullet
list whose items begin with their label (`- A. item`): the label stays in the text, each item stays a
list item (nested lists and multi-line items keep their place under it), and no renderer renumbers it.
A bare `A. item` line would not: consecutive ones merge into one paragraph, and a line after a nested
list would be swallowed by that list's last item."""

from __future__ import annotations

import re
from dataclasses import dataclass

from selectolax.lexbor import LexborNode

_CSS_STYLE = re.compile(r"(?:^|;)\s*list-style(?:-type)?\s*:\s*([^;]*)", re.IGNORECASE)
# CSS counter styles a list item's label can take, by the name the `type` attribute or CSS gives it.
_TYPE_STYLES = {
    "1": "decimal",
    "a": "lower-alpha",
    "A": "upper-alpha",
    "i": "lower-roman",
    "I": "upper-roman",
}
_CSS_STYLES = {
    "decimal": "decimal",
    "lower-alpha": "lower-alpha",
    "lower-latin": "lower-alpha",
    "upper-alpha": "upper-alpha",
    "upper-latin": "upper-alpha",
    "lower-roman": "lower-roman",
    "upper-roman": "upper-roman",
}
_ROMAN = (
    (1000, "m"),
    (900, "cm"),
    (500, "d"),
    (400, "cd"),
    (100, "c"),
    (90, "xc"),
    (50, "l"),
    (40, "xl"),
    (10, "x"),
    (9, "ix"),
    (5, "v"),
    (4, "iv"),
    (1, "i"),
)


@dataclass(frozen=True)
class ListNumbering:
    """How an ordered list counts: its first number, its step (+1, or -1 when reversed) and its style."""

    first: int
    step: int
    style: str

    def number_of(self, item: LexborNode, previous: int) -> int:
        """An `<li>`'s number: its `value` if it has one (the items after count on from it), else the next."""
        value = (item.attributes.get("value") or "").strip()
        return int(value) if re.fullmatch(r"-?\d{1,9}", value) else previous + self.step

    def prefix(self, n: int) -> str:
        """The Markdown an item numbered `n` begins with (its continuation lines are indented as wide)."""
        if self.style == "decimal":
            return f"{n}. "
        return f"- {_label(n, self.style)}. "


def list_numbering(node: LexborNode) -> ListNumbering:
    """The numbering of an `<ol>`: its `start`, else 1 (or, reversed, its item count); its style."""
    step = -1 if "reversed" in node.attributes else 1
    start = (node.attributes.get("start") or "").strip()
    if re.fullmatch(r"\d{1,9}", start):
        first = int(start)
    elif step > 0:
        first = 1
    else:
        first = sum(1 for child in node.iter() if child.tag == "li")
    return ListNumbering(first, step, _style(node))


def _style(node: LexborNode) -> str:
    """The list's counter style: inline CSS first (it overrides the presentational `type`), then `type`."""
    for match in _CSS_STYLE.finditer(node.attributes.get("style") or ""):
        for word in match.group(1).lower().split():
            if word in _CSS_STYLES:
                return _CSS_STYLES[word]
    return _TYPE_STYLES.get((node.attributes.get("type") or "").strip(), "decimal")


def _label(n: int, style: str) -> str:
    """`n` in a counter style; outside the style's range (alpha from 1, roman 1–3999) decimal, as CSS does."""
    if style.endswith("alpha") and n >= 1:
        letters = ""
        while n:
            n, rest = divmod(n - 1, 26)
            letters = chr(ord("a") + rest) + letters
        return letters.upper() if style == "upper-alpha" else letters
    if style.endswith("roman") and 1 <= n <= 3999:
        numeral = ""
        for value, symbol in _ROMAN:
            count, n = divmod(n, value)
            numeral += symbol * count
        return numeral.upper() if style == "upper-roman" else numeral
    return str(n)
