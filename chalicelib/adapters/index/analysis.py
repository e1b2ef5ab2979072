"""Text analysis both retrieval engines share: how a text becomes BM25 terms and how a query is sent.

Tokenisation (why not the FTS5 trigram tokenizer): Korean words are mostly two or three syllables
with particles glued on (`국민은`, `국회의`), and trigram cannot match a query term shorter than three
characters (`국회`, `헌법`), and it ranks English by sub-word fragments. Instead each text is
pre-tokenised here as the OpenSearch index's analysis does (`pattern_replace` char filters, Lucene's
`standard` tokenizer, `cjk_bigram`): `text_fold.fold` (NFKC width folding, traditional → simplified
Chinese, lowercase), a word's trailing `++` or `#` kept as letters (`WORD_SUFFIXES`: `c++` is `cplusplus`,
`c#` is `csharp`, so `C++`, `C#` and `C` are three words; a char filter each there), words whole (letters
and digits with their combining marks) and split at the characters Lucene would keep inside a word
(`WORD_JOINERS`: `node.js`, `parse_config`, `3.14`, `don't` are two words each, so `config` finds
`parse_config`; the char filter turns them into spaces there), runs of Hangul/Han/Kana as overlapping
bigrams (a lone CJK character stays a unigram; the ideographs and kana are those `cjk_bigram` pairs, the
supplementary planes' included). A document's CJK runs also give their single characters
(`document_terms`, like `cjk_bigram` with `output_unigrams` on the index side of OpenSearch), so a
one-character word of a query (Chinese 心, 弟, 人) finds the runs it sits in; a query keeps bigrams alone,
so it stays as precise as before.

The embedded engine stores `document_terms` and matches `query_terms`; OpenSearch is sent
`bounded_query_text` and `proximity_pairs`, spelled as the user wrote them, so an index created under an
older analysis reads them as it read its documents.
"""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass

from chalicelib.domain.text_fold import fold

_MAX_QUERY_TERMS = 128

# Hangul Jamo, Kana, 〇 and the Hangzhou numerals, the vertical kana repeat marks, Hangul compatibility Jamo,
# Katakana phonetic extensions, CJK ext A, CJK unified, Hangul ext A/B, syllables, compatibility ideographs,
# half-width Katakana, the kana supplements, and the supplementary ideographic planes (ext B to H and the
# compatibility supplement, U+20000-U+3FFFF). Lucene's standard tokenizer + cjk_bigram pairs each of these
# with its neighbour: a character left out here was one Python word of any length, which OpenSearch's
# analyzer cut into a bigram per pair (1,200 ext B characters: 1,199 clauses).
_CJK = (
    "\u1100-\u11ff\u3007\u3021-\u3029\u3031-\u3035\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\ua960-\ua97f\uac00-\ud7af\ud7b0-\ud7ff\uf900-\ufaff\uff66-\uff9f"
    "\U0001b000-\U0001b16f\U00020000-\U0003ffff"
)
_CJK_RUN_RE = re.compile(rf"[{_CJK}]+")
#: what Lucene's standard tokenizer keeps inside one token between two words (UAX #29 MidLetter, MidNumLet,
#: MidNum, Single_Quote, Double_Quote (between Hebrew letters), ExtendNumLet): both engines split words at
#: them (here they are not word characters; the OpenSearch index's char filter makes each a space)
WORD_JOINERS = (
    ":\u00b7\u0387\u055f\u05f4\u2027\ufe13\ufe55\uff1a"  # MidLetter
    ".\u2018\u2019\u2024\ufe52\uff07\uff0e"  # MidNumLet
    ",;\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b"  # MidNum
    "'\""  # Single_Quote, Double_Quote
    "_\u202f\u203f\u2040\u2054\ufe33\ufe34\ufe4d\ufe4e\ufe4f\uff3f"  # ExtendNumLet
)
#: a word's trailing `++` or `#` (`c++`, `c#`, `f#`, `x++`; not `#tag`, `issue#12`, `a+b`, `1+1`) stays part of it:
#: both engines rewrite each pattern to its letters, in this order, before splitting words (`_rewritten` here,
#: a `pattern_replace` char filter each on OpenSearch). `\b`/`\B` are word boundaries on ASCII letters, digits
#: and `_` alike in Python (re.ASCII), Java 19+ (the JDK OpenSearch bundles; Java 17 counted any Unicode letter)
#: and Go's RE2 (the osmem stand-in), which has no lookaround; the replacements hold no `$` or `\`
WORD_SUFFIXES = ((r"\b\+\+\B", "plusplus"), (r"\b#\B", "sharp"))


@functools.cache
def _word_pattern() -> str:
    """A word: letters and digits, with the combining marks inside them (`\\w` has none, which cut हिन्दी
    into ह, न, द). Built on first use: listing the marks takes ~10 ms."""
    marks = [c for c in range(0x10000) if unicodedata.category(chr(c)).startswith("M")]
    runs: list[list[int]] = []
    for code in marks:
        if runs and runs[-1][1] == code - 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    mark_class = "".join(f"{re.escape(chr(low))}-{re.escape(chr(high))}" for low, high in runs)
    return rf"(?:[^\W_{_CJK}]|[{mark_class}])+"


@functools.cache
def _token_re() -> re.Pattern[str]:
    """Words and CJK runs."""
    return re.compile(rf"[{_CJK}]+|{_word_pattern()}")


@functools.cache
def _piece_re() -> re.Pattern[str]:
    """CJK runs, and words with the joiners Lucene keeps between them (`node.js`: one piece)."""
    word = _word_pattern()
    return re.compile(rf"[{_CJK}]+|{word}(?:[{re.escape(WORD_JOINERS)}]{word})*")


@functools.cache
def _suffix_res() -> tuple[tuple[re.Pattern[str], str], ...]:
    return tuple((re.compile(pattern, re.ASCII), letters) for pattern, letters in WORD_SUFFIXES)


@dataclass(frozen=True)
class _Rewritten:
    """Folded text with `WORD_SUFFIXES` applied, and where each of its characters came from in the folded text,
    so a piece of it can be sent to OpenSearch as the user wrote it (`c++`): an index created before the
    suffixes has no `cplusplus`, its analyzer makes `c` of `c++` as before."""

    text: str
    source: str
    starts: tuple[int, ...] | None = None  # per character of text: its source's start (None: text is source)
    ends: tuple[int, ...] | None = None

    def spelling(self, start: int, end: int) -> str:
        """text[start:end] as written; a term made from a suffix after `_` (`x_#`, `_++`) with that `_`,
        which the suffix's char filter needs before it (a bare `#` is read as nothing)."""
        if self.starts is None or self.ends is None:
            return self.source[start:end]
        begin = self.starts[start]
        if self.source[begin : begin + 1] in ("+", "#") and self.source[begin - 1 : begin] == "_":
            begin -= 1
        return self.source[begin : self.ends[end - 1]]


def _no_suffix(folded: str) -> bool:
    return "+" not in folded and "#" not in folded


def _suffixed(folded: str) -> str:
    """Applies WORD_SUFFIXES one after another, as the char filters run (`c++#` is `cplusplussharp`)."""
    if _no_suffix(folded):
        return folded
    for pattern, letters in _suffix_res():
        folded = pattern.sub(letters, folded)
    return folded


def _rewritten(folded: str) -> _Rewritten:
    """`_suffixed`, with where each character came from (a query's pieces are sent as written)."""
    if _no_suffix(folded):
        return _Rewritten(folded, folded)
    text, starts, ends = folded, list(range(len(folded))), list(range(1, len(folded) + 1))
    for pattern, letters in _suffix_res():
        matches = list(pattern.finditer(text))
        if not matches:
            continue
        parts: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        last = 0
        for match in matches:
            begin, end = match.span()
            parts += [text[last:begin], letters]
            new_starts += starts[last:begin] + [starts[begin]] * len(letters)
            new_ends += ends[last:begin] + [ends[end - 1]] * len(letters)
            last = end
        parts.append(text[last:])
        text, starts, ends = "".join(parts), new_starts + starts[last:], new_ends + ends[last:]
    if text == folded:  # no pattern matched
        return _Rewritten(folded, folded)
    return _Rewritten(text, folded, tuple(starts), tuple(ends))


def index_terms(text: str, *, unigrams: bool = False) -> list[str]:
    """Tokens as a BM25 query sees them: words whole, CJK runs as overlapping bigrams (a lone CJK
    character as itself). `unigrams`: each character of a longer CJK run too (what a document indexes)."""
    return _terms_of_rewritten(_suffixed(fold(text)), unigrams=unigrams)


def _terms_of_rewritten(text: str, *, unigrams: bool = False) -> list[str]:
    """The terms of text already through `_rewritten` (rewriting twice is not a no-op: `c++++`)."""
    out: list[str] = []
    for token in _token_re().findall(text):
        out.extend(_token_terms(token, unigrams=unigrams))
    return out


def _token_terms(token: str, *, unigrams: bool = False) -> list[str]:
    if not _CJK_RUN_RE.fullmatch(token):
        return [token]
    if len(token) == 1:
        return [token]
    bigrams = [token[i : i + 2] for i in range(len(token) - 1)]
    return bigrams + list(token) if unigrams else bigrams


def _spelled_terms(
    rewritten: _Rewritten, start: int = 0, end: int | None = None
) -> Iterator[tuple[str, str]]:
    """(term, its spelling in the folded text) for each term of rewritten.text[start:end], in order: a word
    is spelled as written (`c++`), a CJK bigram as itself."""
    for token in _token_re().finditer(rewritten.text, start, len(rewritten.text) if end is None else end):
        if _CJK_RUN_RE.fullmatch(token.group()):
            yield from ((term, term) for term in _token_terms(token.group()))
        else:
            yield token.group(), rewritten.spelling(*token.span())


def document_terms(text: str) -> list[str]:
    """Tokens as the BM25 index stores a document: the query's tokens plus every CJK character."""
    return index_terms(text, unigrams=True)


def proximity_pairs(query: str) -> list[tuple[str, str]]:
    """Each two consecutive distinct non-CJK words of the query, spelled as written (`c++`, which the index's
    analyzer makes `cplusplus`, or `c` on an index created before WORD_SUFFIXES): the proximity clause asks
    each pair to stand within `PROXIMITY_WINDOW` positions. CJK runs are left out: they already match as
    overlapping bigrams (adjacency inside a run), and a stored CJK run's unigrams follow its bigrams, so its
    FTS5 positions are not the text's."""
    return non_cjk_pairs([spelling for _, spelling in _spelled_query_terms(query)])


def _spelled_query_terms(query: str) -> list[tuple[str, str]]:
    """The query's distinct terms, each with its first spelling, in order, at most _MAX_QUERY_TERMS."""
    spelled: dict[str, str] = {}
    for term, spelling in _spelled_terms(_rewritten(fold(query))):
        spelled.setdefault(term, spelling)
    return list(spelled.items())[:_MAX_QUERY_TERMS]


def query_terms(query: str) -> list[str]:
    """The query's distinct terms, in order, at most _MAX_QUERY_TERMS."""
    return [term for term, _ in _spelled_query_terms(query)]


def bounded_query_text(query: str) -> str:
    """The folded query as OpenSearch's analyzer is to see it: its distinct pieces in order (a CJK run, or
    words with their joiners, `node.js`: the index's char filter splits it into the words the documents hold;
    an index created before that filter holds `node.js` whole, and still matches), spelled as written (`c++`:
    the index's char filters make `cplusplus` of it, an index created before them `c`, as its documents hold),
    joined by spaces, while the terms they hold add up to at most _MAX_QUERY_TERMS.

    A match query makes one clause per token the analyzer gives, repeats included, and OpenSearch refuses a
    query of over 1,024 clauses (a 400): so a repeated piece is sent once, a piece holding more terms than
    the room left (a CJK run repeated over a page) gives its distinct terms instead, and what the Python
    tokenizer drops (emoji, symbols: a token each for Lucene) is not sent at all."""
    rewritten = _rewritten(fold(query))
    sent: dict[str, None] = {}
    seen: set[str] = set()
    room = _MAX_QUERY_TERMS
    for piece in _piece_re().finditer(rewritten.text):
        if room == 0:
            break
        spelling = rewritten.spelling(*piece.span())
        if piece.group() in seen or spelling in sent:
            continue
        seen.add(piece.group())
        terms = _terms_of_rewritten(piece.group())
        if len(terms) <= room:
            sent[spelling] = None
            room -= len(terms)
            continue
        for _, term_spelling in _spelled_terms(rewritten, *piece.span()):
            if room == 0:
                break
            if term_spelling not in sent:
                sent[term_spelling] = None
                room -= 1
    return " ".join(sent)


def non_cjk_pairs(terms: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(t for t in terms if not _CJK_RUN_RE.fullmatch(t)))
