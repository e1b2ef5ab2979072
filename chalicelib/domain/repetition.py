"""When two texts say the same thing: a short document's summary that only repeats its body, or two child
chunks that return one parent's text. Search collapses such hits into one, and the summary stage stores such a
summary switched off instead of indexing it twice.

Texts are compared on their words in order, case folded, with headings (a summary's `# Summary`) and markup
left out: one must hold the other, and the shorter must be at least NEAR_DUPLICATE of the longer. Texts that
differ in a word are never duplicates (a template's rows, `island 1` and `island 2`, are different facts).
"""

from __future__ import annotations

import re

#: the shorter text's share of the longer at which one that holds the other repeats it
NEAR_DUPLICATE = 0.8

_HEADING = re.compile(r"^\s{0,3}#{1,6}\s.*$", re.MULTILINE)
_WORD = re.compile(r"\w+")


def words_of(text: str) -> str:
    """The words of a text in order, case folded, headings and markup left out."""
    return " ".join(_WORD.findall(_HEADING.sub(" ", text).casefold()))


def near_duplicates(a: str, b: str) -> bool:
    """Whether two texts' `words_of` repeat each other (see the module's docstring)."""
    short, long = sorted((a, b), key=len)
    if not long:
        return True
    return len(short) >= NEAR_DUPLICATE * len(long) and f" {short} " in f" {long} "  # whole words
