"""A replace import's changed entry (same standard question, new answers) is a new entry in place of the old
one. The old one was deleted, with every entry the replace deletes, before any row was written: a worker
that died before the replacement was written (or an import that failed for good then) left neither, and a
search found nothing for the question. Now the old entry goes only once its replacement is written and
indexed; at every step between, one of the two is there and found, and a redelivery ends with exactly the
new one (its questions' reservations, its bytes counted once, no index entry of the old one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.faq import content_bytes
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq.reservations import question_key
from chalicelib.stages import faq_import as worker

from .test_faq import QUEUE, drain, entries_of, entry, index_count, run_import, search
from .test_faq_storage_counting import near_quota, used


class WorkerDied(Exception):
    """The worker stops here (a Lambda timeout, a crash): the message comes back."""


def _seed(deps: Services, kb: KnowledgeBase) -> None:
    run_import(
        deps,
        kb,
        [
            entry("Opening hours", "9 to 5", similar_questions=["when are you open"]),
            entry("Parking", "behind the building"),
            entry("Pets", "dogs welcome"),
        ],
    )


ROWS = [
    entry("Opening hours", "8 to 6", similar_questions=["when are you open"]),  # changed: replaces it
    entry("Parking", "behind the building"),  # unchanged: kept
]  # "Pets" is named by no row: deleted


def _found(deps: Services, kb: KnowledgeBase, text: str) -> list[list[str]]:
    """The answers of each entry a search for `text` finds with that standard question."""
    return [hit["answers"] for hit in search(deps, kb, text) if hit["standard_question"] == text]


def _fail_once(deps: Services, method: str, when: Callable[..., bool] = lambda *a: True) -> list[int]:
    """`deps.faq.<method>` raises WorkerDied on its first call `when` accepts; returns a list that counts
    the failures."""
    repo: Any = deps.faq
    real = getattr(repo, method)
    failed: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        if not failed and when(*args, **kwargs):
            failed.append(1)
            raise WorkerDied(method)
        return real(*args, **kwargs)

    setattr(repo, method, failing)
    return failed


def _deliver_once(deps: Services) -> None:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.deliver(QUEUE, worker.handle, deps)


def _start_replace(deps: Services, kb: KnowledgeBase) -> str:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    request = FaqImportRequest(entries=ROWS, mode="replace")
    return start_import(deps, kb.tenant_id, kb.id, request).id


def _converged(deps: Services, kb: KnowledgeBase, old_id: str, size_after: int) -> None:
    """Exactly the new entry: one hit with the new answers, nothing of the old one left anywhere."""
    stored = entries_of(deps, kb)
    assert set(stored) == {"Opening hours", "Parking"}
    hours = stored["Opening hours"]
    assert hours.id != old_id and hours.answers == ["8 to 6"] and hours.indexed
    assert _found(deps, kb, "Opening hours") == [["8 to 6"]]
    assert index_count(deps, kb, old_id) == 0 and index_count(deps, kb, hours.id) == 2
    holders = deps.faq.question_holders(
        kb.id, [question_key("Opening hours"), question_key("when are you open")]
    )
    assert {h.entry_id for h in holders.values()} == {hours.id}
    assert all(h.expires_at is None for h in holders.values())
    assert used(deps, kb) == size_after  # the old entry's bytes given back, the new one's counted once


#: the step the worker dies at: the repo call that raises there, and which of its calls (given the old
#: "Opening hours" entry's id)
CRASH_POINTS: dict[str, tuple[str, Callable[[str], Callable[..., bool]]]] = {
    "before the replacement is written": ("put_entries", lambda old: lambda *a: True),
    "before the replacement is marked indexed": (
        "put_entry",
        lambda old: (
            lambda entry, expected=None: (
                entry.standard_question == "Opening hours" and expected is not None and not expected.indexed
            )
        ),
    ),
    "before the old entry is deleted": ("delete_entries", lambda old: lambda kb_id, ids: old in ids),
}


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_the_old_or_the_new_entry_is_found_at_every_crash_point(
    deps: Services, faq_kb: KnowledgeBase, point: str
) -> None:
    _seed(deps, faq_kb)
    before = entries_of(deps, faq_kb)
    old_id, pets_id = before["Opening hours"].id, before["Pets"].id
    method, when = CRASH_POINTS[point]
    failed = _fail_once(deps, method, when(old_id))
    _start_replace(deps, faq_kb)
    _deliver_once(deps)
    assert failed, "the crash point was not reached"
    assert _found(deps, faq_kb, "Opening hours") in (
        [["9 to 5"]],
        [["8 to 6"]],
        [["9 to 5"], ["8 to 6"]],
        [["8 to 6"], ["9 to 5"]],
    )
    assert entries_of(deps, faq_kb).get("Pets") is None  # a deletion no row replaces is not held back
    drain(deps)
    new = entries_of(deps, faq_kb)["Opening hours"]
    _converged(deps, faq_kb, old_id, new.counted_bytes + entries_of(deps, faq_kb)["Parking"].counted_bytes)
    assert index_count(deps, faq_kb, pets_id) == 0


def test_an_import_that_fails_for_good_before_the_replacement_keeps_the_old_entry(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """Every try dies before the replacement is written: the task fails, the old entry is still there."""
    _seed(deps, faq_kb)
    repo: Any = deps.faq

    def dead(*args: Any, **kwargs: Any) -> Any:
        raise WorkerDied("put_entries")

    repo.put_entries = dead
    task_id = _start_replace(deps, faq_kb)
    drain(deps)
    task = deps.tasks.get(task_id)
    assert task is not None and task.status.value == "failed"
    assert _found(deps, faq_kb, "Opening hours") == [["9 to 5"]]
    hours = entries_of(deps, faq_kb)["Opening hours"]
    holder = deps.faq.question_holders(faq_kb.id, [question_key("Opening hours")])
    assert holder[question_key("Opening hours")].entry_id == hours.id


def test_a_replacement_near_the_quota_fits_in_the_bytes_of_the_entry_it_replaces(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The plan counts the old entry's bytes as freed for its replacement; written before the old entry
    goes, the replacement is checked on what it adds to them, as the plan checked it."""
    run_import(deps, faq_kb, [entry("Opening hours", "9 to 5"), entry("Parking", "behind the building")])
    old = entries_of(deps, faq_kb)["Opening hours"]
    rows = [entry("Opening hours", "9 to 5, and 10 to 4 on Sundays"), entry("Parking", "behind the building")]
    grows_by = content_bytes("Opening hours", [], [], ["9 to 5, and 10 to 4 on Sundays"]) - old.counted_bytes
    assert grows_by > 0
    near_quota(deps, faq_kb, grows_by)
    view = run_import(deps, faq_kb, rows, mode="replace")
    assert view["status"] == "completed", view["progress"]
    assert (view["progress"]["deleted"], view["progress"]["added"]) == (1, 1)
    new = entries_of(deps, faq_kb)
    assert new["Opening hours"].answers == ["9 to 5, and 10 to 4 on Sundays"]
    assert index_count(deps, faq_kb, old.id) == 0
    assert used(deps, faq_kb) == new["Opening hours"].counted_bytes + new["Parking"].counted_bytes


def test_an_entry_whose_replacement_fails_while_the_import_runs_stays_with_its_questions(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer took the quota the plan saw: the replacing row fails (`quota`) when it is written, and
    the entry it was sent for stays as it was, as one a row failing at planning stays (validation.py),
    its questions its own again."""
    from chalicelib.domain.errors import Forbidden
    from chalicelib.faq import import_claims

    _seed(deps, faq_kb)
    old, pets = entries_of(deps, faq_kb)["Opening hours"], entries_of(deps, faq_kb)["Pets"]
    near_quota(deps, faq_kb, 10_000)
    before = used(deps, faq_kb)

    def refused(*args: Any, **kwargs: Any) -> None:  # the replacement (the batch's one new entry)
        raise Forbidden("the entry does not fit", code="storage_quota_exceeded")

    monkeypatch.setattr(import_claims, "take_storage", refused)
    view = run_import(deps, faq_kb, ROWS, mode="replace")
    progress = view["progress"]
    assert (progress["failed"], progress["added"], progress["skipped"]) == (1, 0, 1), progress
    assert progress["deleted"] == 1 and progress["kept_for_failed_rows"] == 1  # "Pets" went, not it
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"Opening hours", "Parking"} and stored["Opening hours"].id == old.id
    assert stored["Opening hours"].counted_bytes == old.counted_bytes  # the count moved back onto it
    assert used(deps, faq_kb) == before - pets.counted_bytes  # "Pets" went; nothing else changed
    assert _found(deps, faq_kb, "Opening hours") == [["9 to 5"]]
    keys = [question_key("Opening hours"), question_key("when are you open")]
    holders = deps.faq.question_holders(faq_kb.id, keys)
    assert {k: (h.entry_id, h.expires_at) for k, h in holders.items()} == {k: (old.id, None) for k in keys}


def test_an_import_that_fails_for_good_after_a_replacement_was_written_deletes_the_old_entry(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker died once the replacement was written, and the import then failed for good before the
    batch was redone: its end deletes the old entry (no two entries keep the question), as the batch would."""
    from chalicelib.faq import importing

    _seed(deps, faq_kb)
    old_id = entries_of(deps, faq_kb)["Opening hours"].id
    _fail_once(deps, "delete_entries", lambda kb_id, ids: old_id in ids)
    task_id = _start_replace(deps, faq_kb)
    _deliver_once(deps)
    assert deps.faq.get_entry(faq_kb.id, old_id) is not None  # its row is left (its vectors went first)

    def lost(*args: Any) -> None:
        raise WorkerDied("the store")

    monkeypatch.setattr(importing, "_renew", lost)
    importing.run(deps, task_id, last_try=True)
    task = deps.tasks.get(task_id)
    assert task is not None and task.status.value == "failed"
    assert _found(deps, faq_kb, "Opening hours") == [["8 to 6"]]
    assert index_count(deps, faq_kb, old_id) == 0 and deps.faq.get_entry(faq_kb.id, old_id) is None
