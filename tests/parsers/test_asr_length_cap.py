"""Local ASR's length limit (MAX_AUDIO_SECONDS) holds whatever the container's header claims: decoding
stops, with the same refusal as the header check, once the decoded samples pass the limit.

The audio is made here with PyAV (bundled FFmpeg with LAME): no model, no system ffmpeg.
"""

from __future__ import annotations

import io
import struct
import tracemalloc
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode

av = pytest.importorskip("av")
if "libmp3lame" not in av.codecs_available:
    pytest.skip("PyAV is built without the LAME MP3 encoder", allow_module_level=True)

RATE = 16_000


def encode(format_name: str, codec: str, signal: Any) -> bytes:
    """16 kHz mono s16 `signal` encoded with PyAV."""
    out = io.BytesIO()
    with av.open(out, "w", format=format_name) as container:
        stream = container.add_stream(codec, rate=RATE, layout="mono")
        for start in range(0, len(signal), 4096):
            frame = av.AudioFrame.from_ndarray(
                signal[None, start : start + 4096], format="s16", layout="mono"
            )
            frame.rate = RATE
            frame.pts = start
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def mp3(seconds: float, *, tone: bool = False) -> bytes:
    """`seconds` of MP3 (silence, or a quiet 440 Hz tone), with LAME's Info tag (which counts the frames)."""
    total = int(seconds * RATE)
    t = np.arange(total) / RATE
    signal = 0.1 * np.sin(2 * np.pi * 440 * t) * 32767 if tone else np.zeros(total)
    return encode("mp3", "libmp3lame", signal.astype(np.int16))


def noise_then_silence_adts(seconds: float) -> bytes:
    """A raw AAC (ADTS) stream: no duration anywhere, so FFmpeg guesses it from the first packets' bitrate,
    and 3 s of noise before long silence make that guess far too short."""
    noise = np.random.default_rng(0).standard_normal(3 * RATE) * 8000
    signal = np.concatenate([noise, np.zeros(int((seconds - 3) * RATE))]).astype(np.int16)
    return encode("adts", "aac", signal)


def understated_info_tag(data: bytes, frames: int = 10) -> bytes:
    """The MP3 with its Info tag claiming `frames` frames (LAME's tag: flags, then the frame count)."""
    at = data.index(b"Info")
    (flags,) = struct.unpack(">I", data[at + 4 : at + 8])
    assert flags & 1, "the Info tag carries no frame count"
    return data[: at + 8] + struct.pack(">I", frames) + data[at + 12 :]


def declared_seconds(data: bytes) -> float:
    with av.open(io.BytesIO(data)) as container:
        return (container.duration or 0) / av.time_base


LONG_SECONDS = 240.0
CAP_SECONDS = 20


@pytest.fixture(scope="module")
def long_mp3() -> bytes:
    return mp3(LONG_SECONDS)


@pytest.fixture(params=["mp3-info-tag-understates", "adts-without-duration"], scope="module")
def lying_audio(request: pytest.FixtureRequest, long_mp3: bytes) -> tuple[str, bytes]:
    if request.param == "mp3-info-tag-understates":
        return "long.mp3", understated_info_tag(long_mp3)
    return "long.aac", noise_then_silence_adts(LONG_SECONDS)


class _RecordingModel:
    """Stands in for WhisperModel: records how many samples it was handed."""

    def __init__(self) -> None:
        self.samples: list[int] = []

    def transcribe(self, samples: Any, **_: Any) -> tuple[Any, Any]:
        self.samples.append(len(samples))
        return iter(()), SimpleNamespace(duration=len(samples) / RATE, language="en")


def test_whisper_stops_decoding_past_the_length_limit_whatever_the_header_says(
    monkeypatch: pytest.MonkeyPatch, lying_audio: tuple[str, bytes]
) -> None:
    from chalicelib.parsers import asr

    name, data = lying_audio
    assert declared_seconds(data) < CAP_SECONDS  # the header understates (or guesses) a 4-minute recording
    monkeypatch.setattr(asr, "MAX_AUDIO_SECONDS", CAP_SECONDS)
    engine = asr.WhisperAsr(language="en", vad_filter=False)
    model = _RecordingModel()
    monkeypatch.setattr(engine, "available", lambda: True)
    monkeypatch.setattr(engine, "_load", lambda: model)

    tracemalloc.start()
    try:
        engine.transcribe(data, name)
    except PermanentStageError as error:
        refusal = error
    else:
        pytest.fail(
            f"decoded all {model.samples[0] / RATE:.0f} s of audio although the limit is {CAP_SECONDS} s"
        )
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

    assert refusal.code == SpanErrorCode.DOCREADER_PARSE_FAILED
    assert f"{name} is more than 0 minutes long; the limit is 0 minutes" in str(refusal)
    assert model.samples == []  # nothing reached the model
    # decoded whole, 240 s is 7.7 MB of s16 and 15 MB of float32 samples; the decoder stops within its first
    # ~31-s group
    assert peak < 6 * 1024 * 1024, f"{peak / 1e6:.1f} MB held while decoding"


def test_decoding_within_the_limit_gives_faster_whispers_samples(long_mp3: bytes) -> None:
    """The capped decoder resamples as faster-whisper's decode_audio does: the same samples, bit for bit."""
    fw_audio = pytest.importorskip("faster_whisper.audio")
    from chalicelib.parsers import asr

    for data in (mp3(3.0, tone=True), long_mp3):
        ours = asr._decode_audio(data, "clip.mp3")
        theirs = fw_audio.decode_audio(io.BytesIO(data), sampling_rate=asr.SAMPLE_RATE)
        assert ours.dtype == np.float32 and np.array_equal(ours, theirs)


def test_a_recording_exactly_at_the_limit_is_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.parsers import asr

    data = mp3(3.0, tone=True)
    decoded = asr._decode_audio(data, "clip.mp3")
    monkeypatch.setattr(asr, "MAX_AUDIO_SECONDS", len(decoded) / asr.SAMPLE_RATE)
    assert len(asr._decode_audio(data, "clip.mp3")) == len(decoded)


def test_the_header_check_still_refuses_early_with_the_known_length(
    monkeypatch: pytest.MonkeyPatch, long_mp3: bytes
) -> None:
    from chalicelib.parsers import asr

    monkeypatch.setattr(asr, "MAX_AUDIO_SECONDS", 60)
    with pytest.raises(PermanentStageError, match="is 4 minutes long; the limit is 1 minutes") as caught:
        asr._check_duration(long_mp3, "long.mp3")
    assert caught.value.code == SpanErrorCode.DOCREADER_PARSE_FAILED
