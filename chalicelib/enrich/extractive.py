"""The offline default summariser: an extractive centroid ranking, no model download needed.

A generative ChatModel replaces it when the knowledge base configures one; this keeps summaries
working locally and in CI (the local-engines reference found no reliable small offline LLM).
"""

from __future__ import annotations

import math
import re
from collections import Counter

_SENTENCE = re.compile(r"(?<=[.!?。？！])\s+|\n{2,}")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_MARKUP = re.compile(r"^\s*(#+|[-*+>]|\d+[.)]|\|)\s*", re.MULTILINE)


def summarize(text: str, max_sentences: int = 5, max_chars: int = 1200) -> str:
    sentences = [s.strip() for s in _SENTENCE.split(_MARKUP.sub("", text)) if len(s.strip()) > 20]
    if not sentences:
        return text.strip()[:max_chars]
    words = [[w.lower() for w in _WORD.findall(s)] for s in sentences]
    document = Counter(w for ws in words for w in ws)
    # inverse sentence frequency keeps boilerplate words from dominating
    df = Counter(w for ws in words for w in set(ws))
    n = len(sentences)

    def score(index: int) -> float:
        ws = words[index]
        if not ws:
            return 0.0
        weight = sum(document[w] * math.log(1 + n / df[w]) for w in set(ws))
        return weight / math.sqrt(len(ws)) + (0.1 if index == 0 else 0.0)

    ranked = sorted(range(n), key=score, reverse=True)[:max_sentences]
    summary = " ".join(sentences[i] for i in sorted(ranked))
    return summary[:max_chars]
