"""A document's place in its tenant's pipeline is a lease (`pipeline_lease_seconds`): a long transcription
of a document that queued for its place must keep it, and a message whose own place lapsed anyway (a job
longer than the lease between two resumes, a worker killed and redelivered after the queue's visibility
timeout) must go on or wait at the door again, never be dropped as stale (audit: the resume was dropped,
the job never polled again, the row left `processing`)."""

from __future__ import annotations

import time as real_time
from dataclasses import replace
from types import SimpleNamespace

import pytest
from scripted_transcribe import FakeClock, ScriptedTranscribe, wav

import chalicelib.services.fairness as fairness
from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase
from chalicelib.parsers.asr import TranscribeAsr

from .conftest import deliver, upload


class Clock:
    """fairness's wall clock, moved on by `skip` (the pipeline's lease is measured on it)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        monkeypatch.setattr(fairness, "time", SimpleNamespace(time=self.time))

    def time(self) -> float:
        return real_time.time() + self.offset

    def skip(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


@pytest.fixture
def service(deps: Services) -> ScriptedTranscribe:
    """A Transcribe job that runs on and on: every docreader run polls it once and hands over a resume."""
    deps.settings = replace(deps.settings, tenant_pipeline_cap=1)
    scripted = ScriptedTranscribe(deps.inbox, statuses=["IN_PROGRESS"] * 1000)
    fake = FakeClock()
    asr = TranscribeAsr(
        scripted,
        deps.inbox,
        bucket=deps.settings.files_bucket,
        poll_seconds=5,
        poll_budget_seconds=5,
        sleep=fake.sleep,
        clock=fake,
    )
    deps.replace_ocr_asr(None, asr)
    return scripted


def transcribing_after_a_wait(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, service: ScriptedTranscribe
) -> Knowledge:
    """One place: a note goes first, the audio waits at the door (a ticket), is woken and starts its job."""
    upload(deps, kb, "notes.md")
    audio = upload(deps, kb, "talk.wav", wav())
    deliver(deps, "docreader")  # the note enters; the audio waits
    deliver(deps, "chunking")
    deliver(deps, "embedding")  # the note is indexed: its place wakes the audio
    deliver(deps, "docreader")  # the backstop (stale) and the wake: the audio enters and starts its job
    [resume] = [m.json() for m in queue.waiting("docreader")]
    assert len(service.started) == 1 and resume["cursor"] == "transcribe" and resume["door_ticket"]
    return audio


def resumes(queue: MemoryTaskQueue, audio: Knowledge) -> list[dict[str, str]]:
    return [m.json() for m in queue.waiting("docreader") if m.json()["knowledge_id"] == audio.id]


def test_a_resume_after_its_lease_lapsed_takes_its_place_back_and_polls_the_job(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, service: ScriptedTranscribe, clock: Clock
) -> None:
    audio = transcribing_after_a_wait(deps, kb, queue, service)
    checks = len(service.checks)
    clock.skip(deps.settings.pipeline_lease_seconds + 60)  # the job ran longer than the lease

    deliver(deps, "docreader")

    assert len(service.checks) > checks  # the job is polled again, not forgotten
    assert [r["cursor"] for r in resumes(queue, audio)] == ["transcribe"]
    place = deps.tenants.pipeline_door(kb.tenant_id).place_of(audio.id)
    assert place is not None and place.expires >= clock.time()  # its place is its own again


def test_a_resume_renews_the_lease_so_a_long_job_keeps_its_place(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, service: ScriptedTranscribe, clock: Clock
) -> None:
    audio = transcribing_after_a_wait(deps, kb, queue, service)
    lease = deps.settings.pipeline_lease_seconds
    for _ in range(3):  # resumes far apart, each inside the lease: together far longer than one lease
        clock.skip(lease * 0.75)
        checks = len(service.checks)
        deliver(deps, "docreader")
        assert len(service.checks) > checks  # polled each time

    place = deps.tenants.pipeline_door(kb.tenant_id).place_of(audio.id)
    assert place is not None and place.expires >= clock.time() + lease * 0.9
    late = upload(deps, kb, "late.md", b"# Late\n\nThe tide.\n")
    deliver(deps, "docreader")  # the tenant's one place is still the audio's: the late note waits
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert [p.knowledge_id for p in door.live(clock.time())] == [audio.id]
    assert [w.knowledge_id for w in door.entries_of(late.id)] == [late.id]
    assert [r["cursor"] for r in resumes(queue, audio)] == ["transcribe"]
