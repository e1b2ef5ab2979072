"""Amazon Transcribe's charge reaches the meter: a completed job records the seconds Transcribe bills (whole
seconds rounded up, 15 at least, as its pricing page says), once, when the transcript is read; a failed job
or one still running records nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from scripted_transcribe import FakeClock, ScriptedTranscribe

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.domain import metering
from chalicelib.domain.errors import PermanentStageError
from chalicelib.parsers.asr import (
    TranscribeAsr,
    TranscriptionPending,
    transcription_key,
    transcription_scope,
)

KEY = transcription_key("k-1", 2)
JOB = "weknora-k-1-2"


def transcript(*ends: float) -> dict[str, Any]:
    """Transcribe's output JSON: one word per end time (and a punctuation item, which has no times)."""
    items: list[dict[str, Any]] = [
        {"type": "pronunciation", "start_time": f"{end - 0.4:.2f}", "end_time": f"{end:.2f}"} for end in ends
    ]
    items.append({"type": "punctuation", "alternatives": [{"content": "."}]})
    segments = [{"id": 0, "start_time": "0.0", "end_time": f"{max(ends, default=0):.2f}"}] if ends else []
    return {"results": {"transcripts": [{"transcript": "words"}], "items": items, "audio_segments": segments}}


def run(
    store: MemoryFileStore, service: ScriptedTranscribe, **options: float
) -> tuple[str, dict[str, float]]:
    asr = TranscribeAsr(service, store, bucket="files", poll_seconds=5, sleep=FakeClock().sleep, **options)  # type: ignore[arg-type]
    with metering.metering() as meter, transcription_scope(KEY, deadline=None):
        text = asr.transcribe(b"RIFFaudio", "talk.wav")
    return text, meter.snapshot()


def with_transcript(body: dict[str, Any]) -> tuple[MemoryFileStore, ScriptedTranscribe]:
    """A job whose transcript (written where the job was told to) is `body`."""
    store = MemoryFileStore("files")
    store.save(f"transcribe/{JOB}/transcript.json", json.dumps(body).encode(), "application/json")
    return store, ScriptedTranscribe(store, write_transcript=False)


def test_a_completed_job_records_its_seconds_rounded_up() -> None:
    store, service = with_transcript(transcript(1.5, 42.0, 90.2))
    text, counts = run(store, service)
    assert text == "words"
    assert counts == {metering.TRANSCRIBE_SECONDS: 91.0}


def test_a_short_recording_is_billed_the_fifteen_second_minimum() -> None:
    store, service = with_transcript(transcript(3.2))
    assert run(store, service)[1] == {metering.TRANSCRIBE_SECONDS: 15.0}
    store, service = with_transcript(transcript())  # silence: no words at all, still one request
    assert run(store, service)[1] == {metering.TRANSCRIBE_SECONDS: 15.0}


def test_billing_rounds_up_to_whole_seconds_over_the_minimum() -> None:
    from chalicelib.parsers.asr import billed_transcribe_seconds

    assert [billed_transcribe_seconds(s) for s in (0, 14.9, 15, 15.01, 3600)] == [15, 15, 15, 16, 3600]


def test_a_failed_job_records_nothing() -> None:
    store = MemoryFileStore("files")
    service = ScriptedTranscribe(store, statuses=("FAILED",), failure_reason="Invalid file format")
    asr = TranscribeAsr(service, store, bucket="files", poll_seconds=5, sleep=FakeClock().sleep)
    with (
        metering.metering() as meter,
        transcription_scope(KEY, deadline=None),
        pytest.raises(PermanentStageError),
    ):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    assert metering.TRANSCRIBE_SECONDS not in meter.snapshot()


def test_a_job_handed_over_records_only_when_the_resuming_delivery_reads_it() -> None:
    store, service = with_transcript(transcript(30.0))
    service.statuses = ["IN_PROGRESS", "IN_PROGRESS", "COMPLETED"]
    clock = FakeClock()
    asr = TranscribeAsr(
        service, store, bucket="files", poll_seconds=5, poll_budget_seconds=6, sleep=clock.sleep, clock=clock
    )
    with (
        metering.metering() as first,
        transcription_scope(KEY, deadline=None),
        pytest.raises(TranscriptionPending),
    ):
        asr.transcribe(b"RIFFaudio", "talk.wav")
    with metering.metering() as resumed, transcription_scope(KEY, deadline=None):
        assert asr.transcribe(b"RIFFaudio", "talk.wav") == "words"
    assert metering.TRANSCRIBE_SECONDS not in first.snapshot()
    assert resumed.snapshot() == {metering.TRANSCRIBE_SECONDS: 30.0}
