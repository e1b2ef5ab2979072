"""A replace import writes each new entry before it deletes the old entry it replaces. It used to count a
growing replacement against a usage that credited the old entries' bytes as coming back (a credit read when
the batch started); an entries-API delete of such an old entry while the batch ran gave its bytes back at
once, another writer took that room, and the batch still credited it: the usage ended above the quota. Now
each new entry takes its old entry's count over with one conditional write (replacing.move_count) and only
what it adds must fit: an API delete before the move leaves the new entry counted in full (refused if it
does not fit), one after it gives back nothing. Redelivered, failed and stopped batches count every byte
once: the usage is the sum of what the rows count."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries as api
from chalicelib.faq import import_claims
from chalicelib.faq.reservations import question_key
from chalicelib.services.quotas import take_storage

from .test_faq import drain, entries_of, entry, run_import
from .test_faq_replace_crash_points import WorkerDied, _deliver_once, _fail_once
from .test_faq_storage_counting import near_quota, used

OLD = [entry("Alpha", "a" * 100), entry("Beta", "b" * 100)]
NEW = [entry("Alpha", "a" * 105), entry("Beta", "b" * 180)]


def _quota(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_quota


def _fill(deps: Services, kb: KnowledgeBase) -> int:
    """Another writer takes every byte left under the quota; returns how many."""
    taken = _quota(deps, kb) - used(deps, kb)
    take_storage(deps, kb.tenant_id, taken, "another writer")
    return taken


def _balanced(deps: Services, kb: KnowledgeBase, other: int = 0) -> None:
    """The usage is what the rows count (and `other`, another writer's bytes), and each row counts its
    bytes: nothing counted twice, nothing lost."""
    stored = entries_of(deps, kb).values()
    assert [e.counted_bytes for e in stored] == [e.content_bytes() for e in stored]
    assert used(deps, kb) == sum(e.counted_bytes for e in stored) + other


def _start(deps: Services, kb: KnowledgeBase, rows: list[dict[str, Any]]) -> str:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    return start_import(deps, kb.tenant_id, kb.id, FaqImportRequest(entries=rows, mode="replace")).id


def test_an_old_entry_deleted_through_the_api_mid_batch_does_not_let_the_quota_overrun(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_import(deps, faq_kb, OLD)
    old_alpha = entries_of(deps, faq_kb)["Alpha"]
    near_quota(deps, faq_kb, 85)  # the plan sees room for both growths (5 + 80)
    tenant = deps.tenants.get(faq_kb.tenant_id)
    assert tenant is not None
    quota = tenant.storage_quota
    real = import_claims.take_storage
    calls: list[Any] = []

    def racing(*args: Any, **kw: Any) -> None:
        real(*args, **kw)
        calls.append(args)
        if (
            len(calls) == 1
        ):  # Alpha's replacement counted: the user deletes old Alpha, another write takes the room
            api.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, old_alpha.id)
            now = deps.tenants.get(faq_kb.tenant_id)
            assert now is not None
            take_storage(deps, faq_kb.tenant_id, quota - now.storage_used, "another writer")

    monkeypatch.setattr(import_claims, "take_storage", racing)
    run_import(deps, faq_kb, NEW, mode="replace")
    assert used(deps, faq_kb) <= quota, f"overrun by {used(deps, faq_kb) - quota}"


def test_an_old_entry_deleted_through_the_api_before_its_count_moves_leaves_its_replacement_counted_in_full(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """Old Beta is deleted (its bytes given back) and the room taken before Beta's replacement is counted:
    nothing of old Beta's count is left to move, so the replacement must fit in full, and does not."""
    run_import(deps, faq_kb, OLD)
    old_beta = entries_of(deps, faq_kb)["Beta"]
    near_quota(deps, faq_kb, 85)
    repo: Any = deps.faq
    real = repo.claim_questions
    other: list[int] = []

    def claim(kb_id: str, entry_id: str, keys: Any, *args: Any, **kwargs: Any) -> Any:
        if not other and entry_id != old_beta.id and question_key("Beta") in keys:  # Beta's replacement
            api.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, old_beta.id)
            other.append(_fill(deps, faq_kb))
        return real(kb_id, entry_id, keys, *args, **kwargs)

    repo.claim_questions = claim
    view = run_import(deps, faq_kb, NEW, mode="replace")

    assert other, "Beta's replacement was not claimed"
    failures = view["progress"]["failures"]
    assert [(f["question"], f["category"]) for f in failures] == [("Beta", "quota")], failures
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"Alpha"} and stored["Alpha"].answers == ["a" * 105]
    assert used(deps, faq_kb) <= _quota(deps, faq_kb)
    _balanced(deps, faq_kb, other[0])


def test_an_old_entry_deleted_through_the_api_after_its_count_moved_gives_back_nothing(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old Alpha's count is on its replacement when the user deletes it: the delete gives back nothing, so
    no room opens for another writer, and every row still fits as the plan counted."""
    run_import(deps, faq_kb, OLD)
    old_alpha = entries_of(deps, faq_kb)["Alpha"]
    near_quota(deps, faq_kb, 85)
    real = import_claims.take_storage
    around: list[int] = []

    def racing(*args: Any, **kw: Any) -> None:
        real(*args, **kw)
        if not around:  # Alpha's replacement counted
            around.append(used(deps, faq_kb))
            api.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, old_alpha.id)
            around.append(used(deps, faq_kb))

    monkeypatch.setattr(import_claims, "take_storage", racing)
    view = run_import(deps, faq_kb, NEW, mode="replace")

    assert around[0] == around[1], "the delete gave back old Alpha's bytes, counted on its replacement"
    assert view["status"] == "completed", view["progress"]
    assert used(deps, faq_kb) == _quota(deps, faq_kb)
    _balanced(deps, faq_kb)


@pytest.mark.parametrize("deleted", [False, True], ids=["redelivered", "redelivered, old Alpha deleted"])
def test_a_batch_redelivered_after_its_rows_were_written_counts_each_byte_once(
    deps: Services, faq_kb: KnowledgeBase, deleted: bool
) -> None:
    """The worker dies before Beta's replacement is marked indexed (Alpha's is): the redelivery purges it,
    puts old Beta's count back, moves it again, and the batch ends counted once, at the quota. Old Alpha,
    still there, counts nothing then (its count is on its written replacement): deleted through the API
    while the redelivery runs, it gives back nothing, so another writer takes only the room the purge
    opened, and Beta no longer fits (the redelivery credited old Alpha's bytes again: over the quota)."""
    run_import(deps, faq_kb, OLD)
    old_alpha = entries_of(deps, faq_kb)["Alpha"]
    near_quota(deps, faq_kb, 85)
    failed = _fail_once(
        deps,
        "put_entry",
        lambda e, expected=None: (
            e.standard_question == "Beta" and expected is not None and not expected.indexed
        ),
    )
    _start(deps, faq_kb, NEW)
    _deliver_once(deps)
    assert failed, "the crash point was not reached"
    repo: Any = deps.faq
    real = repo.claim_questions
    other: list[int] = []
    given_back: list[int] = []

    def claim(kb_id: str, entry_id: str, keys: Any, *args: Any, **kwargs: Any) -> Any:
        if deleted and not other and question_key("Beta") in keys:  # the redelivery claims Beta's again
            before = used(deps, faq_kb)
            api.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, old_alpha.id)
            given_back.append(before - used(deps, faq_kb))
            other.append(_fill(deps, faq_kb))
        return real(kb_id, entry_id, keys, *args, **kwargs)

    repo.claim_questions = claim
    drain(deps)

    assert given_back == ([0] if deleted else []), "old Alpha's bytes, counted on its replacement, given back"
    stored = entries_of(deps, faq_kb)
    beta = ["b" * 100] if deleted else ["b" * 180]  # (deleted: the room the purge opened was taken)
    assert [stored[q].answers for q in ("Alpha", "Beta")] == [["a" * 105], beta]
    assert used(deps, faq_kb) <= _quota(deps, faq_kb)
    _balanced(deps, faq_kb, sum(other))


def test_a_batch_that_fails_before_its_rows_are_written_gives_the_moved_counts_back(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The row write fails after both counts moved: they go back onto the old entries (which still count
    their bytes, as a search still finds them), and the redelivery moves them again, counted once."""
    run_import(deps, faq_kb, OLD)
    before = {e.standard_question: e.counted_bytes for e in entries_of(deps, faq_kb).values()}
    near_quota(deps, faq_kb, 85)
    failed = _fail_once(deps, "put_entries")
    _start(deps, faq_kb, NEW)
    _deliver_once(deps)
    assert failed, "the crash point was not reached"
    assert {e.standard_question: e.counted_bytes for e in entries_of(deps, faq_kb).values()} == before
    _balanced(deps, faq_kb)
    drain(deps)

    stored = entries_of(deps, faq_kb)
    assert [stored[q].answers for q in ("Alpha", "Beta")] == [["a" * 105], ["b" * 180]]
    assert used(deps, faq_kb) == _quota(deps, faq_kb)
    _balanced(deps, faq_kb)


def test_an_import_that_stops_after_writing_replacements_it_never_indexed_keeps_the_old_counts(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch dies once its rows are written (not indexed), and the import then fails for good: the old
    entries stay, counting their bytes again, and the replacements go with what they counted."""
    from chalicelib.faq import importing

    run_import(deps, faq_kb, OLD)
    start = used(deps, faq_kb)
    _fail_once(deps, "put_entry", lambda e, expected=None: expected is not None and not expected.indexed)
    task_id = _start(deps, faq_kb, NEW)
    _deliver_once(deps)

    def lost(*args: Any) -> None:
        raise WorkerDied("the store")

    monkeypatch.setattr(importing, "_renew", lost)
    importing.run(deps, task_id, last_try=True)

    stored = entries_of(deps, faq_kb)
    assert [stored[q].answers for q in ("Alpha", "Beta")] == [["a" * 100], ["b" * 100]]
    assert used(deps, faq_kb) == start
    _balanced(deps, faq_kb)


class Killed(BaseException):
    """The process dies (a timeout, out of memory): no handler runs."""


def _gap(deps: Services, kb: KnowledgeBase) -> int:
    """The usage above what the stored entries count (0 when every byte is counted once)."""
    return used(deps, kb) - sum(e.counted_bytes for e in entries_of(deps, kb).values())


def _killed_between_the_move_and_the_count(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> str:
    def die(*args: Any, **kw: Any) -> None:
        raise Killed()

    monkeypatch.setattr(import_claims, "take_storage", die)
    monkeypatch.setattr(import_claims, "give_back_moved", lambda *a, **k: None)  # no handler runs
    task_id = _start(deps, kb, NEW)
    with pytest.raises(Killed):
        _deliver_once(deps)
    monkeypatch.undo()
    assert entries_of(deps, kb)["Alpha"].counted_bytes == 0  # the move happened, the count did not
    return task_id


def test_a_delivery_killed_between_a_move_and_its_count_leaves_no_byte_counted_twice(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The redelivery puts the count back on the old entry (marked with the replacement it was moved to)
    before moving it again: without it the new entry was counted in full and the old bytes stayed in the
    usage with no row counting them."""
    from .test_faq import QUEUE

    run_import(deps, faq_kb, OLD)
    task_id = _killed_between_the_move_and_the_count(deps, faq_kb, monkeypatch)
    deps.queue.send_raw(QUEUE, {"task_id": task_id})  # the message is back after its visibility timeout
    drain(deps)
    stored = entries_of(deps, faq_kb)
    assert {q: e.content_bytes() for q, e in stored.items()} == {
        q: e.counted_bytes for q, e in stored.items()
    }
    assert _gap(deps, faq_kb) == 0


def test_an_import_that_stops_after_a_killed_move_gives_the_old_entry_its_count_back(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.faq import importing

    run_import(deps, faq_kb, OLD)
    before = used(deps, faq_kb)
    task_id = _killed_between_the_move_and_the_count(deps, faq_kb, monkeypatch)

    def lost(*args: Any) -> None:
        raise RuntimeError("the store")

    monkeypatch.setattr(importing, "_renew", lost)
    importing.run(deps, task_id, last_try=True)
    assert all(e.counted_bytes == e.content_bytes() for e in entries_of(deps, faq_kb).values())
    assert _gap(deps, faq_kb) == 0 and used(deps, faq_kb) == before
