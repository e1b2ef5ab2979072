"""Issue 25: a long parse moves live. A scanned PDF's OCR reports each page in the docreader span while the
docreader still runs (not only at the end), and the stage tree shows it as pages done of the total."""

from __future__ import annotations

from typing import Any

from project_paths import corpus_bytes

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.progress import stage_progress
from chalicelib.domain.types import ParseStatus, Tenant
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.operations.knowledge_bases import create_kb

from .conftest import drain

SCAN = "latex-usrguide-p1-3.scan.pdf"  # image-only, 3 pages


class WatchingOcr:
    """Reads every page as one line, and looks at the docreader's span before each page."""

    name = "watching-ocr"

    def __init__(self, deps: Services) -> None:
        self.deps = deps
        self.knowledge_id = ""
        self.seen: list[dict[str, Any] | None] = []

    def available(self) -> bool:
        return True

    def with_languages(self, languages: Any) -> WatchingOcr:
        return self

    def recognize(self, image: bytes) -> str:
        row = self.deps.knowledge.get(self.knowledge_id)
        assert row is not None
        span = self.deps.spans.get(row.id, row.attempt, "docreader")
        assert span is not None and span.status.value == "running"
        self.seen.append(stage_progress("docreader", span.outputs, span.started_at, span.updated_at, False))
        return f"page text {len(self.seen)} " * 5


def test_a_scanned_pdf_reports_each_ocr_page_while_the_docreader_runs(deps: Services, tenant: Tenant) -> None:
    ocr = WatchingOcr(deps)
    deps.replace_ocr_asr(ocr, None)
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="scans"))
    created = create_from_file(deps, tenant.id, kb.id, FileUpload(data=corpus_bytes(SCAN), file_name=SCAN))
    ocr.knowledge_id = created.id
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status != ParseStatus.FAILED and row.chunk_count > 0, row
    # before page 1 nothing was read yet; before pages 2 and 3 the pages already read are in the span
    assert ocr.seen[0] is None
    assert [(p["done"], p["total"], p["unit"]) for p in ocr.seen[1:] if p] == [
        (1, 3, "pages"),
        (2, 3, "pages"),
    ]
    done = deps.spans.get(row.id, row.attempt, "docreader")
    assert done is not None and done.outputs["pages_parsed"] == 3 and done.outputs["pages_ocr"] == 3


def test_seconds_of_audio_are_a_docreader_measure() -> None:
    progress = stage_progress(
        "docreader", {"audio_seconds_done": 30.0, "audio_seconds_total": 120.0}, None, None, False
    )
    assert progress is not None and (progress["done"], progress["total"], progress["unit"]) == (
        30,
        120,
        "seconds of audio",
    )
    assert stage_progress("docreader", {"pages_parsed": 2}, None, None, False) is None  # no total yet


class _Segment:
    def __init__(self, end: float, text: str) -> None:
        self.end, self.text = end, text


class _ScriptedWhisper:
    """faster-whisper's shape: a lazy generator of segments, and the audio's info (its duration)."""

    def __init__(self, seen: list[tuple[float, float]]) -> None:
        self.seen = seen

    def transcribe(self, audio: Any, **options: Any) -> tuple[Any, Any]:
        from types import SimpleNamespace

        def segments() -> Any:
            for end in (12.5, 30.0, 41.2):
                yield _Segment(end, f"words until {end}")

        return segments(), SimpleNamespace(duration=41.2, language="en")


def test_a_transcription_reports_the_seconds_of_audio_as_it_decodes_them(monkeypatch: Any) -> None:
    import numpy as np

    from chalicelib.parsers import asr
    from chalicelib.parsers.asr import WhisperAsr
    from chalicelib.parsers.progress import progress_listener

    engine = WhisperAsr(language="en")
    monkeypatch.setattr(asr, "_decode_audio", lambda data, name: np.zeros(16_000 * 42, dtype=np.float32))
    monkeypatch.setattr(asr, "_speech_only", lambda samples: samples)
    monkeypatch.setattr(engine, "available", lambda: True)
    monkeypatch.setattr(engine, "_load", lambda: _ScriptedWhisper([]))
    reports: list[dict[str, Any]] = []
    with progress_listener(lambda done: reports.append(dict(done)), min_interval=0.0):
        text = engine.transcribe(b"audio", "talk.flac")
    assert text == "words until 12.5 words until 30.0 words until 41.2"
    assert [r["audio_seconds_done"] for r in reports] == [12.5, 30.0, 41.2]
    assert {r["audio_seconds_total"] for r in reports} == {41.2}
