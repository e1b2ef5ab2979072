"""Rules the document search (`operations/search.py`) and the FAQ search (`faq/entries.py`) share: which
ranked lists a retriever asks for, and how deep the engine is asked when hits fold or drop out.

Both searches reduce the engine's hits (a parent's children, copies, the questions of one FAQ entry, deleted
or disabled rows): a page of hits can make fewer answers than `match_count` while more match. And both hold
some answers back until nothing better comes (a capped document's further hits, an FAQ entry whose negative
question the query names): such a stand-in fills a place only while the page offers nothing else, and the
better answer may rank past the page. `deepened` asks again, four times deeper, while the engine filled the
page and the answer is short of `match_count` answers that are not stand-ins, up to MAX_ENGINE_DEPTH hits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import KnowledgeBase

#: hits asked of the engine at most, however many fold away
MAX_ENGINE_DEPTH = 400

_Answer = TypeVar("_Answer")


def retriever_lists(kb: KnowledgeBase, retriever: str) -> tuple[bool, bool]:
    """(keyword, vector): the lists the retriever asks for, or a 400 `retriever_unavailable` when the
    knowledge base has not indexed for the one named (`hybrid` takes what there is)."""
    strategy = kb.indexing_strategy
    keyword = strategy.keyword_enabled and retriever != "vector"
    vector = strategy.vector_enabled and retriever != "keyword"
    if not keyword and not vector and retriever != "hybrid":
        raise BadRequest(
            f"this knowledge base is not indexed for {retriever} search (its indexing strategy)",
            code="retriever_unavailable",
        )
    return keyword, vector


def deepened(
    answer_at: Callable[[int], tuple[int, list[_Answer], int]], top_k: int, depth: int
) -> list[_Answer]:
    """The answer `answer_at(depth)` makes (it returns the engine's hits at that depth, the answers they make
    and how many of those only stand in until better ones come), asked again four times deeper while fewer
    than `top_k` of its answers are not stand-ins and the engine returned a full page, up to MAX_ENGINE_DEPTH.
    """
    while True:
        found, answer, stand_ins = answer_at(depth)
        if len(answer) - stand_ins >= top_k or found < depth or depth >= MAX_ENGINE_DEPTH:
            return answer
        depth = min(4 * depth, MAX_ENGINE_DEPTH)
