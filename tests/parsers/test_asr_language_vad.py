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
from chalicelib.parsers.asr import WhisperAsr, with_language
from chalicelib.ports import ReadRequest


class FakeModel:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def transcribe(self, audio: Any, **kwargs: Any) -> tuple[list[Any], Any]:
        self.calls.append(kwargs)
        return [SimpleNamespace(text=" 안녕하세요 ", end=1.5)], SimpleNamespace(
            language=kwargs["language"] or "ko"
        )


def _whisper_on(model: FakeModel, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> WhisperAsr:
    asr = WhisperAsr(**kwargs)
    monkeypatch.setattr(WhisperAsr, "available", lambda self: True)
    asr._model = model
    return asr


def test_the_language_is_detected_and_silence_is_dropped_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    model = FakeModel()
    asr = _whisper_on(model, monkeypatch)
    assert asr.transcribe(b"audio", "a.wav") == "안녕하세요"
    assert model.calls[0]["language"] is None  # detected, never forced to English
    assert model.calls[0]["vad_filter"] is True and model.calls[0]["vad_parameters"]
    assert asr.last_language == "ko"


def test_the_setting_fixes_the_language_and_shares_the_loaded_model(monkeypatch: pytest.MonkeyPatch) -> None:
    model = FakeModel()
    asr = _whisper_on(model, monkeypatch)
    korean = with_language(asr, "ko")
    assert isinstance(korean, WhisperAsr) and korean is not asr
    korean.transcribe(b"audio", "a.wav")
    assert model.calls[0]["language"] == "ko"
    assert with_language(asr, "") is asr and with_language(asr, None) is asr
    other = SimpleNamespace(name="amazon-transcribe")
    assert with_language(other, "ko") is other


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
