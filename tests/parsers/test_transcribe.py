"""Amazon Transcribe (`TranscribeAsr`) against a scripted job API: one job per document attempt, named so a
redelivered message resumes it; the transcript read from the key we chose, never from the https location
the service answers; polling that hands over before the deadline; the job and its objects deleted after.

The whole path on moto (S3, Transcribe, SQS, the docreader function) is tests/e2e/test_transcribe.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from scripted_transcribe import FakeClock, ScriptedTranscribe, wav

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.domain.errors import (
    ContinueLater,
    DeferredStageError,
    PermanentStageError,
    TransientStageError,
)
from chalicelib.parsers import build_docreader
from chalicelib.parsers.asr import (
    TRANSCRIPTION_CURSOR,
    TranscribeAsr,
    TranscriptionPending,
    transcription_key,
    transcription_scope,
)
from chalicelib.ports import ReadRequest

KEY = transcription_key("k-1", 2)
JOB = "weknora-k-1-2"


def engine(
    service: ScriptedTranscribe, store: MemoryFileStore, clock: FakeClock, **options: float
) -> TranscribeAsr:
    return TranscribeAsr(
        service,
        store,
        bucket="files",
        poll_seconds=5,
        sleep=clock.sleep,
        clock=clock,
        **options,  # type: ignore[arg-type]
    )


def leftovers(store: MemoryFileStore) -> list[str]:
    return [key for key in store._objects if key.startswith("transcribe/")]


@pytest.mark.parametrize("path_style", [False, True])
def test_the_transcript_is_read_from_our_key_and_everything_is_deleted(path_style: bool) -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, path_style=path_style)
    asr = engine(service, store, clock)
    with transcription_scope(KEY, deadline=None):
        assert asr.transcribe(b"RIFFaudio", "talk.wav") == "hello from transcribe"
    [params] = service.started
    assert params["TranscriptionJobName"] == JOB
    assert params["Media"] == {"MediaFileUri": f"mem://files/transcribe/{JOB}/media"}
    assert params["MediaFormat"] == "wav" and params["IdentifyLanguage"] is True
    assert (params["OutputBucketName"], params["OutputKey"]) == ("files", f"transcribe/{JOB}/transcript.json")
    assert clock.sleeps == [5, 5, 5]  # after the start: QUEUED, IN_PROGRESS, COMPLETED
    assert service.deleted == [JOB] and leftovers(store) == []


def test_near_the_deadline_the_job_is_handed_over_and_the_next_delivery_resumes_it() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, statuses=["QUEUED", "IN_PROGRESS", "IN_PROGRESS", "COMPLETED"])
    asr = engine(service, store, clock, resume_delay_seconds=45)
    with transcription_scope(KEY, deadline=clock() + 12), pytest.raises(TranscriptionPending) as pending:
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert isinstance(pending.value, ContinueLater)  # the runner re-sends it: not a failed try
    assert (pending.value.delay_seconds, pending.value.cursor) == (45, TRANSCRIPTION_CURSOR)
    assert clock.sleeps == [5, 5]  # 12 s left: two polls fit, a third would pass the deadline
    assert JOB in service.jobs and leftovers(store) == [f"transcribe/{JOB}/media"]

    with transcription_scope(KEY, deadline=clock() + 600):  # the message comes back
        assert asr.transcribe(b"RIFFaudio", "talk.wav") == "hello from transcribe"
    assert len(service.started) == 1  # resumed by name, not started again
    assert service.deleted == [JOB] and leftovers(store) == []


def test_polling_stops_at_the_per_invocation_budget_even_far_from_the_deadline() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, statuses=["IN_PROGRESS"] * 50)
    asr = engine(service, store, clock, poll_budget_seconds=30)
    with transcription_scope(KEY, deadline=clock() + 800), pytest.raises(TranscriptionPending):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert sum(clock.sleeps) == 30


def test_a_job_that_already_exists_is_polled_not_an_error() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, unseen_checks=1)  # another delivery starts it after our check
    service.start_transcription_job(
        TranscriptionJobName=JOB,
        Media={"MediaFileUri": "x"},
        MediaFormat="wav",
        OutputBucketName="files",
        OutputKey=f"transcribe/{JOB}/transcript.json",
    )
    asr = engine(service, store, clock)
    with transcription_scope(KEY, deadline=None):
        assert asr.transcribe(b"RIFFaudio", "talk.wav") == "hello from transcribe"
    assert len(service.started) == 1  # ours met ConflictException and polled the running job


def test_a_failed_job_is_permanent_cleaned_up_and_its_reason_not_copied() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    reason = "The media format doesn't match s3://other/secret?token=abc"
    service = ScriptedTranscribe(store, statuses=["IN_PROGRESS", "FAILED"], failure_reason=reason)
    asr = engine(service, store, clock)
    with transcription_scope(KEY, deadline=None), pytest.raises(PermanentStageError) as failed:
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert (
        failed.value.message
        == "Amazon Transcribe could not transcribe talk.wav: the audio could not be decoded"
    )
    assert service.deleted == [JOB] and leftovers(store) == []


@pytest.mark.parametrize("written", [b"not json", None])
def test_a_missing_or_unreadable_transcript_is_retried_with_a_fresh_job(written: bytes | None) -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, write_transcript=False)
    if written is not None:
        store.save(f"transcribe/{JOB}/transcript.json", written)
    asr = engine(service, store, clock)
    with transcription_scope(KEY, deadline=None), pytest.raises(TransientStageError):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert service.deleted == [JOB] and leftovers(store) == []
    service.write_transcript = True
    with transcription_scope(KEY, deadline=None):
        assert asr.transcribe(b"RIFFaudio", "talk.wav") == "hello from transcribe"
    assert len(service.started) == 2


def test_a_job_running_for_too_long_is_abandoned_and_retried() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(
        store, statuses=["IN_PROGRESS"] * 5, created=datetime.now(UTC) - timedelta(hours=5)
    )
    asr = engine(service, store, clock)
    with transcription_scope(KEY, deadline=None), pytest.raises(TransientStageError, match="in time"):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert service.deleted == [JOB] and leftovers(store) == []


def test_start_errors_are_classified() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, start_errors=["LimitExceededException", "InternalFailureException"])
    asr = engine(service, store, clock, resume_delay_seconds=90)
    with transcription_scope(KEY, deadline=None):
        with pytest.raises(DeferredStageError) as limited:  # the concurrent-job quota: no try spent
            asr.transcribe(b"RIFFaudio", "talk.wav")
        assert not isinstance(limited.value, ContinueLater) and limited.value.delay_seconds == 90
        with pytest.raises(TransientStageError):
            asr.transcribe(b"RIFFaudio", "talk.wav")
        service.start_errors = ["BadRequestException"]
        with pytest.raises(PermanentStageError):
            asr.transcribe(b"RIFFaudio", "talk.wav")
    assert leftovers(store) == []
    with pytest.raises(PermanentStageError):
        asr.transcribe(b"x", "a.aiff")


def test_abandon_deletes_a_running_job_of_a_document_that_moved_on() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, statuses=["IN_PROGRESS"] * 50)
    asr = engine(service, store, clock, poll_budget_seconds=0)
    with transcription_scope(KEY, deadline=None), pytest.raises(TranscriptionPending):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    asr.abandon(KEY)
    assert service.deleted == [JOB] and leftovers(store) == []
    asr.abandon(KEY)  # again: nothing left, no error


def test_job_names_are_valid_for_transcribe() -> None:
    asr = engine(ScriptedTranscribe(MemoryFileStore("files")), MemoryFileStore("files"), FakeClock())
    assert asr.job_name("a b/c:d-1") == "weknora-a-b-c-d-1"
    long = asr.job_name("k" * 300)
    assert len(long) <= 200 and long == asr.job_name("k" * 300)


def test_outside_a_scope_a_job_is_polled_to_its_timeout_then_discarded() -> None:
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, statuses=["IN_PROGRESS"] * 50)
    asr = engine(service, store, clock, timeout_seconds=20)
    with pytest.raises(TransientStageError, match="in time"):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert service.deleted and leftovers(store) == []


def test_the_reader_hands_the_hand_over_to_the_stage() -> None:
    """The reader does not swallow the hand-over: the runner must see it."""
    store, clock = MemoryFileStore("files"), FakeClock()
    service = ScriptedTranscribe(store, statuses=["IN_PROGRESS"] * 5)
    reader = build_docreader(asr=engine(service, store, clock, poll_budget_seconds=0))
    with transcription_scope(KEY, deadline=None), pytest.raises(TranscriptionPending):
        reader.read(ReadRequest(data=wav(), file_name="talk.wav", file_type="wav"))
    assert json.loads(json.dumps(service.started[0]["Media"]))["MediaFileUri"].endswith("/media")
