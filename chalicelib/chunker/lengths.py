"""How chunk sizes are measured: runes (default) or tokens.

Token mode avoids tokenising the whole document with the real tokenizer on every call. The text is cut
into "segments" at positions that are pre-token boundaries for BPE tokenizers of the GPT family
(tiktoken gpt2 / cl100k / o200k): just before a space that is followed by a non-space. Token counts
are additive across such boundaries, so a range's count is (prefix sums over whole segments) + (exact counts of the two partial edge segments).
Segment counts are cached per `TokenCounter`, so a word is tokenised once, not once per occurrence.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np

# Segments start at every space that is followed by a non-space (the split drops that space).
_SPACE_BOUNDARY = re.compile(r" (?=\S)")


class TokenCounter:
    """A token-counting function plus its segment cache. Reuse one instance across documents.

    `count` must be additive at the boundaries above (true for tiktoken encodings and for
    whitespace-pre-tokenised tokenizers called without special tokens); pass `additive=False` for
    anything else and every length is then measured exactly (slower).
    """

    def __init__(self, count: Callable[[str], int], *, additive: bool = True, max_bytes_per_token: int = 1):
        self.count = count
        self.additive = additive
        # Byte-level BPE never emits more tokens than UTF-8 bytes; 0 disables the shortcut.
        self.max_bytes_per_token = max_bytes_per_token
        self.cache: dict[str, int] = {}
        # word -> count(" " + word): the segments of TokenMeasure, keyed without their leading space.
        self.spaced: dict[str, int] = {}
        # Optional bulk path: text -> token ids, plus a table id -> UTF-8 byte length.
        self._bulk: Callable[[str], Any] | None = None
        self._tok_bytes: Any = None

    @classmethod
    def from_encoding(cls, encoding: Any) -> TokenCounter:
        """Wrap a tiktoken `Encoding`. New segments are then counted in one bulk encode per document."""
        enc = encoding.encode_ordinary
        counter = cls(lambda s: len(enc(s)))
        ranks = getattr(encoding, "_mergeable_ranks", None)
        core = getattr(encoding, "_core_bpe", None)
        if isinstance(ranks, dict) and core is not None and hasattr(core, "encode_to_tiktoken_buffer"):
            table = np.zeros(max(encoding.n_vocab, len(ranks)) + 1, dtype=np.int64)
            ids = np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))
            table[ids] = np.fromiter(map(len, ranks.keys()), dtype=np.int64, count=len(ranks))
            empty: set[str] = set()
            counter._bulk = lambda s: np.frombuffer(core.encode_to_tiktoken_buffer(s, empty), dtype=np.uint32)
            counter._tok_bytes = table
        return counter

    def count_new(self, words: list[str]) -> None:
        """Fill `spaced` for words not seen before (distinct)."""
        spaced = self.spaced
        if self._bulk is None or len(words) < 8:
            count = self.count
            spaced.update(zip(words, (count(" " + w) for w in words), strict=True))
            return
        # One encode over " w1 w2 w3 ...": a space followed by a non-space always starts a pre-token, so
        # token ends line up with every word edge and each word's count is read off the token byte
        # lengths. Any misaligned word (not expected) is encoded on its own.
        joined = " " + " ".join(words)
        tok_ends = np.cumsum(self._tok_bytes[self._bulk(joined)])
        if joined.isascii():
            lens = np.fromiter(map(len, words), dtype=np.int64, count=len(words))
        else:
            lens = np.fromiter(map(len, map(str.encode, words)), dtype=np.int64, count=len(words))
        ends = np.cumsum(lens + 1)
        idx = np.searchsorted(tok_ends, ends, side="right")
        aligned = idx > 0
        aligned[aligned] = tok_ends[idx[aligned] - 1] == ends[aligned]
        ok = aligned.copy()
        ok[1:] &= aligned[:-1]
        counts = np.diff(idx, prepend=0)
        if ok.all():
            spaced.update(zip(words, counts.tolist(), strict=True))
            return
        count = self.count
        for i, (w, c) in enumerate(zip(words, counts.tolist(), strict=True)):
            spaced[w] = c if ok[i] else count(" " + w)

    def __call__(self, s: str) -> int:
        n = self.cache.get(s)
        if n is None:
            n = self.cache[s] = self.count(s)
        return n


class CharMeasure:
    """Sizes in runes (code points); every operation is arithmetic or one bisect."""

    token_mode = False

    def __init__(self, text: str):
        self.text = text

    def length(self, a: int, b: int) -> int:
        return b - a

    def text_len(self, s: str) -> int:
        return len(s)

    def fits(self, a: int, b: int, budget: int) -> bool:
        return b - a <= budget

    def last_fitting(self, p: int, budget: int, ends: list[int], lo: int, hi: int) -> int:
        """Largest k in [lo, hi) with length(p, ends[k]) <= budget, else lo - 1."""
        return bisect_right(ends, p + budget, lo, hi) - 1

    def window_start(self, p: int, end: int, budget: int) -> int:
        """Smallest w >= p with length(w, end) <= budget."""
        return max(p, end - budget)


class TokenMeasure:
    """Sizes in tokens of `counter`, over one immutable text."""

    token_mode = True

    def __init__(self, text: str, counter: TokenCounter):
        self.text = text
        self.counter = counter
        self._cnt = counter
        self._bytes_per_rune = 1 if text.isascii() else 4
        if not (counter.additive and text):
            self.starts = [0, len(text)]
            self.cum = [0, 0]
            return
        words = _SPACE_BOUNDARY.split(text)
        spaced = counter.spaced
        new = set(words).difference(spaced)
        if new:
            counter.count_new(list(new))
        # Segment 0 is the text before the first boundary; segment i >= 1 is " " + words[i]. numpy builds
        # the two prefix-sum lists several times faster than itertools on 10^5 words.
        n = len(words)
        starts = np.empty(n + 1, dtype=np.int64)
        starts[0] = 0
        np.cumsum(np.fromiter(map(len, words), dtype=np.int64, count=n) + 1, out=starts[1:])
        starts[1:] -= 1
        self.starts = starts.tolist()
        counts = np.fromiter(map(spaced.__getitem__, words), dtype=np.int64, count=n)
        counts[0] = counter(words[0])  # words[0] has no leading space in the text
        cum = np.empty(n + 1, dtype=np.int64)
        cum[0] = 0
        np.cumsum(counts, out=cum[1:])
        self.cum = cum.tolist()

    def length(self, a: int, b: int) -> int:
        if a >= b:
            return 0
        text = self.text
        if not self.counter.additive:
            return self._cnt(text[a:b])
        starts = self.starts
        i = bisect_left(starts, a)
        j = bisect_right(starts, b) - 1
        if i > j:
            return self._cnt(text[a:b])
        total = self.cum[j] - self.cum[i]
        si, sj = starts[i], starts[j]
        if a < si:
            total += self._cnt(text[a:si])
        if b > sj:
            total += self._cnt(text[sj:b])
        return total

    def text_len(self, s: str) -> int:
        return self._cnt(s) if s else 0

    def fits(self, a: int, b: int, budget: int) -> bool:
        # Cheap exit: every token covers >= 1 byte, and a rune is 1 byte in ASCII text, <= 4 otherwise.
        if self.counter.max_bytes_per_token and (b - a) * self._bytes_per_rune <= budget:
            return True
        return self.length(a, b) <= budget

    def _approx_pos(self, p: int, tokens: int) -> int:
        """Char offset roughly `tokens` tokens after p (from the segment prefix sums)."""
        starts, cum = self.starts, self.cum
        i = bisect_right(starts, p) - 1
        target = cum[i] + tokens
        j = bisect_right(cum, target) - 1
        return starts[min(j, len(starts) - 1)]

    def last_fitting(self, p: int, budget: int, ends: list[int], lo: int, hi: int) -> int:
        if lo >= hi:
            return lo - 1
        length = self.length
        if self.counter.additive:
            k = bisect_right(ends, self._approx_pos(p, budget), lo, hi) - 1
            k = max(lo, min(k, hi - 1))
        else:
            k = lo
        if length(p, ends[k]) <= budget:
            # Gallop up, then binary search between the last fit and the first miss.
            step = 1
            good, bad = k, hi
            while good + step < hi:
                if length(p, ends[good + step]) <= budget:
                    good += step
                    step *= 2
                else:
                    bad = good + step
                    break
        else:
            step = 1
            good, bad = lo - 1, k
            while bad - step >= lo:
                if length(p, ends[bad - step]) <= budget:
                    good = bad - step
                    break
                bad -= step
                step *= 2
        while bad - good > 1:
            mid = (good + bad) // 2
            if length(p, ends[mid]) <= budget:
                good = mid
            else:
                bad = mid
        return good

    def window_start(self, p: int, end: int, budget: int) -> int:
        if budget <= 0 or p >= end:
            return end
        if self.counter.additive:
            # Whole segments back from `end` (exact: boundaries are additive), snapped to a segment start.
            starts, cum = self.starts, self.cum
            j = bisect_right(starts, end) - 1
            tail = self._cnt(self.text[starts[j] : end]) if end > starts[j] else 0
            if tail > budget:
                return end
            i = bisect_left(cum, cum[j] + tail - budget, 0, j + 1)
            return max(p, starts[i])
        length = self.length
        if length(p, end) <= budget:
            return p
        lo, hi = p, end  # length(lo, end) > budget >= length(hi, end)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if length(mid, end) <= budget:
                hi = mid
            else:
                lo = mid
        return hi


Measure = CharMeasure | TokenMeasure


def token_measure(text: str, counter: TokenCounter) -> TokenMeasure:
    return TokenMeasure(text, counter)
