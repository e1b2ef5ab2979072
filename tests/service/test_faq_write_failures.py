"""FAQ entry writes that fail midway leave nothing behind, entries fit in one stored row, import and API
keep tags alike, and entries count on the tenant's storage quota (in-memory adapters)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries as faq
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate
from chalicelib.ports import IndexUnavailable, IndexWriteError

from .test_faq import entries_of, import_uploaded_csv, index_count, run_import, search

HEADER = "分类,问题,相似问题,反例问题,机器人回答,是否全部回复,是否停用\n"


def failing_index(
    deps: Services, kb: KnowledgeBase, error: Exception, *, write_first: bool
) -> Callable[[], None]:
    """The engine's next batch_index raises `error` (after writing, with `write_first`); returns the undo."""
    engine = deps.engine(kb.retrieval_engine)
    real = engine.batch_index

    def once(space: Any, items: Any) -> None:
        engine.batch_index = real  # type: ignore[method-assign]
        if write_first:
            real(space, items)
        raise error

    engine.batch_index = once  # type: ignore[method-assign]
    return lambda: setattr(engine, "batch_index", real)


def create(deps: Services, kb: KnowledgeBase, question: str, **extra: Any) -> Any:
    body = {"standard_question": question, "answers": [f"answer to {question}"], **extra}
    return faq.create_entry(deps, kb.tenant_id, kb.id, FaqEntryRequest(**body))


def used(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_used


# ---------------------------------------------------------------- a failed write leaves nothing


@pytest.mark.parametrize(
    ("error", "write_first", "code"),
    [
        (IndexUnavailable("throttled"), False, "index_unavailable"),
        (IndexUnavailable("timed out after the write"), True, "index_unavailable"),
        (IndexWriteError("a document the mapping rejects"), True, "index_refused"),
    ],
)
def test_a_create_the_index_fails_leaves_no_row_no_hit_and_its_question_free(
    deps: Services, faq_kb: KnowledgeBase, error: Exception, write_first: bool, code: str
) -> None:
    failing_index(deps, faq_kb, error, write_first=write_first)
    with pytest.raises(AppError) as raised:
        create(deps, faq_kb, "How do I reset my password?")
    assert (raised.value.status, raised.value.code) == (503, code)
    assert entries_of(deps, faq_kb) == {}
    assert index_count(deps, faq_kb) == 0
    assert used(deps, faq_kb) == 0
    again = create(deps, faq_kb, "How do I reset my password?")  # not 409 faq_question_conflict
    assert [hit["id"] for hit in search(deps, faq_kb, "reset my password")] == [again.id]


def test_an_update_the_index_fails_leaves_the_entry_as_it_was_and_the_added_question_free(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    made = create(deps, faq_kb, "Opening hours")
    failing_index(deps, faq_kb, IndexUnavailable("timed out after the write"), write_first=True)
    with pytest.raises(AppError) as raised:
        faq.update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            made.id,
            FaqEntryUpdate(similar_questions=["when is the shop open"]),
        )
    assert raised.value.status == 503
    assert entries_of(deps, faq_kb)["Opening hours"].similar_questions == []
    assert index_count(deps, faq_kb, made.id) == 1  # the standard question's alone
    assert used(deps, faq_kb) == len("Opening hours") + len("answer to Opening hours")
    other = create(deps, faq_kb, "When is the shop open")  # the question was given back at once
    hits = search(deps, faq_kb, "when is the shop open")
    assert hits[0]["id"] == other.id
    assert all(hit["matched_question"] != "when is the shop open" or hit["id"] == other.id for hit in hits)


# ---------------------------------------------------------------- an entry fits in one stored row


def test_an_entry_too_large_to_store_is_413_and_holds_nothing(deps: Services, faq_kb: KnowledgeBase) -> None:
    big = ["答" * 19_000 for _ in range(10)]  # within the request's lengths, over 1 MB stored
    with pytest.raises(AppError) as raised:
        create(deps, faq_kb, "big", answers=big)
    assert (raised.value.status, raised.value.code) == (413, "faq_entry_too_large")
    assert entries_of(deps, faq_kb) == {}
    small = create(deps, faq_kb, "big")  # the question is not held
    with pytest.raises(AppError) as raised:
        faq.update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            small.id,
            FaqEntryUpdate(similar_questions=["a big one"], answers=big),
        )
    assert (raised.value.status, raised.value.code) == (413, "faq_entry_too_large")
    assert entries_of(deps, faq_kb)["big"].answers == ["answer to big"]
    create(deps, faq_kb, "a big one")


def test_an_import_row_or_merge_too_large_to_store_fails_alone(deps: Services, faq_kb: KnowledgeBase) -> None:
    half = "##".join("a" * 19_000 + str(i) for i in range(10))  # 190 KB: fits alone, not twice
    huge = "##".join("答" * 19_000 for _ in range(10))
    text = (
        HEADER
        + f"general,Half,,,{half},FALSE,FALSE\n"
        + f"general,Huge,,,{huge},FALSE,FALSE\n"
        + "general,Small,,,tiny,FALSE,FALSE\n"
    )
    progress = import_uploaded_csv(deps, faq_kb, text)["progress"]
    assert (progress["added"], progress["failed"]) == (2, 1)
    assert progress["failures"][0]["reason"].startswith("the entry is too large to store")
    other_half = "##".join("b" * 19_000 + str(i) for i in range(10))
    merged = import_uploaded_csv(
        deps, faq_kb, HEADER + f"general,Half,,,{other_half},FALSE,FALSE\ngeneral,Next,,,ok,FALSE,FALSE\n"
    )["progress"]
    assert (merged["added"], merged["failed"]) == (1, 1)
    assert merged["failures"][0]["reason"].startswith(
        "merge reverted: the merged entry would exceed a limit (the entry is too large to store"
    )
    assert len(entries_of(deps, faq_kb)["Half"].answers) == 10  # kept as it was


# ---------------------------------------------------------------- tags


def test_import_and_api_keep_one_of_each_tag(deps: Services, faq_kb: KnowledgeBase) -> None:
    api = create(deps, faq_kb, "api q", tags=["x", "x", " x "])
    run_import(deps, faq_kb, [{"standard_question": "imp q", "answers": ["a"], "tags": ["x", "x", " x "]}])
    assert api.tags == entries_of(deps, faq_kb)["imp q"].tags == ["x"]
    run_import(deps, faq_kb, [{"standard_question": "api q", "answers": ["a"], "tags": ["y", "x", "y"]}])
    assert entries_of(deps, faq_kb)["api q"].tags == ["x", "y"]


# ---------------------------------------------------------------- the storage quota


def test_entries_count_on_the_storage_quota_and_give_it_back(deps: Services, faq_kb: KnowledgeBase) -> None:
    deps.tenants.set_quotas(faq_kb.tenant_id, 100, 0)
    first = create(deps, faq_kb, "q1", answers=["a" * 40])  # 2 + 40 bytes
    assert used(deps, faq_kb) == 42
    with pytest.raises(AppError) as raised:
        create(deps, faq_kb, "q2", answers=["b" * 60])
    assert (raised.value.status, raised.value.code) == (403, "storage_quota_exceeded")
    assert set(entries_of(deps, faq_kb)) == {"q1"} and used(deps, faq_kb) == 42
    with pytest.raises(AppError) as raised:
        faq.update_entry(deps, faq_kb.tenant_id, faq_kb.id, first.id, FaqEntryUpdate(answers=["c" * 99]))
    assert raised.value.code == "storage_quota_exceeded"
    faq.update_entry(deps, faq_kb.tenant_id, faq_kb.id, first.id, FaqEntryUpdate(answers=["c" * 10]))
    assert used(deps, faq_kb) == 12
    create(deps, faq_kb, "q2", answers=["b" * 60])
    assert used(deps, faq_kb) == 74
    faq.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, first.id)
    assert used(deps, faq_kb) == 62


def test_an_import_fails_the_rows_past_the_storage_quota(deps: Services, faq_kb: KnowledgeBase) -> None:
    deps.tenants.set_quotas(faq_kb.tenant_id, 100, 0)
    rows = [{"standard_question": f"q{i}", "answers": ["a" * 28]} for i in range(5)]  # 30 bytes each
    view = run_import(deps, faq_kb, rows)
    assert (view["progress"]["added"], view["progress"]["failed"]) == (3, 2)
    assert {f["row"] for f in view["progress"]["failures"]} == {4, 5}
    assert view["progress"]["failures"][0]["category"] == "quota"
    assert used(deps, faq_kb) == 90
    replaced = run_import(deps, faq_kb, rows[3:], mode="replace")  # the entries it deletes give theirs back
    assert (replaced["progress"]["added"], replaced["progress"]["failed"]) == (2, 0)
    assert used(deps, faq_kb) == 60
