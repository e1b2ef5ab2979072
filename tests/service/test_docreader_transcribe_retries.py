"""Amazon Transcribe in the docreader stage: a retry or a duplicate delivery of an attempt whose job finished
starts no second (billed) job, the `asr_language` setting and a file name's language tag fix the job's
LanguageCode, a resume polls the running job without fetching the source again, and throttle deferrals
spent in the docreader do not travel on to chunking."""

from __future__ import annotations

from typing import Any

import pytest
from scripted_transcribe import FakeClock, ScriptedTranscribe, wav

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue, ScriptedUrlImporter
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, UrlImportRequest
from chalicelib.domain import metering
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.create import create_from_url
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.parsers.asr import TranscribeAsr
from chalicelib.ports import FetchedDocument, FetchFailed

from .conftest import deliver, upload

URL = "https://media.example.com/keynote.wav"


def _transcribe(deps: Services, service: ScriptedTranscribe, **options: Any) -> TranscribeAsr:
    clock = FakeClock()
    asr = TranscribeAsr(
        service,
        deps.inbox,
        bucket=deps.settings.files_bucket,
        poll_seconds=5,
        sleep=clock.sleep,
        clock=clock,
        **options,
    )
    deps.replace_ocr_asr(None, asr)
    return asr


def _parsed(files: MemoryFileStore, key: str) -> str:
    return files._objects[key][0].decode()


def test_a_retry_after_a_failed_write_reads_the_finished_job_and_meters_it_once(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = ScriptedTranscribe(deps.inbox, statuses=["COMPLETED"], transcript="the keeper logs the weather")
    _transcribe(deps, service, poll_budget_seconds=60)
    metered: list[float] = []
    monkeypatch.setattr(
        metering,
        "record",
        lambda counter, amount: metered.append(amount) if counter == metering.TRANSCRIBE_SECONDS else None,
    )
    real_save, broken = MemoryFileStore.save_if_absent, []

    def parsed_write_fails_once(store: MemoryFileStore, key: str, data: bytes, *args: Any) -> bool:
        if "/parsed/" in key and not broken:
            broken.append(key)
            raise ConnectionError("the store did not answer")
        return real_save(store, key, data, *args)

    monkeypatch.setattr(MemoryFileStore, "save_if_absent", parsed_write_fails_once)
    created = upload(deps, kb, "talk.wav", wav())
    deliver(deps, "docreader")  # the job completes and is read; the Markdown write fails
    deliver(deps, "docreader")  # the retry
    assert broken and len(service.started) == 1 and metered == [15]
    assert "the keeper logs the weather" in _parsed(files, broken[0])
    assert broken[0] == parsed_markdown_key(created.tenant_id, created.id, created.attempt)
    # written: the kept transcript goes too
    assert not [key for key in deps.inbox._objects if key.startswith("transcribed/")]


def test_a_duplicate_docreader_message_starts_no_second_job(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    service = ScriptedTranscribe(deps.inbox, statuses=["COMPLETED"])
    _transcribe(deps, service, poll_budget_seconds=60)
    upload(deps, kb, "talk.wav", wav())
    [body] = queue.bodies("docreader")
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    queue.send_raw("docreader", body)  # SQS delivers at least once
    deliver(deps, "docreader")
    assert len(service.started) == 1
    assert len(queue.bodies("chunking")) == 1  # handed over again (chunking is idempotent), not parsed again


@pytest.mark.parametrize(
    ("kb_language", "file_name", "expected"),
    [("ko", "hearing.wav", "ko-KR"), ("", "hearing.ja.wav", "ja-JP"), ("ja", "hearing.ko.wav", "ja-JP")],
)
def test_the_asr_language_or_the_file_names_tag_fixes_the_transcribe_language(
    deps: Services, tenant: Tenant, kb_language: str, file_name: str, expected: str
) -> None:
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="hearings", asr_language=kb_language))
    service = ScriptedTranscribe(deps.inbox, statuses=["COMPLETED"])
    _transcribe(deps, service)
    upload(deps, kb, file_name, wav())
    deliver(deps, "docreader")
    [params] = service.started
    assert params["LanguageCode"] == expected and "IdentifyLanguage" not in params


def test_a_language_transcribe_does_not_know_is_identified(deps: Services, tenant: Tenant) -> None:
    from chalicelib.parsers.asr import transcribe_language_code

    assert transcribe_language_code("la") is None  # Latin: a Whisper language, not a Transcribe one
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="latin", asr_language="la"))
    service = ScriptedTranscribe(deps.inbox, statuses=["COMPLETED"])
    _transcribe(deps, service)
    upload(deps, kb, "oratio.wav", wav())
    deliver(deps, "docreader")
    [params] = service.started
    assert params["IdentifyLanguage"] is True and "LanguageCode" not in params


def test_a_resume_polls_the_job_without_downloading_the_url_again(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, files: MemoryFileStore
) -> None:
    service = ScriptedTranscribe(deps.inbox, statuses=["IN_PROGRESS"] * 5 + ["COMPLETED"])
    _transcribe(deps, service, poll_budget_seconds=5)
    urls.answer(URL, FetchedDocument("keynote.wav", "wav", wav(seconds=5)))
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=URL))
    for _ in range(6):
        deliver(deps, "docreader")
    assert len(service.started) == 1 and len(urls.fetched) == 1
    assert service.deleted == [service.started[0]["TranscriptionJobName"]]
    parsed = _parsed(files, parsed_markdown_key(created.tenant_id, created.id, created.attempt))
    assert parsed.strip() == "hello from transcribe"


def test_a_download_that_fails_after_the_job_started_does_not_strand_the_job(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    service = ScriptedTranscribe(deps.inbox, statuses=["IN_PROGRESS"] * 3 + ["FAILED"])
    _transcribe(deps, service, poll_budget_seconds=5)
    urls.answer(
        URL,
        [
            FetchedDocument("keynote.wav", "wav", wav(seconds=5)),
            FetchFailed("HTTP 404", permanent=True, status=404),
        ],
    )
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=URL))
    deliver(deps, "docreader")  # the job starts and hands over
    deliver(deps, "docreader")  # the resume polls it, the source is not fetched again
    assert deps.knowledge.get(created.id).parse_status.value == "processing" and len(urls.fetched) == 1
    for _ in range(3):
        deliver(deps, "docreader")
    row = deps.knowledge.get(created.id)
    assert row.parse_status.value == "failed" and not service.jobs  # the failed row's job is gone


def test_docreader_throttle_deferrals_do_not_reach_chunking(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    service = ScriptedTranscribe(
        deps.inbox, statuses=["COMPLETED"], start_errors=["LimitExceededException"] * 5
    )
    _transcribe(deps, service, poll_budget_seconds=60)
    upload(deps, kb, "talk.wav", wav())
    for _ in range(6):
        deliver(deps, "docreader")
    [handed_over] = queue.bodies("chunking")
    assert handed_over.get("deferrals", 0) == 0 and handed_over.get("door_ticket", "") == ""
    deliver(deps, "chunking")
    assert queue.bodies("embedding")[0].get("deferrals", 0) == 0
