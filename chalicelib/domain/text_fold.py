"""Text folding shared by everything that compares text across spellings: the keyword index of both
retrieval engines (documents and queries alike) and the FAQ content hash.

`fold` maps spellings that a reader takes for the same text onto one form:
- NFKC: full-width Latin letters, digits and punctuation to half width, half-width Katakana to full
  width, compatibility forms (ligatures, circled and parenthesised numbers, CJK compatibility
  ideographs) to their plain forms;
- traditional → simplified Chinese with OpenCC's `t2s` dictionary (a maintained table, phrases
  included), only on text that holds a Han character;
- lowercase.

It is deliberately not a tokenizer: splitting into words and CJK bigrams stays with each engine's
analysis (`adapters/index/embedded.index_terms`, the OpenSearch analyzer), which both see folded text.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Any

# Basic Latin letters, Latin-1 and Latin Extended-A/B, Latin Extended Additional
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f\u1e00-\u1eff]")

# CJK unified ideographs (+ extension A) and compatibility ideographs: the only text t2s can change.
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@functools.lru_cache(maxsize=1)
def _t2s() -> Any:
    import opencc  # the OpenCC wheel; its converter is built once per process

    return opencc.OpenCC("t2s")


def to_simplified(text: str) -> str:
    """Traditional Chinese characters and phrases to simplified (OpenCC t2s); other text unchanged."""
    return str(_t2s().convert(text)) if text and _HAN.search(text) else text


def fold(text: str) -> str:
    """NFKC → traditional→simplified → lowercase (see the module docstring)."""
    return to_simplified(unicodedata.normalize("NFKC", text or "")).lower()


def latin_share(text: str) -> float:
    """The share of the text's letters that are Latin (1.0 for text without letters)."""
    letters = sum(1 for c in text if c.isalpha())
    return len(_LATIN.findall(text)) / letters if letters else 1.0
