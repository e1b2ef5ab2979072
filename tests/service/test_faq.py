"""FAQ knowledge bases on the in-memory adapters: entries and their index entries, search, and the bulk
import worker driven through the fake faq-import queue (the real handler, retries and redelivery)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from chalicelib.adapters.memory import MemoryEmbeddingCache, MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, SearchRequest
from chalicelib.domain.errors import BadRequest, Conflict
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.ports import IndexSpace, ModelRequestError, ModelThrottled, ModelUnavailable

from .faq_support import CountingEmbedding

QUEUE = "faq-import"


def fresh_cache(deps: Services) -> None:
    """Forget every cached vector, so any text the import embeds reaches the model (and is counted)."""
    cache = MemoryEmbeddingCache()
    deps.build_embedding_cache = lambda: cache
    deps._embedding_cache = None


def entry(question: str, *answers: str, **extra: Any) -> dict[str, Any]:
    return {"standard_question": question, "answers": list(answers) or [f"answer to {question}"], **extra}


def import_uploaded_csv(deps: Services, kb: KnowledgeBase, text: str) -> dict[str, Any]:
    """`text` uploaded as faq.csv through a presigned grant and imported: the task's view."""
    from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.uploads import upload_url

    grant = upload_url(deps, kb.tenant_id, kb.id, FaqUploadUrlRequest(file_name="faq.csv"))
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    inbox.post_presigned(grant["fields"], text.encode())
    task = start_import(deps, kb.tenant_id, kb.id, FaqImportRequest(object_key=grant["object_key"]))
    drain(deps)
    return task_view(deps, task.id)


def test_a_csv_quote_never_closed_keeps_the_entries_after_it(deps: Services, faq_kb: KnowledgeBase) -> None:
    """`"Open 9` opened a quote no later quote closes: the entries after it were folded into its answer."""
    text = 'question,answer\nOpening hours,"Open 9 to 5\nParking,Behind the building\nPets,Dogs welcome\n'
    assert import_uploaded_csv(deps, faq_kb, text)["progress"]["added"] == 3
    stored = entries_of(deps, faq_kb)
    assert stored["Opening hours"].answers == ['"Open 9 to 5'] and stored["Pets"].answers == ["Dogs welcome"]


def test_a_quote_never_closed_before_many_long_answers_still_keeps_them(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The rows the open quote swallowed passed Python's 131,072-character field limit, which failed the
    whole import; the limit is lifted, so they are repaired as in a small file."""
    rows = "".join(f"Question {i},{'long answer ' * 400}{i}\n" for i in range(40))
    text = 'question,answer\nOpening hours,"Open 9 to 5\n' + rows
    assert len(text) > 131_072
    assert import_uploaded_csv(deps, faq_kb, text)["progress"]["added"] == 41
    assert entries_of(deps, faq_kb)["Question 39"].answers == ["long answer " * 400 + "39"]


def run_import(
    deps: Services, kb: KnowledgeBase, rows: list[dict[str, Any]], **options: Any
) -> dict[str, Any]:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    task = start_import(deps, kb.tenant_id, kb.id, FaqImportRequest(entries=rows, **options))
    drain(deps)
    return task_view(deps, task.id)


def drain(deps: Services, max_batches: int = 200) -> None:
    from chalicelib.stages import faq_import as worker

    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    for _ in range(max_batches):
        if not queue.waiting(QUEUE):
            return
        queue.deliver(QUEUE, worker.handle, deps)
    raise AssertionError("the import queue is still busy")


BASE_URL = "http://api.test"


def task_view(deps: Services, task_id: str) -> dict[str, Any]:
    """The task as `GET /tasks/{id}` presents it (an FAQ import's failed rows: a fresh download grant)."""
    from chalicelib.faq.failed_rows import present_task

    task = deps.tasks.get(task_id)
    assert task is not None
    return present_task(deps, task, BASE_URL)


def download(deps: Services, link: str) -> bytes:
    """What a download grant's link (`<base>/r/{token}`) leads to."""
    from chalicelib.services.resources import redeem

    assert link.startswith(f"{BASE_URL}/r/")
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    return inbox.get_presigned(redeem(deps, link.rsplit("/r/", 1)[1]).location)


def entries_of(deps: Services, kb: KnowledgeBase) -> dict[str, Any]:
    from chalicelib.faq.entries import all_entries

    return {e.standard_question: e for e in all_entries(deps, kb.id)}


def index_count(deps: Services, kb: KnowledgeBase, entry_id: str | None = None) -> int:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    return deps.engine().count(space, kb.id, entry_id)


def search(deps: Services, kb: KnowledgeBase, text: str, count: int = 5) -> list[dict[str, Any]]:
    from chalicelib.operations.search import hybrid_search

    return hybrid_search(deps, kb.tenant_id, kb.id, SearchRequest(query_text=text, match_count=count))


# ---------------------------------------------------------------- entries


def test_entries_are_only_for_faq_knowledge_bases(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    with pytest.raises(BadRequest) as raised:
        create_entry(deps, kb.tenant_id, kb.id, FaqEntryRequest(standard_question="q", answers=["a"]))
    assert raised.value.code == "not_faq_kb"


def test_an_faq_knowledge_base_takes_no_documents_by_any_door(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.commands import ManualRequest, UploadUrlRequest, UrlImportRequest
    from chalicelib.operations.create import create_from_url, create_manual, create_upload_url

    for make in (
        lambda: create_manual(deps, faq_kb.tenant_id, faq_kb.id, ManualRequest(content="# hello\n\nworld")),
        lambda: create_from_url(
            deps, faq_kb.tenant_id, faq_kb.id, UrlImportRequest(url="https://example.com/")
        ),
        lambda: create_upload_url(deps, faq_kb.tenant_id, faq_kb.id, UploadUrlRequest(file_name="a.md")),
    ):
        with pytest.raises(BadRequest) as refused:
            make()
        assert refused.value.code == "faq_kb_no_files"
    assert deps.knowledge.page_by_kb(faq_kb.id, limit=10) == []


def test_entry_crud_indexes_each_question_and_update_embeds_only_what_changed(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate
    from chalicelib.faq.entries import create_entry, delete_entry, get_entry, update_entry

    created = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="How do I reset my password?",
            similar_questions=["forgot password", "password reset"],
            answers=["Use the reset link on the sign-in page."],
            tags=["account"],
        ),
    )
    assert created.indexed and index_count(deps, faq_kb, created.id) == 3
    assert sorted(model.texts) == sorted(["How do I reset my password?", "forgot password", "password reset"])
    model.texts.clear()
    fresh_cache(deps)
    updated = update_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        created.id,
        FaqEntryUpdate(similar_questions=["forgot password", "lost my password"], answers=["Click reset."]),
    )
    assert model.texts == ["lost my password"]  # the new question only; the answer is not embedded
    assert index_count(deps, faq_kb, created.id) == 3
    assert updated.content_hash != created.content_hash
    assert get_entry(deps, faq_kb.tenant_id, faq_kb.id, created.id).answers == ["Click reset."]
    model.texts.clear()
    update_entry(deps, faq_kb.tenant_id, faq_kb.id, created.id, FaqEntryUpdate(is_enabled=False))
    assert model.texts == []  # disabling flips the entries in place
    assert search(deps, faq_kb, "lost my password") == []
    delete_entry(deps, faq_kb.tenant_id, faq_kb.id, created.id)
    assert index_count(deps, faq_kb, created.id) == 0
    assert deps.faq.get_entry(faq_kb.id, created.id) is None


def test_a_question_belongs_to_one_entry(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="Opening hours", similar_questions=["when are you open"], answers=["9-5"]
        ),
    )
    with pytest.raises(Conflict) as raised:
        create_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            FaqEntryRequest(standard_question="When are you open?", answers=["x"]),
        )
    assert raised.value.code == "faq_question_conflict"
    with pytest.raises(BadRequest) as bad:
        create_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            FaqEntryRequest(standard_question="Parking", negative_questions=["parking!"], answers=["yes"]),
        )
    assert bad.value.code == "faq_negative_conflict"


def test_list_filters_and_pages_with_a_cursor(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.faq.commands import FaqEntryRequest, FaqListQuery
    from chalicelib.faq.entries import create_entry, list_entries

    for i in range(7):
        create_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            FaqEntryRequest(
                standard_question=f"question number {i}",
                answers=[f"answer {i}"],
                tags=["even" if i % 2 == 0 else "odd"],
                is_enabled=i != 4,
            ),
        )
    seen, cursor = [], ""
    while True:
        page = list_entries(
            deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(tag="even", limit=2, cursor=cursor)
        )
        seen += [item["standard_question"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert sorted(seen) == [f"question number {i}" for i in (0, 2, 4, 6)]
    disabled = list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(enabled="false"))
    assert [i["standard_question"] for i in disabled["items"]] == ["question number 4"]
    keyword = list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(keyword="ANSWER 3"))
    assert [i["standard_question"] for i in keyword["items"]] == ["question number 3"]


def test_search_returns_entries_with_answers_and_negatives_push_down(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    refund = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="How do I get a refund for my order",
            similar_questions=["refund my order"],
            negative_questions=["refund my gift card"],
            answers=["Open the order and press Refund.", "Refunds take 5 days."],
        ),
    )
    gift = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Gift card balance", answers=["Gift cards are not refundable."]),
    )
    hits = search(deps, faq_kb, "refund my order")
    assert hits[0]["entry_id"] == refund.id
    assert hits[0]["answers"] == ["Open the order and press Refund.", "Refunds take 5 days."]
    assert len({h["entry_id"] for h in hits}) == len(hits)  # one result per entry
    pushed = search(deps, faq_kb, "refund my gift card")
    ids = [h["entry_id"] for h in pushed]
    assert refund.id in ids and gift.id in ids
    assert ids.index(gift.id) < ids.index(refund.id)
    assert next(h for h in pushed if h["entry_id"] == refund.id)["negative_match"] is True


def test_search_answers_match_count_entries_behind_one_entry_with_many_questions(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """One entry's twelve similar questions filled every hit the engine was first asked for (match_count × 4):
    the other matching entry was left out. The engine is asked deeper while too few entries come out."""
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry
    from chalicelib.operations.search import hybrid_search

    big = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="How do I reset the harbour gate password?",
            similar_questions=[f"harbour gate password reset variant {i}?" for i in range(12)],
            answers=["Ask the harbour master."],
        ),
    )
    small = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Where is the harbour gate?", answers=["North pier."]),
    )
    for retriever in ("keyword", "hybrid"):
        request = SearchRequest(query_text="harbour gate password reset", match_count=2, retriever=retriever)
        hits = hybrid_search(deps, faq_kb.tenant_id, faq_kb.id, request)
        assert [h["entry_id"] for h in hits] == [big.id, small.id], retriever


def test_search_with_a_retriever_the_faq_knowledge_base_has_no_index_for_is_a_400(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    """As for a document knowledge base: `retriever: keyword` without a keyword index was 200 `[]`."""
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.search import hybrid_search

    vectors_only = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase.model_validate(
            {"name": "faq", "type": "faq", "indexing_strategy": {"keyword_enabled": False}}
        ),
    )
    gate = create_entry(
        deps,
        tenant.id,
        vectors_only.id,
        FaqEntryRequest(standard_question="Where is the harbour gate?", answers=["North pier."]),
    )

    def ask(retriever: str) -> list[dict[str, Any]]:
        request = SearchRequest(query_text="harbour gate", match_count=5, retriever=retriever)
        return hybrid_search(deps, tenant.id, vectors_only.id, request)

    with pytest.raises(BadRequest) as raised:
        ask("keyword")
    assert raised.value.code == "retriever_unavailable"
    assert [h["entry_id"] for h in ask("vector")] == [gate.id]
    assert [h["entry_id"] for h in ask("hybrid")] == [gate.id]


# ---------------------------------------------------------------- import


def test_dry_run_reports_and_writes_nothing(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    rows = [entry("Where is the office"), entry("Where is the office"), entry("", "a"), entry("Parking")]
    view = run_import(deps, faq_kb, rows, dry_run=True)
    progress = view["progress"]
    assert view["status"] == "completed"
    assert (progress["added"], progress["failed"], progress["success"]) == (2, 2, 2)
    assert {f["row"] for f in progress["failures"]} == {2, 3}
    assert entries_of(deps, faq_kb) == {}
    assert model.texts == [] and index_count(deps, faq_kb) == 0
    assert deps.faq.get_lease(faq_kb.id) is None and deps.faq.get_last_import(faq_kb.id) is None
    inbox = deps.inbox
    # the source went too; only the failed rows' CSV is written, under an import's key, with its link
    failed_csv = f"faq-imports/{faq_kb.tenant_id}/{faq_kb.id}/results/{view['id']}-failed.csv"
    assert isinstance(inbox, MemoryFileStore) and inbox.keys("faq-imports/") == [failed_csv]
    assert download(deps, progress["failed_rows_download"]).startswith(b"\xef\xbb\xbfreason,")


def test_append_merges_partials_and_failures_with_exact_counts_and_csv(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    existing = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="Opening hours",
            similar_questions=["when are you open"],
            answers=["9 to 5"],
        ),
    )
    create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Returns", similar_questions=["send it back"], answers=["30 days"]),
    )
    rows = [
        # 1: merge into the existing entry (new similar question, new answer)
        entry("Opening hours", "8 to 6", similar_questions=["what time do you open"]),
        # 2: add, partial: one similar question belongs to the existing entry
        entry("Holiday hours", "closed", similar_questions=["when are you open", "christmas hours"]),
        # 3: add, partial: a negative question equals its own similar question
        entry(
            "Parking", "free", similar_questions=["car park"], negative_questions=["car park", "bike parking"]
        ),
        # 4: fail: duplicate standard question in the file
        entry("Parking", "paid"),
        # 5: fail: equals a similar question of an existing entry
        entry("When are you open?", "always"),
        # 6: fail: no answer
        {
            "standard_question": "Empty answer",
            "answers": ["  "],
            "similar_questions": ["a", "b"],
            "tags": ["misc"],
        },
        # 7: skip: merging into the existing "Returns" entry changes nothing
        entry("returns!", "30 days", similar_questions=["send it back"]),
        # 8: add, plain
        entry("Wifi password", "guest123", tags=["office"], answer_all=True),
    ]
    view = run_import(deps, faq_kb, rows)
    progress = view["progress"]
    assert view["status"] == "partial"
    counts = {k: progress[k] for k in ("success", "failed", "partial", "skipped", "merged", "added")}
    assert counts == {"success": 5, "failed": 3, "partial": 2, "skipped": 1, "merged": 1, "added": 3}
    assert progress["processed"] == 8 and progress["total"] == 8
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"Opening hours", "Holiday hours", "Parking", "Wifi password", "Returns"}
    merged = stored["Opening hours"]
    assert merged.id == existing.id and merged.answers == ["9 to 5", "8 to 6"]  # united (issue 24, defect 10)
    assert merged.similar_questions == ["when are you open", "what time do you open"]
    assert stored["Holiday hours"].similar_questions == ["christmas hours"]
    assert stored["Parking"].negative_questions == ["bike parking"]
    assert index_count(deps, faq_kb, merged.id) == 3 and index_count(deps, faq_kb) == 3 + 2 + 2 + 2 + 1
    assert deps.faq.tags(faq_kb.id) == ["office"]
    # the failed rows, byte by byte: BOM, header, ## joins, booleans
    data = download(deps, progress["failed_rows_download"])
    assert data.startswith(b"\xef\xbb\xbf")
    assert data.split(b"\r\n")[0] == (
        b"\xef\xbb\xbfreason,category,question,similar_questions,negative_questions,answers,answer_all,disabled"
    )
    lines = list(csv.reader(io.StringIO(data.decode("utf-8-sig"))))
    assert [line[2] for line in lines[1:]] == ["Parking", "When are you open?", "Empty answer"]
    assert lines[1][0] == "duplicate standard question (row 3)"
    assert lines[3] == [
        "at least one non-blank answer is required",
        "misc",
        "Empty answer",
        "a##b",
        "",
        "",
        "FALSE",
        "FALSE",
    ]
    last = deps.faq.get_last_import(faq_kb.id)
    assert last is not None and last["task_id"] == view["id"] and last["failed"] == 3
    assert "failed_rows_download" not in last  # minted per request, never stored
    assert deps.faq.get_lease(faq_kb.id) is None  # released by its owner


def test_replace_of_an_unchanged_file_skips_every_entry_with_zero_embedding_calls(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    rows = [entry(f"question {i}", similar_questions=[f"variant {i}"]) for i in range(60)]
    first = run_import(deps, faq_kb, rows, mode="replace")
    assert first["progress"]["added"] == 60
    before = {k: (v.id, v.updated_at) for k, v in entries_of(deps, faq_kb).items()}
    model.texts.clear()
    fresh_cache(deps)  # nothing cached: any embedding would reach the model
    # the same content, spelled differently (case, punctuation, width) and in another order
    again = [
        entry(f"QUESTION {i}!", f"answer to question {i}", similar_questions=[f"variant {i}"])
        for i in range(60)
    ][::-1]
    view = run_import(deps, faq_kb, again, mode="replace")
    assert view["progress"]["skipped"] == 60 and view["progress"]["added"] == 0
    assert view["progress"].get("deleted", 0) == 0
    assert model.texts == []
    assert {k: (v.id, v.updated_at) for k, v in entries_of(deps, faq_kb).items()} == before


def test_replace_deletes_a_removed_entry_with_its_vectors_and_unused_tags(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    rows = [entry("Keep me", tags=["kept"]), entry("Remove me", similar_questions=["drop me"], tags=["gone"])]
    run_import(deps, faq_kb, rows)
    removed = entries_of(deps, faq_kb)["Remove me"]
    assert index_count(deps, faq_kb, removed.id) == 2
    assert deps.faq.tags(faq_kb.id) == ["gone", "kept"]
    view = run_import(deps, faq_kb, [entry("Keep me", tags=["kept"]), entry("New one")], mode="replace")
    assert (view["progress"]["skipped"], view["progress"]["added"], view["progress"]["deleted"]) == (1, 1, 1)
    assert set(entries_of(deps, faq_kb)) == {"Keep me", "New one"}
    assert index_count(deps, faq_kb, removed.id) == 0
    assert deps.faq.tags(faq_kb.id) == ["kept"]
    assert [h["standard_question"] for h in search(deps, faq_kb, "drop me remove me")] != ["Remove me"]


def test_a_second_import_during_the_first_gets_409_with_the_running_task(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    first = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("a")]))
    with pytest.raises(Conflict) as raised:
        start_import(
            deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("b")], mode="replace")
        )
    assert raised.value.status == 409 and raised.value.data == {"task_id": first.id}
    # a dry run takes no lease
    start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("b")], dry_run=True))
    drain(deps)
    assert deps.faq.get_lease(faq_kb.id) is None
    again = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("c")]))
    drain(deps)
    assert task_view(deps, again.id)["status"] == "completed"


def test_the_lease_is_released_only_by_its_owner_and_expires(deps: Services, faq_kb: KnowledgeBase) -> None:
    assert deps.faq.acquire_lease(faq_kb.id, "task-a", 1000.0, 60) is None
    held = deps.faq.acquire_lease(faq_kb.id, "task-b", 1010.0, 60)
    assert held is not None and held.owner == "task-a"
    assert deps.faq.release_lease(faq_kb.id, "task-b") is False
    assert deps.faq.acquire_lease(faq_kb.id, "task-b", 1061.0, 60) is None  # task-a's lease expired
    assert deps.faq.release_lease(faq_kb.id, "task-a") is False
    assert deps.faq.release_lease(faq_kb.id, "task-b") is True


def test_a_batch_redelivered_after_a_crash_resumes_without_duplicates(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    rows = [entry(f"question {i}", similar_questions=[f"variant {i}"]) for i in range(120)]
    # batch 1 (50 rows, 100 texts) indexes; batch 2 writes its rows, then the model fails mid-batch
    model.fail_after = 130
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=rows))
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    from chalicelib.stages import faq_import as worker

    response = queue.deliver(QUEUE, worker.handle, deps)
    assert response["batchItemFailures"]  # the message comes back
    crashed = task_view(deps, task.id)["progress"]
    assert crashed["processed"] == 50
    unindexed = [e for e in entries_of(deps, faq_kb).values() if not e.indexed]
    assert len(unindexed) == 50  # batch 2's rows were written, not indexed
    model.fail_after = None
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "completed"
    assert view["progress"]["added"] == 120 and view["progress"]["purged"] == 50
    assert view["progress"]["resumed"] is True
    stored = entries_of(deps, faq_kb)
    assert len(stored) == 120 and all(e.indexed for e in stored.values())
    assert index_count(deps, faq_kb) == 240  # two questions each, nothing twice


def test_a_redelivered_message_after_progress_was_saved_repeats_nothing(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    """A duplicate delivery of the import message after it finished is a no-op."""
    from chalicelib.stages import faq_import as worker

    view = run_import(deps, faq_kb, [entry(f"q{i}") for i in range(10)])
    model.texts.clear()
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw(QUEUE, {"task_id": view["id"]})
    queue.deliver(QUEUE, worker.handle, deps)
    assert model.texts == [] and len(entries_of(deps, faq_kb)) == 10 and index_count(deps, faq_kb) == 10


def test_inline_limits_point_to_the_presigned_upload(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.domain.errors import PayloadTooLarge
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    with pytest.raises(PayloadTooLarge) as many:
        start_import(
            deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry(f"q{i}") for i in range(201)])
        )
    assert many.value.code == "use_presigned_upload"
    with pytest.raises(PayloadTooLarge):
        start_import(
            deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("big", "x" * 60_000)])
        )
    assert deps.faq.get_lease(faq_kb.id) is None


def test_uploaded_csv_is_read_and_deleted_at_the_end(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.uploads import upload_url

    grant = upload_url(deps, faq_kb.tenant_id, faq_kb.id, FaqUploadUrlRequest(file_name="faq.csv"))
    text = (
        "分类,问题,相似问题,反例问题,机器人回答,是否全部回复,是否停用\n"
        "account,How to log in,sign in##log on,,Use your email.##Or SSO.,TRUE,FALSE\n"
        "billing,Invoice copy,,,Download it from Billing.,FALSE,TRUE\n"
    )
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    inbox.post_presigned(grant["fields"], text.encode("utf-8-sig"))
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=grant["object_key"]))
    drain(deps)
    assert task_view(deps, task.id)["progress"]["added"] == 2
    stored = entries_of(deps, faq_kb)
    login = stored["How to log in"]
    assert login.similar_questions == ["sign in", "log on"] and login.answers == [
        "Use your email.",
        "Or SSO.",
    ]
    assert login.answer_all is True and login.tags == ["account"]
    assert stored["Invoice copy"].is_enabled is False
    assert not inbox.exists(inbox.url_for(grant["object_key"]))


def test_a_row_beyond_an_entrys_limits_fails_alone_and_the_rest_is_imported(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    header = "分类,问题,相似问题,反例问题,机器人回答,是否全部回复,是否停用\n"
    many_answers = "##".join(f"answer {i}" for i in range(60))
    text = (
        header
        + "general,Where is the office,,,On the second floor.,FALSE,FALSE\n"
        + f"general,{'why ' * 50_000},,,Because.,FALSE,FALSE\n"  # a 200,000-character question
        + f"general,How many answers,,,{many_answers},FALSE,FALSE\n"
    )
    progress = import_uploaded_csv(deps, faq_kb, text)["progress"]
    assert (progress["added"], progress["failed"]) == (1, 2)
    reasons = {f["row"]: f["reason"] for f in progress["failures"]}
    assert reasons[2].startswith("standard_question: ") and "1000 characters" in reasons[2]
    assert reasons[3].startswith("answers: ") and "50" in reasons[3]
    assert set(entries_of(deps, faq_kb)) == {"Where is the office"}
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    create_entry(  # within the limits alone; with the row's questions added, over them
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="Opening hours",
            answers=["9 to 5"],
            similar_questions=[f"open at {i}" for i in range(150)],
        ),
    )
    similar = "##".join(f"closed at {i}" for i in range(100))
    merged = import_uploaded_csv(
        deps, faq_kb, header + f"general,Opening hours,{similar},,9 to 5,FALSE,FALSE\n"
    )
    failure = merged["progress"]["failures"][0]
    assert failure["reason"].startswith(
        "merge reverted: the merged entry would exceed a limit (similar_questions"
    )
    assert len(entries_of(deps, faq_kb)["Opening hours"].similar_questions) == 150  # kept as it was


def test_vectors_of_questions_are_those_of_the_model(deps: Services, faq_kb: KnowledgeBase) -> None:
    """The entry's questions are embedded with the knowledge base's model (not a stand-in)."""
    run_import(deps, faq_kb, [entry("Where do I park")])
    space = IndexSpace.of(deps.embedding_model(faq_kb.embedding_model_id))
    query = deps.embedding_model().embed(["Where do I park"])[0]
    hits = deps.engine().hybrid_search(space, faq_kb.id, "Where do I park", query, 1, keyword=False)
    assert hits and np.isclose(hits[0].score, hits[0].score) and hits[0].content == "Where do I park"
    assert json.loads(json.dumps(hits[0].extra)) == hits[0].extra


def test_deleting_an_faq_knowledge_base_removes_its_entries_and_vectors(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    run_import(deps, faq_kb, [entry(f"question {i}", tags=["t"]) for i in range(12)])
    assert index_count(deps, faq_kb) == 12
    delete_kb(deps, faq_kb.tenant_id, faq_kb.id)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    while queue.waiting("lifecycle"):
        queue.deliver("lifecycle", lifecycle.handle, deps)
    assert deps.kbs.get(faq_kb.id) is None
    assert entries_of(deps, faq_kb) == {} and index_count(deps, faq_kb) == 0
    assert deps.faq.tags(faq_kb.id) == []


def test_a_resumed_replace_goes_on_as_append_from_its_stored_plan(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    """The replace's deletions ran and a batch was written when the worker died; the redelivery must not
    diff the knowledge base again (it would delete what the import itself wrote): it executes the plan."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.stages import faq_import as worker

    run_import(deps, faq_kb, [entry("old entry")])
    rows = [entry(f"new {i}") for i in range(80)]
    model.texts.clear()
    model.fail_after = 60  # batch 1 (50 texts) indexes, batch 2 dies after its rows were written
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=rows, mode="replace"))
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.deliver(QUEUE, worker.handle, deps)
    assert "old entry" not in entries_of(deps, faq_kb)  # the deletions happened once
    model.fail_after = None
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "completed"
    assert view["progress"]["effective_mode"] == "append" and view["progress"]["deleted"] == 1
    assert view["progress"]["added"] == 80
    assert len(entries_of(deps, faq_kb)) == 80 and index_count(deps, faq_kb) == 80


def test_a_throttled_provider_puts_the_import_back_without_spending_a_try(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.stages import faq_import as worker

    deps.settings = dataclasses.replace(deps.settings, embed_max_attempts=1)  # no in-process retry
    model.errors = [ModelThrottled("slow down", retry_after=30)]
    task = start_import(
        deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("q1"), entry("q2")])
    )
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    response = queue.deliver(QUEUE, worker.handle, deps)
    assert response["batchItemFailures"] == []  # not a failed try
    assert queue.sent[-1].delay_seconds == 30 and json.loads(queue.sent[-1].body)["deferrals"] == 1
    drain(deps)
    assert task_view(deps, task.id)["status"] == "completed" and len(entries_of(deps, faq_kb)) == 2


def test_a_rejected_embedding_fails_the_import_at_once_and_frees_the_knowledge_base(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.faq.importing import last_result

    model.errors = [ModelRequestError("input too long")]
    view = run_import(deps, faq_kb, [entry("q1")])
    assert view["status"] == "failed" and "rejected" in view["progress"]["error"]
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue) and queue.dead_letters(QUEUE) == []
    assert deps.faq.get_lease(faq_kb.id) is None
    assert last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)["status"] == "failed"


def test_the_last_result_gives_a_fresh_download_link_and_a_dry_run_keeps_the_upload(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
    from chalicelib.faq.importing import last_result, start_import
    from chalicelib.faq.uploads import upload_url

    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    grant = upload_url(deps, faq_kb.tenant_id, faq_kb.id, FaqUploadUrlRequest(file_name="faq.json"))
    inbox.post_presigned(grant["fields"], json.dumps({"entries": [entry("ok"), entry("")]}).encode())
    start_import(
        deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=grant["object_key"], dry_run=True)
    )
    drain(deps)
    assert inbox.exists(inbox.url_for(grant["object_key"]))  # still there for the real import
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=grant["object_key"]))
    drain(deps)
    assert not inbox.exists(inbox.url_for(grant["object_key"]))
    view = task_view(deps, task.id)
    assert "failed_rows_url" not in view["progress"] and "plan_url" not in view["progress"]  # internal
    result = last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)
    assert result["task_id"] == task.id and "failed_rows_url" not in result
    csv_bytes = download(deps, result["failed_rows_download"])
    assert csv_bytes.startswith(b"\xef\xbb\xbfreason,") and b"the question is empty" in csv_bytes


def _workbook_with(part: str, edit: Callable[[bytes], bytes]) -> bytes:
    """A real one-sheet workbook with one of its parts edited (a damaged upload)."""
    import io
    import zipfile

    from openpyxl import Workbook

    book = Workbook()
    book.active.append(["question", "answer"])
    book.active.append(["q", "a"])
    original, damaged = io.BytesIO(), io.BytesIO()
    book.save(original)
    with zipfile.ZipFile(original) as source, zipfile.ZipFile(damaged, "w") as target:
        for name in source.namelist():
            data = source.read(name)
            target.writestr(name, edit(data) if name == part else data)
    return damaged.getvalue()


# What a mutation fuzz of read_rows found escaping (each took the import through retries to its DLQ).
UNREADABLE_UPLOADS = {
    "not-a-workbook": ("faq.xlsx", b"this is not a workbook", "spreadsheet cannot be read"),
    "sheet-xml-broken": (
        "faq.xlsx",
        _workbook_with("xl/worksheets/sheet1.xml", lambda xml: xml[: len(xml) // 2]),
        "spreadsheet cannot be read",
    ),
    "unknown-attribute": (
        "faq.xlsx",
        _workbook_with("[Content_Types].xml", lambda xml: xml.replace(b"PartName=", b"PartNaie=", 1)),
        "spreadsheet cannot be read",
    ),
    "json-nested-too-deep": ("faq.json", b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}


@pytest.mark.parametrize("upload", UNREADABLE_UPLOADS, ids=str)
def test_an_unreadable_upload_fails_the_import_and_frees_the_knowledge_base(
    deps: Services, faq_kb: KnowledgeBase, upload: str
) -> None:
    from chalicelib.faq.commands import FaqImportRequest, FaqUploadUrlRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.uploads import upload_url

    file_name, data, reason = UNREADABLE_UPLOADS[upload]
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    grant = upload_url(deps, faq_kb.tenant_id, faq_kb.id, FaqUploadUrlRequest(file_name=file_name))
    inbox.post_presigned(grant["fields"], data)
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=grant["object_key"]))
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "failed" and reason in view["progress"]["error"], view
    assert deps.faq.get_lease(faq_kb.id) is None
    assert not inbox.exists(inbox.url_for(grant["object_key"]))


def test_an_update_the_provider_cannot_embed_changes_nothing(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.domain.errors import ServiceUnavailable
    from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate
    from chalicelib.faq.entries import create_entry, get_entry, update_entry

    created = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Opening hours", similar_questions=["when open"], answers=["9-5"]),
    )
    deps.settings = dataclasses.replace(deps.settings, embed_max_attempts=1)
    model.errors = [ModelUnavailable("down")]
    with pytest.raises(ServiceUnavailable) as raised:
        update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            created.id,
            FaqEntryUpdate(similar_questions=["what time open"]),
        )
    assert (raised.value.status, raised.value.code) == (503, "index_unavailable")
    assert get_entry(deps, faq_kb.tenant_id, faq_kb.id, created.id).similar_questions == ["when open"]
    assert index_count(deps, faq_kb, created.id) == 2
    assert search(deps, faq_kb, "when open")[0]["entry_id"] == created.id


def test_a_store_that_fails_planning_on_every_try_fails_the_import_and_frees_the_knowledge_base(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the last try the task is failed and the lease released, as for a failure while writing; the
    knowledge base was locked for the lease's 3 hours."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("Parking")]))

    def throttled(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("ProvisionedThroughputExceededException")

    monkeypatch.setattr(deps.faq, "page_entries", throttled)
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "failed" and "last try" in view["progress"]["error"]
    assert deps.faq.get_lease(faq_kb.id) is None
    monkeypatch.undo()
    assert run_import(deps, faq_kb, [entry("Parking")])["progress"]["added"] == 1  # free again


def test_entries_a_failed_import_wrote_but_never_indexed_go_and_the_same_file_then_imports(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    rows = [entry(f"question {i}") for i in range(100)]
    fresh_cache(deps)
    model.fail_after = 60  # the first batch is indexed; the second fails on every try
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=rows))
    drain(deps)
    assert task_view(deps, task.id)["status"] == "failed"
    stored = entries_of(deps, faq_kb)
    assert stored and all(e.indexed for e in stored.values())  # no entry no search can find
    assert all(index_count(deps, faq_kb, e.id) > 0 for e in stored.values())
    model.fail_after = None
    again = run_import(deps, faq_kb, rows)  # the same file once the provider is back
    assert again["status"] == "completed" and again["progress"]["added"] == 100 - len(stored)
    assert [h["standard_question"] for h in search(deps, faq_kb, "question 77")][:1] == ["question 77"]


def test_replace_takes_the_files_tags_and_switches_for_an_entry_whose_content_is_unchanged(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    run_import(deps, faq_kb, [entry("Parking", "Level 2", tags=["old"])])
    embedded = len(model.texts)
    view = run_import(
        deps,
        faq_kb,
        [entry("Parking", "Level 2", tags=["new"], is_enabled=False, answer_all=True)],
        mode="replace",
    )
    assert view["progress"]["merged"] == 1 and view["progress"]["skipped"] == 0
    parking = entries_of(deps, faq_kb)["Parking"]
    assert (parking.tags, parking.is_enabled, parking.answer_all) == (["new"], False, True)
    assert len(model.texts) == embedded  # nothing embedded again
    assert search(deps, faq_kb, "Parking") == []  # switched off: out of search
    again = run_import(
        deps,
        faq_kb,
        [entry("Parking", "Level 2", tags=["new"], is_enabled=False, answer_all=True)],
        mode="replace",
    )
    assert again["progress"]["skipped"] == 1  # the same file twice: nothing to do


def test_a_knowledge_base_deleted_while_an_import_writes_is_purged_after_the_import_ends(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete waits for the import's lease (the import sees the knowledge base deleting at its next
    delivery and ends), so its purge runs after the last write: no entry or vector is left behind."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    fresh_cache(deps)
    real_embed, calls = CountingEmbedding.embed, []

    def delete_meanwhile(self: CountingEmbedding, texts: Any) -> Any:
        calls.append(len(texts))
        if len(calls) == 2:  # the owner deletes the knowledge base while batch 2 embeds
            delete_kb(deps, faq_kb.tenant_id, faq_kb.id)
            queue.deliver("lifecycle", lifecycle.handle, deps, due_only=True)  # the delete task's first run
        return real_embed(self, texts)

    monkeypatch.setattr(CountingEmbedding, "embed", delete_meanwhile)
    start_import(
        deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry(f"q {i}") for i in range(150)])
    )
    drain(deps)
    for _ in range(20):  # the delete's later runs, once the import gave the lease back
        if not queue.waiting("lifecycle"):
            break
        queue.deliver("lifecycle", lifecycle.handle, deps)
    left, _ = deps.faq.page_entries(faq_kb.id, "", 1000)
    space = IndexSpace.of(deps.embedding_model(faq_kb.embedding_model_id))
    assert left == [] and deps.engine().count(space, faq_kb.id, None) == 0
    assert deps.kbs.get(faq_kb.id) is None


# ---------------------------------------------------------------- the import's end, its limits, its start


def test_a_final_save_that_fails_is_redone_and_the_import_stays_completed(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end's save throttled once: the source and plan were already deleted, so the redelivery planned
    again, found no source and failed an import whose every row was in."""
    from chalicelib.domain.types import TaskStatus
    from chalicelib.faq.importing import last_result

    real, failed_once = deps.tasks.save_progress, []

    def save_progress(task: Any) -> bool:
        if task.status is TaskStatus.COMPLETED and not failed_once:
            failed_once.append(task.id)
            raise ConnectionError("ProvisionedThroughputExceededException")
        return real(task)

    monkeypatch.setattr(deps.tasks, "save_progress", save_progress)
    view = run_import(deps, faq_kb, [entry(f"q{i}") for i in range(5)])
    assert failed_once and view["status"] == "completed", view["progress"]
    assert last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)["status"] == "completed"
    assert len(entries_of(deps, faq_kb)) == 5 and deps.faq.get_lease(faq_kb.id) is None
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    assert inbox.keys(f"faq-imports/{faq_kb.tenant_id}/{faq_kb.id}/") == []  # source and plan gone after


def test_a_store_that_fails_after_the_final_save_never_turns_the_import_failed(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Deleting the source fails on every try (after the save, now): the import stays completed, and once
    the store answers, any delivery of the message only tidies up (objects, lease)."""
    from chalicelib.faq.importing import last_result
    from chalicelib.stages import faq_import as worker

    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)

    def refused(url: str) -> None:
        raise ConnectionError("SlowDown")

    monkeypatch.setattr(inbox, "delete", refused)
    view = run_import(deps, faq_kb, [entry(f"q{i}") for i in range(5)])
    assert view["status"] == "completed", view["progress"]
    assert last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)["status"] == "completed"
    monkeypatch.undo()
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw(QUEUE, {"task_id": view["id"]})  # a duplicate of the message, after the save
    queue.deliver(QUEUE, worker.handle, deps)
    assert task_view(deps, view["id"])["status"] == "completed" and len(entries_of(deps, faq_kb)) == 5
    assert inbox.keys(f"faq-imports/{faq_kb.tenant_id}/{faq_kb.id}/") == []
    assert deps.faq.get_lease(faq_kb.id) is None


def test_a_dry_run_whose_save_fails_reports_on_the_next_delivery(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.domain.types import TaskStatus

    real, failed_once = deps.tasks.save_progress, []

    def save_progress(task: Any) -> bool:
        if task.status is TaskStatus.COMPLETED and not failed_once:
            failed_once.append(task.id)
            raise ConnectionError("RequestTimeout")
        return real(task)

    monkeypatch.setattr(deps.tasks, "save_progress", save_progress)
    view = run_import(deps, faq_kb, [entry("ok"), entry("")], dry_run=True)
    assert failed_once and view["status"] == "completed", view["progress"]
    assert view["progress"]["success"] == 1 and view["progress"]["failed"] == 1


def _upload(deps: Services, kb: KnowledgeBase, file_name: str, data: bytes) -> str:
    from chalicelib.faq.commands import FaqUploadUrlRequest
    from chalicelib.faq.uploads import upload_url

    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    grant = upload_url(deps, kb.tenant_id, kb.id, FaqUploadUrlRequest(file_name=file_name))
    inbox.post_presigned(grant["fields"], data)
    return str(grant["object_key"])


def test_an_upload_over_the_size_limit_is_refused_when_the_import_starts(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.domain.errors import PayloadTooLarge
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.rows import MAX_FILE_BYTES

    key = _upload(deps, faq_kb, "faq.csv", b"question,answers\nq,a\n")
    # S3 refuses the form a bigger body; a store that does not hold it to its bound (moto) takes it
    deps.inbox.save(key, b"question,answers\n" + b"q,a\n" * (MAX_FILE_BYTES // 4))
    with pytest.raises(PayloadTooLarge) as refused:
        start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    assert refused.value.status == 413 and refused.value.code == "import_file_too_large"
    assert deps.faq.get_lease(faq_kb.id) is None and deps.queue.waiting(QUEUE) == []  # type: ignore[attr-defined]


def test_a_file_replaced_by_a_larger_one_after_the_start_fails_with_the_reason(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The upload URL still works after the import started: the worker checks the size again."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import
    from chalicelib.faq.rows import MAX_FILE_BYTES

    key = _upload(deps, faq_kb, "faq.csv", b"question,answers\nq,a\n")
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore)
    inbox.save(key, b"question,answers\n" + b"q,a\n" * (MAX_FILE_BYTES // 4))
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "failed" and "MB" in view["progress"]["error"], view["progress"]
    assert deps.faq.get_lease(faq_kb.id) is None


OVER_THE_LIMITS = {
    # name: (file name, content, limit patched down, reason)
    "csv-rows": (
        "faq.csv",
        "question,answers\n" + "".join(f"q{i},a\n" for i in range(6)),
        "more than 5 entries",
    ),
    "json-rows": ("faq.json", json.dumps([entry(f"q{i}") for i in range(6)]), "more than 5 entries"),
    "csv-blank-lines": ("faq.csv", "question,answers\nq,a\n" + "\n" * 200, "more lines"),
    "csv-cells": ("faq.csv", "question,answers\n" + "q,a" + ",x" * 200 + "\n", "more cells"),
}


@pytest.mark.parametrize("case", OVER_THE_LIMITS, ids=str)
def test_a_file_past_a_row_or_cell_limit_fails_at_once_and_frees_the_knowledge_base(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    from chalicelib.faq import rows
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    monkeypatch.setattr(rows, "MAX_ROWS", 5)
    monkeypatch.setattr(rows, "MAX_CSV_LINES", 100)
    monkeypatch.setattr(rows, "MAX_CELLS", 100)
    file_name, text, reason = OVER_THE_LIMITS[case]
    key = _upload(deps, faq_kb, file_name, text.encode())
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key))
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "failed" and reason in view["progress"]["error"], view["progress"]
    assert "split it into several imports" in view["progress"]["error"]
    assert deps.faq.get_lease(faq_kb.id) is None and entries_of(deps, faq_kb) == {}


def test_a_spreadsheet_is_bounded_while_it_streams(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An xlsx is compressed: 50,000 answers of 20,000 characters are 2 MB; the text is counted as the rows
    stream, and rows padded far to the right or left blank do not count."""
    import openpyxl

    from chalicelib.faq import rows
    from chalicelib.faq.rows import SourceError, read_rows

    def workbook(body: list[list[Any]]) -> bytes:
        book = openpyxl.Workbook()
        sheet = book.active
        assert sheet is not None
        for row in [["question", "answers"], *body]:
            sheet.append(row)
        out = io.BytesIO()
        book.save(out)
        return out.getvalue()

    monkeypatch.setattr(rows, "MAX_TEXT_CHARS", 1000)
    with pytest.raises(SourceError, match="more text"):
        read_rows(workbook([[f"q{i}", "x" * 200] for i in range(10)]), "faq.xlsx")
    padded = workbook([["q1", "a1", None, None, "", None], [None, None], ["q2", "a2"]])
    assert [r.question for r in read_rows(padded, "faq.xlsx")] == ["q1", "q2"]
    monkeypatch.setattr(rows, "MAX_ROWS", 1)
    with pytest.raises(SourceError, match="more than 1 entries"):
        read_rows(padded, "faq.xlsx")


def test_a_queue_that_does_not_answer_is_a_503_and_leaves_no_queued_task(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The task row was written before the send: a failed send left it `queued` with nothing to run it,
    and the caller got a 500."""
    from chalicelib.domain.errors import ServiceUnavailable
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    queue, inbox = deps.queue, deps.inbox
    assert isinstance(queue, MemoryTaskQueue) and isinstance(inbox, MemoryFileStore)
    before = set(deps.tasks._rows)  # type: ignore[attr-defined]
    queue.make_unavailable(QUEUE)
    for dry_run in (False, True):
        with pytest.raises(ServiceUnavailable) as refused:
            start_import(
                deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("q")], dry_run=dry_run)
            )
        assert refused.value.status == 503 and refused.value.code == "queue_unavailable"
    tasks = [deps.tasks.get(t) for t in set(deps.tasks._rows) - before]  # type: ignore[attr-defined]
    assert len(tasks) == 2 and all(t is not None and t.status.value == "failed" for t in tasks)
    assert deps.faq.get_lease(faq_kb.id) is None
    assert inbox.keys(f"faq-imports/{faq_kb.tenant_id}/{faq_kb.id}/") == []  # the inline sources
    queue.make_unavailable(QUEUE, False)
    assert run_import(deps, faq_kb, [entry("q")])["progress"]["added"] == 1  # the retry goes through
