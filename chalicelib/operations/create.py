"""The create path shared by every entry: multipart upload, presigned upload, URL import and manual text.

Order, as the specification has it: gate the extension → dedupe → save the object → insert the row
(pending/disabled) → enqueue the first stage. The row is never inserted when the save failed, the object
is removed (and the tenant's document place given back) when the insert failed, a row inserted into a
knowledge base deleted meanwhile is taken away again, and an enqueue failure leaves a `failed` row that
reparse recovers.

Over 600 lines on purpose: the four entries share the gate, the insert, what follows it and its undo, which
are private steps here; split by entry, each half would reach into the other's.
"""

from __future__ import annotations

import json
import posixpath
import re
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlparse

from chalicelib.commands import (
    ManualRequest,
    ProcessConfig,
    UploadUrlRequest,
    UrlImportRequest,
)
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import AppError, BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge
from chalicelib.domain.events import EventType
from chalicelib.domain.filetypes import is_importable, validate_import_file_type
from chalicelib.domain.ids import file_dedupe_key, file_md5, url_dedupe_key
from chalicelib.domain.item_limits import clip_utf8
from chalicelib.domain.markup import strip_active_content
from chalicelib.domain.process_config import check_document_settings
from chalicelib.domain.storage_keys import (
    folder_of,
    one_line,
    presigned_upload_key,
    safe_file_name,
    source_object_key,
    upload_intent_key,
    upload_result_key,
)
from chalicelib.domain.types import Knowledge, KnowledgeBase, KnowledgeType, ParseStatus, Stage, utcnow
from chalicelib.domain.urls import redact_credentials
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, DuplicateKnowledge, ObjectTooLarge
from chalicelib.services import resources
from chalicelib.services.dispatch import enqueue_first_stage
from chalicelib.services.events import knowledge_changed
from chalicelib.services.offered import check_override_models
from chalicelib.services.ownership import require_kb
from chalicelib.services.quotas import check_storage_for_upload, reserve_document, take_storage
from chalicelib.services.stage_queue import visible_at

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass
class FileUpload:
    """An uploaded file with its validated fields (from the multipart form or a presigned intent)."""

    data: bytes
    file_name: str
    metadata: dict[str, Any] = field(default_factory=dict)
    tag_ids: list[str] = field(default_factory=list)
    overrides: dict[str, Any] = field(default_factory=dict)
    channel: str = "api"
    knowledge_id: str | None = None  # pre-allocated by the presigned path


class AlreadyCreated(Exception):
    """The row of this very id is already there: another delivery of the same presigned upload's event
    created it first (only a presigned upload's id is allocated before its create). Nothing to do."""

    def __init__(self, existing: Knowledge):
        super().__init__(f"knowledge {existing.id} is already created")
        self.existing = existing


def duplicate_error(existing: Knowledge, code: str) -> Conflict:
    return Conflict(f"already exists as knowledge {existing.id}", code=code, data=existing.to_dict())


def _overrides(
    deps: Dependencies, config: ProcessConfig | None, enable_multimodel: bool | None = None
) -> dict[str, Any]:
    overrides = (config or ProcessConfig()).overrides(enable_multimodel)
    check_override_models(deps.settings, overrides)
    return overrides


def _document_kb(kb: KnowledgeBase) -> KnowledgeBase:
    """`kb`, if it holds documents: an FAQ knowledge base holds Q&A entries (the FAQ routes), whether a
    document would come as a file, a URL or written text."""
    if kb.type == "faq":
        raise BadRequest(
            "an FAQ knowledge base holds Q&A entries, not documents: use its /faq routes",
            code="faq_kb_no_files",
        )
    return kb


def _gate_file(
    deps: Dependencies, kb: KnowledgeBase, file_name: str, size: int | None, overrides: dict[str, Any]
) -> str:
    file_type = validate_import_file_type(file_name)
    _document_kb(kb)
    if size is not None and size > deps.settings.max_file_size:
        raise BadRequest(
            f"file is {size} bytes; the limit is {deps.settings.max_file_size} bytes", code="file_too_large"
        )
    check_storage_for_upload(deps, kb.tenant_id, size)
    check_document_settings(deps, kb, overrides, file_type)
    return file_type


def create_from_file(deps: Dependencies, tenant_id: str, kb_id: str, upload: FileUpload) -> Knowledge:
    kb = require_kb(deps, tenant_id, kb_id)
    overrides = upload.overrides
    check_override_models(deps.settings, overrides)
    file_type = _gate_file(deps, kb, upload.file_name, len(upload.data), overrides)
    if not upload.data:
        raise BadRequest("the file is empty", code="empty_file")
    from chalicelib.services.tagging import check_tag_ids

    # a presigned upload (its id pre-allocated) drops a tag deleted while the file travelled
    tag_ids = check_tag_ids(deps, kb.id, upload.tag_ids, strict=upload.knowledge_id is None)
    md5 = file_md5(upload.data)
    dedupe_key = file_dedupe_key(tenant_id, kb.id, file_type, md5)
    existing = deps.knowledge.find_duplicate(dedupe_key)
    if existing is not None:
        if existing.id == upload.knowledge_id:  # another delivery of this upload's event created it
            raise AlreadyCreated(existing)
        raise duplicate_error(existing, "duplicate_file")

    knowledge_id = upload.knowledge_id or str(uuid.uuid4())
    url = deps.files.backend(kb.storage_backend).save(
        source_object_key(tenant_id, knowledge_id, file_type), upload.data
    )
    name = safe_file_name(upload.file_name)
    knowledge = Knowledge(
        id=knowledge_id,
        tenant_id=tenant_id,
        kb_id=kb.id,
        storage_backend=kb.storage_backend,
        type=KnowledgeType.FILE,
        title=name,
        file_name=name,
        file_type=file_type,
        file_size=len(upload.data),
        file_hash=md5,
        file_path=url,
        enable_multimodel=bool(overrides.get("enable_multimodel", False)),
        metadata=upload.metadata,
        process_overrides=overrides,
        tag_ids=tag_ids,
        channel=upload.channel,
        folder_path=folder_of(upload.file_name),
        dedupe_key=dedupe_key,
    )
    _insert_or_remove_object(deps, knowledge, url, "duplicate_file")
    return _after_insert(deps, knowledge)


def _insert_or_remove_object(
    deps: Dependencies, knowledge: Knowledge, url: str | None, duplicate_code: str
) -> None:
    """Reserve the tenant's place → the tag relations → the row. Every failure after the reservation gives
    the place back and removes the relations and the object. The caller goes on with `_after_insert`."""
    from chalicelib.services.tagging import relate_new

    if knowledge.parse_status == ParseStatus.PENDING:  # its docreader message follows: one write, not two
        knowledge.queued_stage, knowledge.queued_at = Stage.DOCREADER.value, visible_at()
    try:
        reserved = reserve_document(deps, knowledge.tenant_id)
    except Exception:  # over the quota, or the count's write not answered: the object goes either way
        if url:
            deps.files.delete(url)
        raise
    try:
        # the stored bytes count from now, within the quota (one conditional add), not once indexed: the
        # row records them (`storage_size`), so indexing adds nothing more and the row's delete gives them
        # back, once. (A URL import's size is known, and counted, only at indexing.)
        take_storage(deps, knowledge.tenant_id, knowledge.file_size, "the file")
    except Exception:  # over the quota, or the count's write not answered: nothing was counted
        _undo(deps, knowledge, url, inserted=False, reserved=reserved)
        raise
    knowledge.storage_size = knowledge.file_size
    try:
        # the tag relations first: a crash leaves a stale one, never a missing one
        relate_new(deps, knowledge)
        deps.knowledge.insert(knowledge)
    except DuplicateKnowledge as duplicate:
        existing, own_id = duplicate.existing, duplicate.existing.id == knowledge.id
        # lost to the row of its own id: relations are keyed by the creation time, so the same one is its too
        shared = own_id and to_iso(existing.created_at) == to_iso(knowledge.created_at)
        _undo(
            deps,
            knowledge,
            url,
            inserted=False,
            reserved=reserved,
            counted=knowledge.storage_size,
            relations=not shared,
        )
        if own_id:
            raise AlreadyCreated(existing) from None
        raise duplicate_error(existing, duplicate_code) from None  # lost a race with an identical upload
    except BaseException:
        _undo(deps, knowledge, url, inserted=False, reserved=reserved, counted=knowledge.storage_size)
        raise


def _after_insert(deps: Dependencies, knowledge: Knowledge) -> Knowledge:
    """What follows the insert: the knowledge base read again, the create announced, a file's original
    registered, the first stage queued (a draft waits). A presigned upload's event delivered again runs it
    again when the delivery that inserted the row may have died before the end (`_finish_own_row`): the
    event's id and the stage message are the same, and consumers and the docreader drop a repeat."""
    _undo_if_kb_closed(deps, knowledge, knowledge.file_path or None)
    knowledge_changed(deps, knowledge, EventType.KNOWLEDGE_CREATED)
    if knowledge.type == KnowledgeType.FILE and knowledge.file_path:
        resources.register_written(
            deps, knowledge, resources.ROLE_ORIGINAL, knowledge.file_path, knowledge.file_size
        )
    if knowledge.parse_status == ParseStatus.DRAFT:
        return knowledge
    return enqueue_first_stage(deps, knowledge, marked=True)


def _undo_if_kb_closed(deps: Dependencies, knowledge: Knowledge, url: str | None) -> None:
    """The knowledge base read again after the insert: a delete that began while the object was saved found
    no row to sweep, so this create takes its row (and with it the tenant's place), its relations and its
    object away again, and answers as `require_kb` would now. A delete that begins after this read sweeps the
    row itself (its task looks for rows once more just before the knowledge base goes); when both remove
    it, the row's delete counts once."""
    kb = deps.kbs.get(knowledge.kb_id, consistent=True)  # a stale read would miss a delete just begun
    if kb is not None and kb.status != "deleting":
        return
    _undo(deps, knowledge, url, inserted=True, reserved=True)
    logger.warning(
        "the knowledge base was deleted while a document was created: the create is undone",
        extra={"knowledge_id": knowledge.id, "kb_id": knowledge.kb_id},
    )
    if kb is None:
        raise NotFound(f"knowledge base {knowledge.kb_id} not found", code="kb_not_found")
    raise Conflict(f"knowledge base {knowledge.kb_id} is being deleted", code="kb_deleting")


def _undo(
    deps: Dependencies,
    knowledge: Knowledge,
    url: str | None,
    *,
    inserted: bool,
    reserved: bool,
    counted: int = 0,
    relations: bool = True,
) -> None:
    """A create taken back: the row (its delete gives the tenant's place and counted bytes back with it,
    once, whoever deletes it) or else the reserved place and the `counted` bytes, then the object, then the
    tag relations (unless they are a row's of the same id too: `relations` False). Each step runs even when
    one before it failed; the error still goes on (the message retries, the client sees a 500)."""
    from chalicelib.services.tagging import unrelate_all

    try:
        if inserted:
            deps.knowledge.delete(knowledge.id)
        else:
            if counted:
                deps.tenants.add_usage(knowledge.tenant_id, -counted)
            if reserved:
                deps.tenants.release_document(knowledge.tenant_id)
    finally:
        try:
            if url:
                deps.files.delete(url)
        finally:
            if relations:
                unrelate_all(deps, knowledge)


# ---------------------------------------------------------------- presigned uploads


def create_upload_url(
    deps: Dependencies, tenant_id: str, kb_id: str, request: UploadUrlRequest
) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    file_name, size = request.file_name, request.file_size
    overrides = _overrides(deps, request.process_config, request.enable_multimodel)
    file_type = _gate_file(deps, kb, file_name, size, overrides)
    from chalicelib.services.tagging import check_tag_ids

    tag_ids = check_tag_ids(deps, kb.id, request.tag_ids)
    if size is not None:  # the bytes are not here yet: the second dedupe branch (type, name, size)
        same = deps.knowledge.find_same_file(kb.id, file_type, safe_file_name(file_name), size)
        if same is not None:
            raise duplicate_error(same, "duplicate_file")
    knowledge_id = str(uuid.uuid4())
    key = _upload_key(deps.settings.upload_prefix, tenant_id, kb.id, knowledge_id, file_name)
    expires_in = deps.settings.presign_expires_seconds
    granted_at = utcnow()
    intent = {
        "tenant_id": tenant_id,
        "kb_id": kb.id,
        "knowledge_id": knowledge_id,
        "file_name": file_name,
        "metadata": request.metadata,
        "tag_ids": tag_ids,
        "process_config": overrides,
        "declared_size": size,
        # for GET /knowledge/{id}: when the URL stops working, and where its object lands (`upload_expired`)
        "created_at": to_iso(granted_at),
        "expires_at": to_iso(granted_at + timedelta(seconds=expires_in)),
        "key": key,
    }
    deps.inbox.save(upload_intent_key(knowledge_id), json.dumps(intent).encode(), "application/json")
    content_type = request.content_type
    url = deps.inbox.presign_put(key, expires_in, content_type)
    return {
        "upload_url": url,
        "method": "PUT",
        "key": key,
        "knowledge_id": knowledge_id,
        "headers": {"Content-Type": content_type} if content_type else {},
        "expires_in": expires_in,
        "max_size": deps.settings.max_file_size,
    }


#: S3 refuses a key longer than this many UTF-8 bytes (KeyTooLongError): the URL granted would never work
S3_MAX_KEY_BYTES = 1024


def _upload_key(prefix: str, tenant_id: str, kb_id: str, knowledge_id: str, file_name: str) -> str:
    """The presigned object's key, its name shortened (extension kept) to fit S3's limit: 255 characters of
    a four-byte script (emoji) are 1,020 bytes. The name in the key is for people reading the bucket only:
    the document is named from its intent."""
    key = presigned_upload_key(prefix, tenant_id, kb_id, knowledge_id, file_name)
    if len(key.encode()) <= S3_MAX_KEY_BYTES:
        return key
    folder, name = key.rsplit("/", 1)
    stem, ext = posixpath.splitext(name)
    room = max(0, S3_MAX_KEY_BYTES - len(f"{folder}/{ext}".encode()))
    return presigned_upload_key(prefix, tenant_id, kb_id, knowledge_id, clip_utf8(stem, room) + ext)


def accept_uploaded_object(deps: Dependencies, key: str) -> Knowledge | None:
    """S3 ObjectCreated → the same create path as multipart. Returns None for keys that are not ours."""
    parts = _upload_key_parts(deps, key)
    if parts is None:
        logger.warning("ignoring an object outside the upload layout", extra={"key": key})
        return None
    tenant_id, kb_id, knowledge_id = parts
    object_url = deps.inbox.url_for(key)
    intent_url = deps.inbox.url_for(upload_intent_key(knowledge_id))
    # The row before the intent: a delete removes the intent before the row (tasks/delete.py), so an intent
    # read after the row was found missing is one no delete has consumed.
    if deps.knowledge.get(knowledge_id) is not None:  # a redelivered event, or the same PUT again
        _finish_own_row(deps, knowledge_id, object_url, intent_url)
        return None
    # Only our presigned URLs write under the upload prefix, and each intent is saved before its URL is
    # answered (S3 reads after writes): an object without its intent was PUT again after the intent was
    # consumed (the document created, and maybe deleted since), or its event is a late copy. It is never a
    # document's file (that is stored under `source_object_key`), so it goes: left, a replay would park up
    # to 5 GB that no quota counts until the bucket's 7-day rule.
    if not deps.inbox.exists(intent_url):
        deps.inbox.delete(object_url)
        logger.info("no upload intent (consumed): the object is deleted", extra={"key": key})
        return None
    intent = json.loads(deps.inbox.read(intent_url))
    if intent["tenant_id"] != tenant_id or intent["kb_id"] != kb_id:  # not the key its URL was signed for
        deps.inbox.delete(object_url)
        logger.warning("upload key does not match its intent: the object is deleted", extra={"key": key})
        return None
    if not deps.inbox.exists(object_url):  # a redelivered event for an object already handled
        return None
    try:  # a presigned PUT is not size-bound (and may be replayed): a bigger file is never read into memory
        data = deps.inbox.read(object_url, limit=deps.settings.max_file_size)
    except ObjectTooLarge as too_large:
        _record_rejection(
            deps,
            knowledge_id,
            object_url,
            BadRequest(
                f"file is {too_large.size} bytes; the limit is {too_large.limit} bytes",
                code="file_too_large",
            ),
        )
        return None
    upload = FileUpload(
        data=data,
        file_name=intent["file_name"],
        metadata=intent.get("metadata") or {},
        tag_ids=intent.get("tag_ids") or [],
        overrides=intent.get("process_config") or {},
        channel="presigned",
        knowledge_id=knowledge_id,
    )
    try:
        knowledge = create_from_file(deps, tenant_id, kb_id, upload)
    except (AlreadyCreated, BadRequest, Conflict, Forbidden, NotFound) as rejected:
        # two copies of the event at once: the other created the row (found while creating, or it took the
        # room this one wanted: a quota refusal), so this one finishes as a redelivery would
        if isinstance(rejected, AlreadyCreated) or deps.knowledge.get(knowledge_id) is not None:
            logger.info("the upload was accepted by another delivery of its event", extra={"key": key})
            _finish_own_row(deps, knowledge_id, object_url, intent_url)
            return None
        _record_rejection(deps, knowledge_id, object_url, rejected)
        return None
    _consume(deps, object_url, intent_url)
    return knowledge


def _upload_key_parts(deps: Dependencies, key: str) -> tuple[str, str, str] | None:
    """(tenant, knowledge base, knowledge) of a presigned upload's object key; None for another key."""
    prefix = deps.settings.upload_prefix
    parts = key[len(prefix) :].split("/") if key.startswith(prefix) else []
    return (parts[0], parts[1], parts[2]) if len(parts) == 4 else None


#: what GET /knowledge/{id} answers for an upload whose acceptance failed on every try of its message
UPLOAD_FAILED = "upload_failed"


def give_up_uploaded_object(deps: Dependencies, key: str) -> None:
    """The uploads queue's last try failed (an outage, or a bug): record it, so GET /knowledge/{id} says so
    instead of `upload_pending` until the intent expires days later. The object and the intent stay: a
    redrive of the message, or the same PUT again, still creates the document (its row then wins)."""
    parts = _upload_key_parts(deps, key)
    if parts is None or deps.knowledge.get(parts[2]) is not None:
        return
    failed = AppError(
        "the uploaded file could not be accepted (a service failure): upload it again", code=UPLOAD_FAILED
    )
    _save_rejection(deps, parts[2], failed)


def _finish_own_row(deps: Dependencies, knowledge_id: str, object_url: str, intent_url: str) -> None:
    """A delivery of the upload's event that finds the upload's row. The intent goes only once the delivery
    that inserted the row has announced it and queued its first stage, so a row still pending at its first
    attempt (no docreader has begun it) whose intent is still there may be one whose delivery died in
    between (a timeout in the announcement's sends, say): without this it would never be announced nor
    parsed, and housekeeping would fail it. It is finished again (`_after_insert`), which is harmless when
    the other delivery is alive; a row whose intent is gone was finished, and nothing is done again."""
    row = deps.knowledge.get(knowledge_id)
    if (
        row is not None
        and row.attempt == 1
        and row.parse_status == ParseStatus.PENDING
        and deps.inbox.exists(intent_url)
    ):
        logger.warning(
            "an upload's row found unfinished by its event's delivery: announced and queued again",
            extra={"knowledge_id": knowledge_id},
        )
        try:
            _after_insert(deps, row)
        except (Conflict, NotFound) as rejected:  # its knowledge base went meanwhile: the row was taken away
            _record_rejection(deps, knowledge_id, object_url, rejected)
            return
    _consume(deps, object_url, intent_url)


def _consume(deps: Dependencies, object_url: str, intent_url: str) -> None:
    """An accepted upload's staged object and then its intent go: the presigned URL stays valid for its
    hour, and a PUT replayed with it (or a late duplicate event) must not create the document again once it
    is deleted. The intent last, so a crash in between leaves it for the redelivery to finish."""
    deps.inbox.delete(object_url)
    deps.inbox.delete(intent_url)


def _record_rejection(deps: Dependencies, knowledge_id: str, object_url: str, rejected: AppError) -> None:
    """The client was told "accepted": record why it was not, so GET /knowledge/{id} can say."""
    _save_rejection(deps, knowledge_id, rejected)
    deps.inbox.delete(object_url)


def _save_rejection(deps: Dependencies, knowledge_id: str, rejected: AppError) -> None:
    outcome = {"code": rejected.code, "message": rejected.message, "data": rejected.data}
    deps.inbox.save(upload_result_key(knowledge_id), json.dumps(outcome).encode(), "application/json")


# ---------------------------------------------------------------- URL and manual


def validate_url_shape(url: str) -> str:
    url = url.strip()
    try:
        parsed = urlparse(url)
        hostname = parsed.hostname
    except ValueError as error:  # e.g. an unbalanced IPv6 bracket
        raise BadRequest("url is not a valid URL", code="invalid_url") from error
    if not url or not hostname:
        raise BadRequest("url must be an absolute http(s) URL", code="invalid_url")
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadRequest("url must be an absolute http(s) URL", code="invalid_url")
    return url


def create_from_url(deps: Dependencies, tenant_id: str, kb_id: str, request: UrlImportRequest) -> Knowledge:
    kb = _document_kb(require_kb(deps, tenant_id, kb_id))
    url = validate_url_shape(request.url)
    overrides = _overrides(deps, request.process_config, request.enable_multimodel)
    from chalicelib.services.tagging import check_tag_ids

    tag_ids = check_tag_ids(deps, kb.id, request.tag_ids)
    file_name = request.file_name
    file_type = request.file_type.lower().lstrip(".")
    path_type = urlparse(url).path.rsplit(".", 1)[-1].lower() if "." in urlparse(url).path else ""
    is_file = bool(file_name or file_type or is_importable(path_type))
    if is_file:
        file_type = file_type or (validate_import_file_type(file_name) if file_name else path_type)
        validate_import_file_type(f"x.{file_type}")
    check_document_settings(deps, kb, overrides, file_type if is_file else "html")
    deps.urls.check(url)  # last of the checks: it resolves the host
    dedupe_key = url_dedupe_key(tenant_id, kb.id, url)
    existing = deps.knowledge.find_duplicate(dedupe_key)
    if existing is not None:
        raise duplicate_error(existing, "duplicate_url")
    knowledge = Knowledge(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        kb_id=kb.id,
        storage_backend=kb.storage_backend,
        type=KnowledgeType.FILE_URL if is_file else KnowledgeType.URL,
        title=request.title or one_line(safe_file_name(file_name) if file_name else redact_credentials(url)),
        source=url,
        file_name=safe_file_name(file_name) if file_name else "",
        file_type=file_type if is_file else "html",
        enable_multimodel=bool(overrides.get("enable_multimodel", False)),
        process_overrides=overrides,
        tag_ids=tag_ids,
        channel=request.channel,
        dedupe_key=dedupe_key,
    )
    _insert_or_remove_object(deps, knowledge, None, "duplicate_url")
    return _after_insert(deps, knowledge)


def sanitize_manual(content: str) -> str:
    """Hand-written Markdown: no control characters, and no active content (the same cleaning as the
    Markdown parsed from files, `markup.strip_active_content`)."""
    content = _CONTROL.sub("", content.replace("\r\n", "\n"))
    return strip_active_content(content).strip()


def _not_a_path(title: str) -> str:
    """A title is not a path: "Q3/Q4 plan" keeps its "Q3" (safe_file_name keeps only a path's last part)."""
    return title.replace("/", "_").replace("\\", "_")


#: an ATX heading's marker (`## `): a title taken from a heading line is the heading's text
_HEADING_MARKER = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+|$)")


def _title_of(content: str) -> str:
    """The title of a text sent without one: its first line, without a heading marker, as one line of
    printable text (what a title sent would have to be, `commands.OneLine`)."""
    return one_line(_HEADING_MARKER.sub("", content.splitlines()[0])) or "manual"


def create_manual(deps: Dependencies, tenant_id: str, kb_id: str, request: ManualRequest) -> Knowledge:
    kb = _document_kb(require_kb(deps, tenant_id, kb_id))
    title = request.title.strip()
    content = sanitize_manual(request.content)
    status = request.status
    if not content:
        raise BadRequest("content must not be empty", code="empty_content")
    if len(content) > deps.settings.manual_max_runes:
        raise PayloadTooLarge(
            f"content is over {deps.settings.manual_max_runes} characters", code="content_too_long"
        )
    overrides = _overrides(deps, request.process_config)
    check_document_settings(deps, kb, overrides, "md")
    from chalicelib.services.tagging import check_tag_ids

    tag_ids = check_tag_ids(deps, kb.id, request.tag_ids)
    data = content.encode()
    check_storage_for_upload(deps, kb.tenant_id, len(data))  # as a file of the same bytes
    knowledge_id = str(uuid.uuid4())
    url = deps.files.backend(kb.storage_backend).save(
        source_object_key(tenant_id, knowledge_id, "md"), data, "text/markdown"
    )
    knowledge = Knowledge(
        id=knowledge_id,
        tenant_id=tenant_id,
        kb_id=kb.id,
        storage_backend=kb.storage_backend,
        type=KnowledgeType.MANUAL,
        title=title or _title_of(content),  # each within MAX_TITLE (the request's field, one_line)
        file_name=f"{safe_file_name(_not_a_path(title or 'manual'))}.md",
        file_type="md",
        file_size=len(data),
        file_path=url,
        process_overrides=overrides,
        tag_ids=tag_ids,
        channel=request.channel,
        parse_status=ParseStatus.DRAFT if status == "draft" else ParseStatus.PENDING,
    )
    _insert_or_remove_object(deps, knowledge, url, "duplicate_manual")
    return _after_insert(deps, knowledge)
