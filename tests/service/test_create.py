"""The create path on the fakes: file, duplicates and dedupe takeover, presigned upload, URL import, manual
text, and an enqueue failure."""

from __future__ import annotations

import json
import threading

import pytest

from chalicelib.adapters.memory import (
    MemoryFileStore,
    MemoryKnowledgeRepo,
    MemoryTaskQueue,
    ScriptedUrlImporter,
)
from chalicelib.bootstrap import Services
from chalicelib.commands import ManualRequest, ReparseRequest, UploadUrlRequest, UrlImportRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound, PayloadTooLarge, SpanErrorCode
from chalicelib.domain.ids import file_dedupe_key, file_md5
from chalicelib.domain.storage_keys import upload_intent_key
from chalicelib.domain.types import EnableStatus, KnowledgeBase, KnowledgeType, ParseStatus
from chalicelib.operations.create import (
    accept_uploaded_object,
    create_from_url,
    create_manual,
    create_upload_url,
)
from chalicelib.operations.knowledge import get_knowledge
from chalicelib.ports import FetchedDocument, FetchFailed
from chalicelib.services.ownership import missing_knowledge_error
from chalicelib.stages import uploads
from chalicelib.tasks.reparse import reparse

from .conftest import TEXT, deliver, drain, upload

# ---------------------------------------------------------------- file upload


def test_a_file_is_stored_inserted_pending_and_its_first_stage_enqueued(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
) -> None:
    created = upload(deps, kb, "guides/notes.md")
    assert (created.parse_status, created.enable_status) == (ParseStatus.PENDING, EnableStatus.DISABLED)
    assert created.file_name == "notes.md" and created.folder_path == "guides"
    assert created.file_hash == file_md5(TEXT) and created.file_size == len(TEXT)
    assert files.read(created.file_path) == TEXT
    assert files.key_of(created.file_path).startswith(f"{kb.tenant_id}/{created.id}/")
    assert "notes" not in files.key_of(created.file_path)  # the stored name never carries the user's
    stored = rows.get(created.id)
    assert stored is not None and stored.to_dict() == created.to_dict() | {
        "created_at": stored.to_dict()["created_at"],
        "updated_at": stored.to_dict()["updated_at"],
        "queued_stage": "docreader",  # the row records where its first message waits
        "queued_at": stored.to_dict()["queued_at"],
    }
    assert stored.queued_at
    assert queue.bodies("docreader") == [
        {"tenant_id": kb.tenant_id, "knowledge_id": created.id, "attempt": 1}
    ]
    holder = rows.find_duplicate(file_dedupe_key(kb.tenant_id, kb.id, "md", file_md5(TEXT)))
    assert holder is not None and holder.id == created.id


def test_a_new_row_carries_its_queue_record_in_its_insert_and_a_reparse_writes_it_again(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    marked: list[tuple[object, ...]] = []
    mark_queued = rows.mark_queued

    def spy(*args: object) -> None:
        marked.append(args)
        mark_queued(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(rows, "mark_queued", spy)
    created = upload(deps, kb)
    assert marked == []  # one write for a new row: the insert
    drain(deps)
    marked.clear()
    again = reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    assert [(a[0], a[1], a[2]) for a in marked] == [(created.id, again.attempt, "docreader")]
    stored = rows.get(created.id)
    assert stored is not None and stored.queued_stage == "docreader" and stored.queued_at >= created.queued_at


def test_a_duplicate_is_a_409_with_the_existing_row_and_stores_nothing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    first = upload(deps, kb, "notes.md")
    with pytest.raises(Conflict) as conflict:
        upload(deps, kb, "renamed.md")
    assert conflict.value.code == "duplicate_file" and conflict.value.data["id"] == first.id
    assert len(files.keys(f"{kb.tenant_id}/")) == 1 and len(queue.sent) == 1
    # type-scoped: the same bytes as .txt are another knowledge (spec §1.2)
    assert upload(deps, kb, "notes.txt").id != first.id


def test_the_loser_of_a_race_lost_between_check_and_insert_leaves_no_object(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    """Both uploads pass the duplicate check; the atomic claim lets one insert win and the other's stored
    object is removed."""
    barrier = threading.Barrier(4)
    outcomes: list[str] = []
    real_find = deps.knowledge.find_duplicate

    def find_then_wait(dedupe_key: str) -> object:
        found = real_find(dedupe_key)
        barrier.wait()  # every upload has checked before any inserts
        return found

    deps.knowledge.find_duplicate = find_then_wait  # type: ignore[method-assign,assignment]

    def one() -> None:
        try:
            upload(deps, kb, "race.md")
            outcomes.append("created")
        except Conflict as conflict:
            outcomes.append(conflict.code)

    threads = [threading.Thread(target=one) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created", "duplicate_file", "duplicate_file", "duplicate_file"]
    assert len(files.keys(f"{kb.tenant_id}/")) == 1


def test_an_upload_of_a_failed_documents_bytes_takes_the_dedupe_key_over(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    failed = upload(deps, kb, "notes.md")
    assert rows.mark_failed(failed.id, 1, "the parser crashed", SpanErrorCode.UNKNOWN)
    again = upload(deps, kb, "notes.md")
    assert again.id != failed.id and again.parse_status == ParseStatus.PENDING
    with pytest.raises(Conflict) as conflict:  # the new row holds the key now
        upload(deps, kb, "notes.md")
    assert conflict.value.data["id"] == again.id


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("tool.exe", b"MZ", "unsupported_file_type"),
        ("talk.mp4", b"\x00\x00\x00\x18ftypmp42", "video_not_supported"),
        ("empty.txt", b"", "empty_file"),
        ("photo.png", b"\x89PNG\r\n\x1a\n", "image_needs_vlm_or_ocr"),  # no OCR in the memory set
        ("big.txt", b"x" * (1024 * 1024 + 1), "file_too_large"),
    ],
)
def test_bad_files_are_rejected_before_anything_is_stored(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, name: str, data: bytes, code: str
) -> None:
    with pytest.raises(BadRequest) as rejected:
        upload(deps, kb, name, data)
    assert rejected.value.code == code
    assert files.keys() == []


def test_a_knowledge_base_of_another_tenant_is_not_found(deps: Services, kb: KnowledgeBase) -> None:
    other = KnowledgeBase(kb.id, "someone-else", kb.name)
    with pytest.raises(NotFound) as missing:
        upload(deps, other)
    assert missing.value.code == "kb_not_found"


def test_an_enqueue_failure_leaves_a_failed_row_that_reparse_recovers(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    queue.make_unavailable("docreader")
    created = upload(deps, kb)
    assert created.parse_status == ParseStatus.FAILED and created.error_code == SpanErrorCode.ENQUEUE_FAILED
    assert "reparse" in created.error_message and "QueueUnavailable" in created.error_message
    stored = rows.get(created.id)
    assert stored is not None and stored.parse_status == ParseStatus.FAILED
    assert queue.waiting("docreader") == []

    queue.make_unavailable("docreader", False)
    again = reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    assert again.parse_status == ParseStatus.PENDING and again.attempt == 2 and again.error_message == ""
    assert [m["attempt"] for m in queue.bodies("docreader")] == [2]


# ---------------------------------------------------------------- presigned upload


def grant(deps: Services, kb: KnowledgeBase, file_name: str = "big notes.md") -> dict[str, object]:
    return create_upload_url(deps, kb.tenant_id, kb.id, UploadUrlRequest(file_name=file_name))


def test_a_presigned_upload_becomes_knowledge_through_the_same_create_path(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    granted = grant(deps, kb)
    knowledge_id = str(granted["knowledge_id"])
    pending = missing_knowledge_error(deps, kb.tenant_id, knowledge_id)
    assert pending.code == "upload_pending"

    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    created = accept_uploaded_object(deps, str(granted["key"]))
    assert created is not None and created.id == knowledge_id
    assert created.channel == "presigned" and created.file_name == "big notes.md"
    assert files.read(created.file_path) == TEXT
    assert not inbox.exists(inbox.url_for(str(granted["key"])))  # the staged object is removed
    assert get_knowledge(deps, kb.tenant_id, knowledge_id).id == knowledge_id
    assert accept_uploaded_object(deps, str(granted["key"])) is None  # a redelivered event
    assert len(queue.bodies("docreader")) == 1


def test_the_uploads_queue_turns_an_s3_notification_into_knowledge(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    granted = grant(deps, kb, "a b.md")
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    encoded_key = str(granted["key"]).replace(" ", "+")  # S3 URL-encodes keys in notifications
    notification = {"Records": [{"eventName": "ObjectCreated:Put", "s3": {"object": {"key": encoded_key}}}]}
    queue.send_raw("uploads", notification)
    queue.send_raw("uploads", {"Event": "s3:TestEvent"})
    response = queue.deliver("uploads", uploads.handle, deps)
    assert response["batchItemFailures"] == []
    assert get_knowledge(deps, kb.tenant_id, str(granted["knowledge_id"])).file_name == "a b.md"


def test_another_tenant_learns_nothing_about_a_rejected_presigned_upload(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    first = upload(deps, kb)
    granted = grant(deps, kb, "copy.md")
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    assert accept_uploaded_object(deps, str(granted["key"])) is None
    rejected = missing_knowledge_error(deps, kb.tenant_id, str(granted["knowledge_id"]))
    assert rejected.code == "duplicate_file" and rejected.data["id"] == first.id
    foreign = missing_knowledge_error(deps, "another-tenant", str(granted["knowledge_id"]))
    assert foreign.code == "knowledge_not_found" and foreign.data is None


def test_an_oversized_presigned_upload_is_rejected_without_being_read(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    granted = grant(deps, kb)
    object_url = inbox.put_presigned(str(granted["upload_url"]), b"x" * (deps.settings.max_file_size + 1))
    reads: list[tuple[str, int | None]] = []
    real_read = inbox.read

    def read(url: str, limit: int | None = None) -> bytes:
        reads.append((url, limit))
        return real_read(url, limit)

    inbox.read = read  # type: ignore[method-assign]
    assert accept_uploaded_object(deps, str(granted["key"])) is None
    # one read, bounded by the limit: the object's length refuses it before its bytes are read (a size check
    # and then an unbounded read had let a PUT replayed in between with a bigger file into memory)
    assert [read for read in reads if read[0] == object_url] == [(object_url, deps.settings.max_file_size)]
    assert missing_knowledge_error(deps, kb.tenant_id, str(granted["knowledge_id"])).code == "file_too_large"
    assert not inbox.exists(object_url)


def test_objects_outside_the_upload_layout_are_left_alone_and_without_an_intent_deleted(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    stray = inbox.save("elsewhere/file.md", TEXT)
    assert accept_uploaded_object(deps, "elsewhere/file.md") is None
    granted = grant(deps, kb)
    inbox.put_presigned(str(granted["upload_url"]), TEXT)
    inbox.delete(inbox.url_for(upload_intent_key(str(granted["knowledge_id"]))))
    assert accept_uploaded_object(deps, str(granted["key"])) is None
    assert inbox.exists(stray)  # not ours
    assert not inbox.exists(inbox.url_for(str(granted["key"])))  # a replay no quota counts: deleted


# ---------------------------------------------------------------- URL import


def test_a_url_import_is_checked_deduplicated_and_fetched_by_the_worker(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, files: MemoryFileStore
) -> None:
    url = "https://example.org/tides"
    urls.answer(
        url, FetchedDocument("tides.md", "md", b"# Tides\n\nSpring tides follow the full moon.\n", "Tides")
    )
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    assert created.type == KnowledgeType.URL and created.source == url and created.file_path == ""
    assert urls.checked == [url] and urls.fetched == []  # the API only checks; the worker downloads
    with pytest.raises(Conflict) as duplicate:
        create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    assert duplicate.value.code == "duplicate_url"

    urls.checked.clear()
    drain(deps, ["docreader"])
    assert urls.checked == [url] and urls.fetched == [url]  # checked again before the download
    parsed = files.url_for(f"{kb.tenant_id}/{created.id}/parsed/attempt-1.md")
    assert "Spring tides" in files.read(parsed).decode()


def test_a_link_to_a_file_is_a_file_url_of_that_type(deps: Services, kb: KnowledgeBase) -> None:
    created = create_from_url(
        deps, kb.tenant_id, kb.id, UrlImportRequest(url="https://example.org/a/report.pdf")
    )
    assert created.type == KnowledgeType.FILE_URL and created.file_type == "pdf"


def test_a_blocked_url_is_refused_by_the_api(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    urls = deps.urls
    assert isinstance(urls, ScriptedUrlImporter)
    urls.blocked.add("http://169.254.169.254/latest/meta-data/")
    with pytest.raises(BadRequest) as blocked:
        create_from_url(
            deps, kb.tenant_id, kb.id, UrlImportRequest(url="http://169.254.169.254/latest/meta-data/")
        )
    assert blocked.value.code == "ssrf_blocked"
    with pytest.raises(BadRequest) as shape:
        create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url="ftp://example.org/x"))
    assert shape.value.code == "invalid_url"
    assert queue.sent == []


def test_a_transient_fetch_failure_is_retried_and_a_permanent_one_fails_at_once(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    flaky, gone = "https://example.org/flaky", "https://example.org/gone"
    page = FetchedDocument("flaky.md", "md", b"# Flaky\n\nAnswers on the second try.\n")
    urls.answer(flaky, [FetchFailed("timed out", permanent=False), page])
    urls.answer(gone, FetchFailed("HTTP 404", permanent=True, status=404))
    flaky_row = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=flaky))
    gone_row = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=gone))

    first = deliver(deps, "docreader")
    assert len(first["batchItemFailures"]) == 1  # the flaky one goes back to its queue
    gone_now = rows.get(gone_row.id)
    assert gone_now is not None and gone_now.parse_status == ParseStatus.FAILED
    assert "HTTP 404" in gone_now.error_message and gone_now.error_code == SpanErrorCode.URL_FETCH_FAILED
    deliver(deps, "docreader")
    flaky_now = rows.get(flaky_row.id)
    assert flaky_now is not None and flaky_now.parse_status == ParseStatus.PROCESSING
    assert urls.fetched.count(flaky) == 2


def test_a_url_that_serves_an_unsupported_type_fails_with_that_reason(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter, rows: MemoryKnowledgeRepo
) -> None:
    url = "https://example.org/download"
    urls.answer(url, FetchedDocument("download.exe", "exe", b"MZ"))
    created = create_from_url(deps, kb.tenant_id, kb.id, UrlImportRequest(url=url))
    drain(deps, ["docreader"])
    failed = rows.get(created.id)
    assert failed is not None and failed.error_code == SpanErrorCode.UNSUPPORTED_TYPE


# ---------------------------------------------------------------- manual text


def test_a_manual_draft_stays_a_draft_and_a_published_one_is_processed(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, queue: MemoryTaskQueue
) -> None:
    draft = create_manual(
        deps, kb.tenant_id, kb.id, ManualRequest(title="Later", content="Not yet.", status="draft")
    )
    published = create_manual(
        deps,
        kb.tenant_id,
        kb.id,
        ManualRequest(title="Tides", content="Spring tides\r\nfollow the moon.<script>alert(1)</script>"),
    )
    assert draft.parse_status == ParseStatus.DRAFT and published.parse_status == ParseStatus.PENDING
    assert files.read(published.file_path) == b"Spring tides\nfollow the moon."
    assert [m["knowledge_id"] for m in queue.bodies("docreader")] == [published.id]
    with pytest.raises(BadRequest):  # a draft is not reparsed into processing
        reparse(deps, kb.tenant_id, draft.id, ReparseRequest())


@pytest.mark.parametrize(
    ("title", "file_name"),
    [("Q3/Q4 plan", "Q3_Q4 plan.md"), ("a\\b", "a_b.md"), ("", "manual.md"), ("../../etc", "_.._etc.md")],
)
def test_a_manual_title_names_its_file_whole(
    deps: Services, kb: KnowledgeBase, title: str, file_name: str
) -> None:
    """A title with a slash lost everything before it ("Q3/Q4 plan" was listed as "Q4 plan.md")."""
    created = create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title=title, content="Plans."))
    assert created.file_name == file_name and created.folder_path == ""


@pytest.mark.parametrize(
    ("content", "error", "code"),
    [("  \n ", BadRequest, "empty_content"), ("x" * 20_001, PayloadTooLarge, "content_too_long")],
)
def test_bad_manual_content_is_rejected(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, content: str, error: type[Exception], code: str
) -> None:
    with pytest.raises(error) as rejected:
        create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title="x", content=content))
    assert getattr(rejected.value, "code", None) == code
    assert files.keys() == []


def test_the_intent_of_a_presigned_upload_names_its_tenant_and_settings(
    deps: Services, kb: KnowledgeBase, inbox: MemoryFileStore
) -> None:
    request = UploadUrlRequest(
        file_name="n.md", metadata={"k": "v"}, process_config={"summary_enabled": False}
    )
    granted = create_upload_url(deps, kb.tenant_id, kb.id, request)
    intent = json.loads(inbox.read(inbox.url_for(upload_intent_key(str(granted["knowledge_id"])))))
    assert intent["tenant_id"] == kb.tenant_id and intent["kb_id"] == kb.id
    assert intent["metadata"] == {"k": "v"} and intent["process_config"] == {"summary_enabled": False}
    assert granted["max_size"] == deps.settings.max_file_size
