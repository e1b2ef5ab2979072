"""Speech (issue 13): Whisper detects the spoken language unless the `asr_language` setting fixes it, and
voice-activity detection drops silence before decoding."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from parser_helpers import corpus_bytes, with_silence

from chalicelib.parsers import build_docreader
from chalicelib.parsers.asr import WhisperAsr, language_tag, with_language
from chalicelib.ports import ReadRequest

SECONDS = 16_000  # samples per second of the decoded audio


class FakeModel:
    """faster-whisper's WhisperModel as the engine calls it: `detect_language` answers per window
    (`languages(start_second)`), `transcribe` yields `text` unless Whisper's no-speech rule is on and
    `skipped_as_no_speech` (every window skipped, as Whisper-base did on a Korean reading)."""

    def __init__(
        self,
        *,
        text: str = " 안녕하세요 ",
        languages: Any = None,
        skipped_as_no_speech: bool = False,
    ) -> None:
        self.calls: list[dict[str, Any]] = []
        self.windows: list[tuple[float, float]] = []
        self.text = text
        self.languages = languages or (lambda start: [("ko", 0.9), ("ja", 0.1)])
        self.skipped_as_no_speech = skipped_as_no_speech
        self.audio: Any = None

    def detect_language(self, audio: Any) -> tuple[str, float, list[tuple[str, float]]]:
        start = _offset(self.audio, audio) / SECONDS
        self.windows.append((start, start + len(audio) / SECONDS))
        probabilities = self.languages(start)
        return probabilities[0][0], probabilities[0][1], probabilities

    def transcribe(self, audio: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        self.calls.append(kwargs)
        skipped = self.skipped_as_no_speech and kwargs.get("no_speech_threshold", 0.6) is not None
        segments = [] if skipped else [SimpleNamespace(text=self.text, end=1.5)]
        return segments, SimpleNamespace(language=kwargs["language"] or "ko", duration=len(audio) / SECONDS)


def _offset(whole: Any, window: Any) -> int:
    """Where the `window` view starts in `whole` (both numpy arrays)."""
    return (window.__array_interface__["data"][0] - whole.__array_interface__["data"][0]) // whole.itemsize


def _whisper_on(
    model: FakeModel,
    monkeypatch: pytest.MonkeyPatch,
    seconds: float = 5.0,
    speech: bool = True,
    **kwargs: Any,
) -> WhisperAsr:
    """The engine on `model`, the audio `seconds` long and heard as speech throughout (or not at all)."""
    import numpy as np

    from chalicelib.parsers import asr as asr_module

    samples = np.zeros(int(seconds * SECONDS), dtype=np.float32)
    model.audio = samples
    monkeypatch.setattr(asr_module, "_decode_audio", lambda data, name: samples)
    monkeypatch.setattr(asr_module, "_speech_only", lambda s: s if speech else s[:0])
    asr = WhisperAsr(**kwargs)
    monkeypatch.setattr(WhisperAsr, "available", lambda self: True)
    asr._model = model
    return asr


def test_the_language_is_detected_and_silence_is_dropped_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    model = FakeModel()
    asr = _whisper_on(model, monkeypatch)
    assert asr.transcribe(b"audio", "a.wav") == "안녕하세요"
    assert model.windows == [(0.0, 5.0)]  # detected by us on the speech, never forced to English
    assert model.calls[0]["language"] == "ko"
    assert model.calls[0]["vad_filter"] is True and model.calls[0]["vad_parameters"]
    assert asr.last_language == "ko"


def test_the_language_is_the_most_likely_over_windows_spread_over_the_recording(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # an English title read first, then three minutes of Korean: the first window alone says English
    def languages(start: float) -> list[tuple[str, float]]:
        return [("en", 0.95), ("ko", 0.05)] if start < 30 else [("ko", 0.7), ("ja", 0.3)]

    model = FakeModel(languages=languages)
    asr = _whisper_on(model, monkeypatch, seconds=200.0)
    asr.transcribe(b"audio", "reading.flac")
    assert model.calls[0]["language"] == "ko"
    assert len(model.windows) == 3 and model.windows[0] == (0.0, 30.0) and model.windows[-1] == (170.0, 200.0)
    assert asr.last_details["languages"][0][0] == "ko"


def test_speech_that_whisper_skips_as_no_speech_is_decoded_again_with_the_rule_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = FakeModel(skipped_as_no_speech=True)
    asr = _whisper_on(model, monkeypatch)
    assert asr.transcribe(b"audio", "reading.flac") == "안녕하세요"
    assert [call.get("no_speech_threshold", "default") for call in model.calls] == ["default", None]
    assert asr.last_details["passes"] == 2


def test_audio_the_vad_hears_no_speech_in_is_decoded_whole_and_the_no_speech_rule_stays(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = FakeModel(skipped_as_no_speech=True)
    asr = _whisper_on(model, monkeypatch, speech=False)
    assert asr.transcribe(b"audio", "hum.flac") == ""  # nothing heard, nothing read: no second pass
    assert len(model.calls) == 1 and model.calls[0]["vad_filter"] is False
    assert "no_speech_threshold" not in model.calls[0]
    assert model.windows == [(0.0, 5.0)]  # the language is still detected on the whole recording


def test_the_setting_fixes_the_language_and_shares_the_loaded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    model = FakeModel(languages=lambda start: [("en", 1.0)])
    asr = _whisper_on(model, monkeypatch)
    korean = with_language(asr, "ko")
    assert isinstance(korean, WhisperAsr) and korean is not asr
    korean.transcribe(b"audio", "a.wav")
    assert model.calls[0]["language"] == "ko" and model.windows == []  # fixed: nothing to detect
    assert with_language(asr, "") is asr and with_language(asr, None) is asr
    other = SimpleNamespace(name="amazon-transcribe")
    assert with_language(other, "ko") is other


def test_a_language_tag_in_the_file_name_fixes_the_language_unless_the_setting_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert [
        language_tag(n) for n in ("hearing.ko.flac", "a/b/talk.JA.mp3", "v1.2.flac", "x.flac", "ko.flac")
    ] == [
        "ko",
        "ja",
        None,
        None,
        None,
    ]
    model = FakeModel(languages=lambda start: [("th", 0.95), ("ko", 0.01)])
    asr = _whisper_on(model, monkeypatch)
    asr.transcribe(b"audio", "hearing.ko.flac")
    assert model.calls[-1]["language"] == "ko" and model.windows == []
    asr.with_language("ja").transcribe(b"audio", "hearing.ko.flac")
    assert model.calls[-1]["language"] == "ja"
    asr.transcribe(b"audio", "hearing.flac")
    assert model.calls[-1]["language"] == "th"  # no tag: what detection hears


def test_the_reader_hands_the_setting_to_the_engine() -> None:
    class RecordingAsr:
        name = "recording"

        def __init__(self, language: str = "") -> None:
            self.language = language
            self.heard: list[str] = []

        def available(self) -> bool:
            return True

        def with_language(self, language: str) -> RecordingAsr:
            self.heard.append(language)
            return RecordingAsr(language)

        def transcribe(self, audio: bytes, file_name: str) -> str:
            return f"spoken in {self.language or 'a detected language'}"

    asr = RecordingAsr()
    reader = build_docreader(asr=asr)
    data = corpus_bytes("speech-gpl-preamble.ogg")
    fixed = reader.read(
        ReadRequest(data=data, file_name="a.ogg", file_type="ogg", options={"asr_language": "ko"})
    )
    assert "spoken in ko" in fixed.markdown and asr.heard == ["ko"]
    detected = reader.read(ReadRequest(data=data, file_name="a.ogg", file_type="ogg"))
    assert "a detected language" in detected.markdown


@pytest.mark.slow
@pytest.mark.requires_whisper
def test_long_silences_do_not_derail_decoding(corpus: Path) -> None:
    from rapidfuzz.distance import Levenshtein

    name = "speech-python-appetite.wav"
    text = WhisperAsr().transcribe(with_silence(corpus_bytes(name), 20.0), name)
    words = re.findall(r"[a-z0-9']+", text.lower())
    truth = re.findall(r"[a-z0-9']+", (corpus / f"{name}.truth.txt").read_text().lower())
    assert Levenshtein.distance(words, truth) / len(truth) <= 0.10, text


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "asr"


@pytest.mark.slow
@pytest.mark.requires_whisper
def test_a_generated_japanese_reading_gives_japanese_text() -> None:
    """A neural TTS reading (tests/fixtures/asr/make_fixtures.py), the language left to detection: the
    transcript is in Japanese script and close to the read text (character error, Whisper-base: ~15%)."""
    from rapidfuzz.distance import Levenshtein

    name = "kokoro-ja-constitution.ja.ogg"
    asr = WhisperAsr()
    text = asr.transcribe((FIXTURES / name).read_bytes(), name)
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    japanese = re.findall(r"[\u3040-\u30ff\u4e00-\u9fff]", text)
    assert asr.last_language == "ja", asr.last_details
    assert len(japanese) >= 0.8 * len(re.sub(r"\W", "", text)) and len(japanese) >= 40, text
    strip = lambda t: re.sub(r"[\W_]", "", t)  # noqa: E731
    assert Levenshtein.normalized_distance(strip(text), strip(truth)) <= 0.35, text


@pytest.mark.slow
@pytest.mark.requires_whisper
def test_a_generated_korean_reading_gives_hangul(tmp_path: Path) -> None:
    """espeak-ng's Korean (Whisper-base hears it as Thai: its detection is no test here), named with its
    language tag as an upload may be: the transcript is Hangul."""
    import shutil
    import subprocess

    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed")
    wav = tmp_path / "constitution-art1.ko.wav"
    text = "대한민국은 민주공화국이다. 대한민국의 주권은 국민에게 있고, 모든 권력은 국민으로부터 나온다."
    subprocess.run(["espeak-ng", "-v", "ko", "-s", "140", "-w", str(wav), text], check=True, timeout=60)
    asr = WhisperAsr()
    transcript = asr.transcribe(wav.read_bytes(), wav.name)
    hangul = re.findall(r"[\uac00-\ud7af]", transcript)
    assert asr.last_language == "ko" and len(hangul) >= 10, transcript
    assert len(hangul) >= 0.8 * len(re.sub(r"\W", "", transcript)), transcript
