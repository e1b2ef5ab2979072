"""A reviewer's cases of the write-once parse outputs: a duplicate whose first delivery died after closing the
stage still hands over; a delivery whose Markdown another took over reports what is stored; an assembly whose
attempt was cancelled meanwhile removes the ranges' parts (the plan stays)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import KnowledgeBase, Stage, StageMessage

from .conftest import drain, upload
from .test_late_range_writes import Reader, attempt_one_objects, fanned_out


def test_a_duplicate_hands_over_when_the_first_died_after_closing_the_stage(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.stages import docreader

    created = upload(deps, kb)
    msg = StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=1)
    real_finish, real_enqueue = docreader._finish, docreader.enqueue
    state = {"in_first": False, "fired": False}

    def enqueue(deps_: Any, stage: Stage, message: Any, *a: Any, **k: Any) -> Any:
        if state["in_first"] and stage == Stage.CHUNKING:
            raise RuntimeError("first delivery dies after closing the span, before its hand-over")
        return real_enqueue(deps_, stage, message, *a, **k)

    def finish(*args: Any) -> Any:
        if not state["fired"]:  # the duplicate has parsed; the first delivery goes ahead now
            state["fired"] = True
            state["in_first"] = True
            with contextlib.suppress(RuntimeError):  # it dies: the duplicate's ack ends the message
                docreader.run(deps, msg)
            state["in_first"] = False
        return real_finish(*args)

    monkeypatch.setattr(docreader, "enqueue", enqueue)
    monkeypatch.setattr(docreader, "_finish", finish)
    docreader.run(deps, msg)  # the duplicate: succeeds, its ack deletes the (shared) message
    queue.purge("docreader")
    assert queue.waiting("chunking"), "no hand-over: the document sits in processing with its span done"


def test_a_delivery_whose_markdown_was_taken_over_reports_what_is_stored(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.stages import docreader

    created = upload(deps, kb)
    row = deps.knowledge.get(created.id)
    real = files.save_if_absent
    fired: list[Any] = []

    def between(key: str, *args: Any) -> bool:
        if key.endswith(".images.json") and not fired:
            fired.append(docreader._store_outputs(deps, row, b"# B's parse, longer than A's\n", []))
        return real(key, *args)

    monkeypatch.setattr(files, "save_if_absent", between)
    a = docreader._store_outputs(deps, row, b"# A\n", [])
    stored, _ = files._objects[parsed_markdown_key(kb.tenant_id, created.id, 1)]
    assert a.markdown == stored


def test_an_assembly_cancelled_during_its_write_removes_the_range_parts(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.stages import docreader

    knowledge_id = fanned_out(deps, kb, Reader())
    real = docreader.kept_parse_write

    def cancelled_meanwhile(*args: Any) -> bool:
        deps.knowledge.cancel(knowledge_id, "cancelled by the user")
        return real(*args)

    monkeypatch.setattr(docreader, "kept_parse_write", cancelled_meanwhile)
    drain(deps, ("docreader",))
    left = attempt_one_objects(files, kb.tenant_id, knowledge_id)
    assert not [k for k in left if ".ranges/pages-" in k]
