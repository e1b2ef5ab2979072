"""Local Whisper: audio the VAD hears no speech in gives no invented transcript ("You", "..."), and the
transcription stops at the invocation's deadline with the parse budget's error instead of running on."""

from __future__ import annotations

import io
import time
import wave
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.parsers import build_docreader
from chalicelib.parsers.asr import WhisperAsr, default_asr
from chalicelib.parsers.reader import NO_SPEECH_TEXT
from chalicelib.ports import ReadRequest
from chalicelib.services import deadline
from chalicelib.services.deadline import stage_deadline

SECONDS = 16_000


def _segment(text: str, end: float, no_speech_prob: float, avg_logprob: float) -> SimpleNamespace:
    return SimpleNamespace(text=text, end=end, no_speech_prob=no_speech_prob, avg_logprob=avg_logprob)


class SegmentsModel:
    """faster-whisper's WhisperModel as the engine calls it, answering `segments` one at a time."""

    def __init__(self, segments: list[SimpleNamespace]) -> None:
        self.segments = segments
        self.taken = 0

    def detect_language(self, audio: Any) -> tuple[str, float, list[tuple[str, float]]]:
        return "en", 1.0, [("en", 1.0)]

    def transcribe(self, audio: Any, **kwargs: Any) -> tuple[Iterator[Any], Any]:
        def decoded() -> Iterator[Any]:
            for segment in self.segments:
                self.taken += 1
                yield segment

        return decoded(), SimpleNamespace(language="en", duration=len(audio) / SECONDS)


def _whisper_on(model: SegmentsModel, monkeypatch: pytest.MonkeyPatch, *, speech: bool) -> WhisperAsr:
    from chalicelib.parsers import asr as asr_module

    samples = np.zeros(60 * SECONDS, dtype=np.float32)
    monkeypatch.setattr(asr_module, "_decode_audio", lambda data, name: samples)
    monkeypatch.setattr(asr_module, "_speech_only", lambda s: s if speech else s[:0])
    monkeypatch.setattr(WhisperAsr, "available", lambda self: True)
    asr = WhisperAsr()
    asr._model = model
    return asr


# what Whisper-base decodes from 60 s of digital silence and from faint room noise (measured)
INVENTED = [_segment(" You", 30.0, 0.937, -0.688), _segment(" ...", 60.0, 0.983, -0.977)]


def test_what_whisper_invents_where_the_vad_heard_no_speech_is_dropped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asr = _whisper_on(SegmentsModel(INVENTED), monkeypatch, speech=False)
    assert asr.transcribe(b"audio", "silence.wav") == ""


def test_speech_whisper_hears_where_the_vad_heard_none_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    quiet_speech = [_segment(" the keeper logs the weather", 4.0, 0.2, -0.4)]
    asr = _whisper_on(SegmentsModel(quiet_speech), monkeypatch, speech=False)
    assert asr.transcribe(b"audio", "whisper.wav") == "the keeper logs the weather"


def test_speech_the_vad_heard_is_kept_whatever_its_no_speech_probability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # issue 27: a language Whisper-base knows less well looks like "no speech" to it
    unsure = [_segment(" 안녕하세요", 3.0, 0.9, -1.2)]
    asr = _whisper_on(SegmentsModel(unsure), monkeypatch, speech=True)
    assert asr.transcribe(b"audio", "reading.wav") == "안녕하세요"


def test_transcription_past_the_invocations_deadline_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    model = SegmentsModel([_segment(f" part {n}", n * 10.0, 0.1, -0.3) for n in range(1, 7)])
    asr = _whisper_on(model, monkeypatch, speech=True)
    token = stage_deadline.set(time.monotonic() - 1)  # the invocation's time is up
    try:
        with pytest.raises(PermanentStageError) as refused:
            asr.transcribe(b"audio", "talk.wav")
    finally:
        stage_deadline.reset(token)
    assert refused.value.code == SpanErrorCode.DOCREADER_PARSE_FAILED
    assert "talk.wav" in str(refused.value) and model.taken < len(model.segments)


def test_transcription_stops_between_segments_when_the_deadline_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.parsers import asr as asr_module

    model = SegmentsModel([_segment(f" part {n}", n * 10.0, 0.1, -0.3) for n in range(1, 7)])
    asr = _whisper_on(model, monkeypatch, speech=True)
    # the deadline passes while the second segment is decoded
    monkeypatch.setattr(asr_module, "out_of_time", lambda: model.taken >= 2, raising=False)
    monkeypatch.setattr(deadline, "out_of_time", lambda: model.taken >= 2)
    with pytest.raises(PermanentStageError):
        asr.transcribe(b"audio", "talk.wav")
    assert model.taken == 2  # not decoded to the end


def _wav(samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(SECONDS)
        writer.writeframes(samples.astype(np.int16).tobytes())
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.requires_whisper
def test_silence_and_room_noise_are_no_speech_not_an_invented_transcript() -> None:
    reader = build_docreader(asr=default_asr())
    noise = np.random.default_rng(7).normal(0, 30, 30 * SECONDS)  # about -60 dBFS
    for name, samples in (("silence", np.zeros(20 * SECONDS)), ("room-noise", noise)):
        result = reader.read(ReadRequest(data=_wav(samples), file_name=f"{name}.wav", file_type="wav"))
        assert result.markdown == NO_SPEECH_TEXT, name
