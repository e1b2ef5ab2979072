"""Normalisation and the content hash of an FAQ entry (WeKnora's `T/faq.go`).

Two spellings of one question hash equal when they differ only by surrounding blanks, URLs, case, edge
punctuation, traditional vs simplified characters, full vs half width, or spaces between CJK characters.
A `+` or `#` ending a word is part of it, not edge punctuation: "What is C++?" and "What is C?" are two
questions (C#, F#, A+, x++ too). Rule 1 (`keep_word_marks=False`) stripped them; reservation keys stored
before rule 2 were made with it (chalicelib/faq/reservations.py).
Traditional → simplified is OpenCC's `t2s` table (a maintained dictionary, not a hand-written one), the
one implementation in `chalicelib.domain.text_fold` that the keyword index uses too.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable

from chalicelib.domain.text_fold import to_simplified

URL = re.compile(r"(?:https?|ftp)://\S+|www\.[^\s/]+\.\S+", re.IGNORECASE)
#: CJK ideographs, kana, hangul and CJK punctuation: spaces between two of these are dropped
_CJK = (
    "\u2e80-\u2eff\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
)
CJK_SPACE = re.compile(rf"(?<=[{_CJK}])\s+(?=[{_CJK}])")
SPACES = re.compile(r"\s+")
#: marks that belong to the word they end (C++, C#, F#, A+)
WORD_MARKS = frozenset("+#")


def _edge_punctuation(char: str) -> bool:
    return char.isspace() or unicodedata.category(char)[0] in ("P", "S")


def _ends_a_word(value: str, start: int, end: int) -> bool:
    """Whether value[start:end] ends with a run of WORD_MARKS right after a letter or digit."""
    marks = end
    while marks > start and value[marks - 1] in WORD_MARKS:
        marks -= 1
    return start < marks < end and value[marks - 1].isalnum()


def normalise(text: str, *, keep_word_marks: bool = True) -> str:
    """trim → full→half width (NFKC) → traditional→simplified → strip URLs → lowercase → strip edge
    punctuation (a `+`/`#` run ending a word stays, unless `keep_word_marks` is False: rule 1) → drop
    spaces between CJK characters (other runs of blanks become one space)."""
    value = unicodedata.normalize("NFKC", text or "").strip()
    value = to_simplified(value)
    value = URL.sub(" ", value)
    value = value.lower()
    start, end = 0, len(value)
    while start < end and _edge_punctuation(value[start]):
        start += 1
    while end > start and _edge_punctuation(value[end - 1]):
        if keep_word_marks and _ends_a_word(value, start, end):
            break
        end -= 1
    value = value[start:end]
    value = CJK_SPACE.sub("", value)
    return SPACES.sub(" ", value).strip()


def _sorted(values: Iterable[str]) -> list[str]:
    return sorted(n for n in (normalise(v) for v in values) if n)


def content_hash(
    question: str, similar: Iterable[str], negatives: Iterable[str], answers: Iterable[str]
) -> str:
    """SHA-256 over the normalised question, sorted similar questions, sorted negatives, sorted answers."""
    parts = [
        normalise(question),
        "\x1e".join(_sorted(similar)),
        "\x1e".join(_sorted(negatives)),
        "\x1e".join(_sorted(answers)),
    ]
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
