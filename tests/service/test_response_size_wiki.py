"""A wiki page (`GET /knowledge-bases/{id}/wiki`) stays under Lambda's 6 MB response (JSON, non-ASCII
escaped): 1,000 page records with 500-character CJK document titles and 200-character page titles came to
4.4 MB beside the index's 1.2 MB part (twice that outside the BMP). Past its byte budget a page ends early,
its cursor going on after the last record it read: every record comes once, the index whole."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import enrichment_outputs

from .wiki_scale import big_wiki


def _walk(deps: Services, kb: KnowledgeBase) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = []
    params: dict[str, Any] = {}
    for _ in range(50):
        answers.append(enrichment_outputs.wiki(deps, kb.tenant_id, kb.id, params))
        if answers[-1]["next_cursor"] is None:
            return answers
        params = {"cursor": answers[-1]["next_cursor"]}
    raise AssertionError("the wiki never ended")


def test_a_wiki_page_past_its_byte_budget_ends_early_and_the_next_goes_on_after_it(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    big_wiki(deps, kb, documents=4, pages=3, title_chars=200)
    (whole,) = _walk(deps, kb)
    assert len(whole["pages"]) == 12
    one = max(len(json.dumps(page)) + 1 for page in whole["pages"])
    budget = len(json.dumps(whole["index"])) + 3 * one + 1  # three records, and the list's brackets
    monkeypatch.setattr(enrichment_outputs, "WIKI_PAGE_MAX_BYTES", budget, raising=False)

    answers = _walk(deps, kb)
    assert len(answers) >= 2 and all(answer["pages"] for answer in answers)
    assert len(answers[0]["pages"]) == 3 and all(a["has_more"] for a in answers[:-1])
    assert "".join(answer["index"] for answer in answers) == whole["index"]
    assert [page for answer in answers for page in answer["pages"]] == whole["pages"]
    assert all(len(json.dumps(a["index"])) + len(json.dumps(a["pages"])) <= budget + 20 for a in answers)
