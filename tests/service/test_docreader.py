"""The docreader stage on the fakes: outputs per attempt, the next message, and the retry rules."""

from __future__ import annotations

import io
import json
from dataclasses import replace
from typing import Any

import pytest
from PIL import Image
from scripted_transcribe import FakeClock, ScriptedTranscribe, wav

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode, TransientStageError
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.parsers.asr import TranscribeAsr
from chalicelib.ports import ParsedImage, ReadResult
from chalicelib.stages import docreader
from chalicelib.tasks.reparse import reparse

from .conftest import ScriptedReader, deliver, drain, failed_ids, message, span_status, upload


def png(side: int = 120) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(out, format="PNG")
    return out.getvalue()


def test_parsed_markdown_and_the_image_manifest_are_written_per_attempt(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    reader = ScriptedReader(
        ReadResult(
            markdown="# Chart\n\nSales by month: ![chart](img-1)\n",
            images=[ParsedImage(ref="img-1", data=png()), ParsedImage(ref="icon", data=png(16))],
        )
    )
    deps.replace_docreader(reader)
    created = upload(deps, kb, "chart.md")
    deliver(deps, "docreader")

    key = (kb.tenant_id, created.id)
    markdown = files.read(files.url_for(parsed_markdown_key(*key, 1))).decode()
    manifest = json.loads(files.read(files.url_for(images_manifest_key(*key, 1))))
    assert len(manifest) == 1 and manifest[0]["url"].startswith("mem://files/")  # the icon was dropped
    assert manifest[0]["url"] in markdown and "img-1" not in markdown  # the link is rewritten
    assert files.read(manifest[0]["url"]) == png()
    assert queue.bodies("chunking") == [{"tenant_id": kb.tenant_id, "knowledge_id": created.id, "attempt": 1}]
    assert reader.requests[0].file_name == "chart.md" and reader.requests[0].data == files.read(
        created.file_path
    )

    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    deliver(deps, "docreader")
    assert files.exists(files.url_for(parsed_markdown_key(*key, 2)))
    # attempt 1 was never indexed, and the reset made sure it could not be: nothing counted its outputs
    assert not files.exists(files.url_for(parsed_markdown_key(*key, 1)))
    assert [m["attempt"] for m in queue.bodies("chunking")] == [1, 2]


def test_a_try_that_stored_its_images_and_then_failed_leaves_no_image_behind(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Images are named by document, attempt and bytes: the retry writes the same objects, which the
    manifest lists and the delete finds."""
    reader = ScriptedReader(
        *[ReadResult(markdown="# Chart\n\n![chart](img-1)\n", images=[ParsedImage(ref="img-1", data=png())])]
        * 2
    )
    deps.replace_docreader(reader)
    created = upload(deps, kb, "chart.md")
    real_save, broken = MemoryFileStore.save_if_absent, []

    def markdown_write_fails_once(store: MemoryFileStore, key: str, data: bytes, *args: Any) -> bool:
        if key.endswith(".md") and "/parsed/" in key and not broken:  # after the images were stored
            broken.append(key)
            raise ConnectionError("the store did not answer")
        return real_save(store, key, data, *args)

    monkeypatch.setattr(MemoryFileStore, "save_if_absent", markdown_write_fails_once)
    deliver(deps, "docreader")
    deliver(deps, "docreader")  # the retry
    assert broken
    exports = files.keys(f"{kb.tenant_id}/exports/")
    manifest = json.loads(files.read(files.url_for(images_manifest_key(kb.tenant_id, created.id, 1))))
    assert exports == [files.key_of(manifest[0]["url"])]  # one object, the one the manifest lists


def test_a_superseded_attempt_is_dropped_without_writing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    created = upload(deps, kb)
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())  # attempt 2 before attempt 1 ran
    response = deliver(deps, "docreader")
    assert response["batchItemFailures"] == []
    assert not files.exists(files.url_for(parsed_markdown_key(kb.tenant_id, created.id, 1)))
    assert files.exists(files.url_for(parsed_markdown_key(kb.tenant_id, created.id, 2)))
    assert [m["attempt"] for m in queue.bodies("chunking")] == [2]
    assert queue.waiting("docreader") == [] and queue.dead_letters("docreader") == []


def test_a_permanent_error_fails_the_row_at_once_without_retries(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, queue: MemoryTaskQueue
) -> None:
    created = upload(deps, kb, "blank.md", b"   \n\n  \n")
    response = deliver(deps, "docreader")
    assert response["batchItemFailures"] == []  # acknowledged: a retry cannot help
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert (
        failed.error_code == SpanErrorCode.DOCREADER_PARSE_FAILED
        and "could be extracted" in failed.error_message
    )
    assert queue.waiting("docreader") == [] and queue.dead_letters("docreader") == []
    assert queue.waiting("chunking") == []
    stages = span_status(deps, failed)
    assert stages["docreader"] == "failed" and stages["chunking"] == "cancelled"


def test_a_missing_source_object_is_permanent(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    files.delete(created.file_path)
    deliver(deps, "docreader")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert "source file is missing" in failed.error_message


def test_a_source_object_replaced_by_a_bigger_one_is_refused_unread(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    deps.settings = replace(deps.settings, max_file_size=1000)
    files.save(files.key_of(created.file_path), b"# big\n" + b"x" * 2000)  # replaced after it was accepted
    deliver(deps, "docreader")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.FILE_TOO_LARGE
    assert "2006 bytes, more than the 1000 bytes allowed" in failed.error_message


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            TransientStageError("the parser service timed out", code=SpanErrorCode.DOCREADER_TIMEOUT),
            "timed out",
        ),
        (RuntimeError("parser crashed on this document"), "after 4 tries (RuntimeError)"),
    ],
)
def test_a_failing_try_is_retried_and_fails_the_row_only_on_the_last_receive(
    deps: Services,
    kb: KnowledgeBase,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
    error: Exception,
    reason: str,
) -> None:
    reader = ScriptedReader(error)
    deps.replace_docreader(reader)
    created = upload(deps, kb)
    for receive in range(1, 4):
        response = deliver(deps, "docreader")
        assert len(failed_ids(response)) == 1, receive  # back to the queue for another try
        current = rows.get(created.id)
        assert current is not None and current.parse_status == ParseStatus.PROCESSING, receive
    deliver(deps, "docreader")
    assert len(reader.requests) == 4  # the specification's 1 try + 3 retries
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED and reason in failed.error_message
    parked = queue.dead_letters("docreader")
    assert [json.loads(m.body)["knowledge_id"] for m in parked] == [created.id]  # redriven, kept
    assert queue.waiting("docreader") == []


def test_a_transient_error_that_clears_lets_the_document_go_on(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, queue: MemoryTaskQueue
) -> None:
    reader = ScriptedReader(TransientStageError("busy"), ReadResult(markdown="# Back\n\nIt worked.\n"))
    deps.replace_docreader(reader)
    created = upload(deps, kb)
    deliver(deps, "docreader")
    deliver(deps, "docreader")
    current = rows.get(created.id)
    assert (
        current is not None and current.parse_status == ParseStatus.PROCESSING and current.error_message == ""
    )
    assert len(queue.bodies("chunking")) == 1


def test_a_permanent_parser_error_keeps_its_code(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    deps.replace_docreader(
        ScriptedReader(PermanentStageError("encrypted PDF", code=SpanErrorCode.UNSUPPORTED_TYPE))
    )
    created = upload(deps, kb)
    deliver(deps, "docreader")
    failed = rows.get(created.id)
    assert failed is not None and failed.error_code == SpanErrorCode.UNSUPPORTED_TYPE
    assert failed.error_message == "encrypted PDF"


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        json.dumps({"knowledge_id": "k"}),
        json.dumps({"tenant_id": "t", "knowledge_id": "k", "attempt": 0}),
    ],
)
def test_an_invalid_body_is_parked_in_the_dlq_at_once(
    deps: Services, queue: MemoryTaskQueue, body: str
) -> None:
    response = docreader.handle(deps, queue.event("docreader", [body]), None)
    assert response["batchItemFailures"] == []
    parked = queue.dead_letters("docreader")
    assert [m.body for m in parked] == [body]
    assert "not a docreader message" in parked[0].attributes["reason"]


def test_one_bad_record_does_not_replay_the_others(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    good, bad = upload(deps, kb, "good.md"), upload(deps, kb, "bad.md", b"# Bad\n\nexplodes")
    real = deps.docreader()

    class PicksOne:
        def read(self, request: object) -> ReadResult:
            if getattr(request, "file_name", "") == "bad.md":
                raise RuntimeError("boom")
            return real.read(request)  # type: ignore[arg-type]

        def engines(self) -> list[dict[str, object]]:
            return []

    deps.replace_docreader(PicksOne())  # type: ignore[arg-type]
    response = deliver(deps, "docreader")
    assert len(failed_ids(response)) == 1
    assert [m.json()["knowledge_id"] for m in queue.waiting("docreader")] == [bad.id]
    assert [m["knowledge_id"] for m in queue.bodies("chunking")] == [good.id]


def _transcribe(deps: Services, clock: FakeClock, **script: Any) -> tuple[ScriptedTranscribe, TranscribeAsr]:
    service = ScriptedTranscribe(deps.inbox, **script)
    asr = TranscribeAsr(
        service,
        deps.inbox,
        bucket=deps.settings.files_bucket,
        poll_seconds=5,
        poll_budget_seconds=5,
        resume_delay_seconds=60,
        sleep=clock.sleep,
        clock=clock,
    )
    deps.replace_ocr_asr(None, asr)
    return service, asr


def test_audio_on_transcribe_hands_over_without_spending_a_try_and_resumes_its_job(
    deps: Services,
    kb: KnowledgeBase,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
    inbox: MemoryFileStore,
) -> None:
    spoken = "the keeper logs the weather at dawn and trims the wick at noon"
    service, _ = _transcribe(deps, FakeClock(), transcript=spoken)
    created = upload(deps, kb, "talk.wav", wav())
    job = f"weknora-{created.id}-1"

    assert deliver(deps, "docreader")["batchItemFailures"] == []  # the job runs on past the poll budget
    [again] = queue.waiting("docreader")
    assert again.delay_seconds == 60 and again.json()["cursor"] == "transcribe"
    assert again.receive_count == 0 and queue.retried == []  # a fresh message: no try spent
    assert rows.get(created.id).parse_status == ParseStatus.PROCESSING  # type: ignore[union-attr]
    assert span_status(deps, created)["docreader"] == "running"
    assert [m["knowledge_id"] for m in queue.bodies("chunking")] == []

    assert deliver(deps, "docreader")["batchItemFailures"] == []
    assert [p["TranscriptionJobName"] for p in service.started] == [job]  # resumed, not started again
    assert queue.bodies("chunking") == [message(created)]  # no resume marker: embedding reads `cursor`
    assert service.deleted == [job] and [k for k in inbox._objects if k.startswith("transcribe/")] == []
    drain(deps)
    assert spoken in " ".join(chunk.content for chunk in deps.chunks.list(created.id))
    assert queue.dead_letters("docreader") == []


def test_a_running_transcription_of_a_superseded_attempt_is_deleted(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, inbox: MemoryFileStore
) -> None:
    service, _ = _transcribe(deps, FakeClock(), statuses=["IN_PROGRESS"])
    created = upload(deps, kb, "talk.wav", wav())
    deliver(deps, "docreader")
    assert list(service.jobs) == [f"weknora-{created.id}-1"]
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    deliver(deps, "docreader")  # attempt 1's resumption finds its row moved on; attempt 2 starts its job
    assert service.deleted == [f"weknora-{created.id}-1"]
    assert list(service.jobs) == [f"weknora-{created.id}-2"]
    assert [k for k in inbox._objects if k.startswith("transcribe/")] == [
        f"transcribe/weknora-{created.id}-2/media"
    ]
