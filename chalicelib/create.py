"""The create path shared by every entry: multipart upload, presigned upload, URL import and manual text.

Order, as the specification has it: gate the extension → dedupe → save the object → insert the row
(pending/disabled) → enqueue the first stage. The row is never inserted when the save failed, the object
is removed when the insert failed, and an enqueue failure leaves a `failed` row that reparse recovers.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from .bootstrap import Services
from .domain.errors import AppError, BadRequest, Conflict, NotFound, PayloadTooLarge, SpanErrorCode
from .domain.filetypes import is_importable, validate_import_file_type
from .domain.process_config import check_media_gates, resolve, validate_overrides
from .domain.storage_keys import folder_of, safe_file_name, source_object_key
from .domain.types import Knowledge, KnowledgeBase, KnowledgeType, ParseStatus, Stage, StageMessage
from .ports import DuplicateKnowledge

log = logging.getLogger(__name__)

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
MAX_URL = 2048


@dataclass
class FileUpload:
    data: bytes
    file_name: str
    metadata: dict[str, Any] = field(default_factory=dict)
    enable_multimodel: bool | None = None
    tag_ids: list[str] = field(default_factory=list)
    process_config: Any = None
    channel: str = "api"
    knowledge_id: str | None = None  # pre-allocated by the presigned path


def require_kb(svc: Services, tenant_id: str, kb_id: str) -> KnowledgeBase:
    kb = svc.kbs.get(kb_id)
    if kb is None or kb.tenant_id != tenant_id:
        raise NotFound(f"knowledge base {kb_id} not found", code="kb_not_found")
    return kb


def file_dedupe_key(tenant_id: str, kb_id: str, file_type: str, md5: str) -> str:
    # Type-scoped: the same bytes as notes.md and notes.txt are two knowledge items (spec §1.2).
    return f"{tenant_id}|{kb_id}|file|{file_type.lower()}|{md5}"


def url_dedupe_key(tenant_id: str, kb_id: str, url: str) -> str:
    return f"{tenant_id}|{kb_id}|url|{hashlib.md5(url.encode()).hexdigest()}"


def duplicate_error(existing: Knowledge, code: str) -> Conflict:
    return Conflict(f"already exists as knowledge {existing.id}", code=code, data=existing.to_dict())


def enqueue_first_stage(svc: Services, knowledge: Knowledge, stage: Stage = Stage.DOCREADER) -> Knowledge:
    try:
        svc.queue.send(stage, StageMessage(knowledge.tenant_id, knowledge.id, knowledge.attempt))
    except Exception as error:
        log.exception("enqueue failed for %s", knowledge.id)
        message = f"could not enqueue processing: {error}; reparse to retry"
        svc.knowledge.mark_failed(knowledge.id, knowledge.attempt, message, SpanErrorCode.ENQUEUE_FAILED)
        knowledge.parse_status = ParseStatus.FAILED
        knowledge.error_message = message
        knowledge.error_code = SpanErrorCode.ENQUEUE_FAILED
    return knowledge


def parse_tag_ids(raw: Any) -> list[str]:
    if raw in (None, ""):
        return []
    if isinstance(raw, list):
        return [str(t).strip() for t in raw if str(t).strip()]
    return [t.strip() for t in str(raw).split(",") if t.strip()]


def parse_metadata(raw: Any) -> dict[str, Any]:
    if raw in (None, ""):
        return {}
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw)
    except (TypeError, ValueError) as error:
        raise BadRequest("metadata must be a JSON object", code="invalid_metadata") from error
    if not isinstance(value, dict):
        raise BadRequest("metadata must be a JSON object", code="invalid_metadata")
    return value


def _overrides_with_flag(raw: Any, enable_multimodel: bool | None) -> dict[str, Any]:
    overrides = validate_overrides(raw)
    # process_config wins over the form flag (spec §1.1)
    if enable_multimodel is not None and "enable_multimodel" not in overrides:
        overrides["enable_multimodel"] = enable_multimodel
    return overrides


def _gate_file(
    svc: Services, kb: KnowledgeBase, file_name: str, size: int | None, overrides: dict[str, Any]
) -> str:
    file_type = validate_import_file_type(file_name)
    if kb.type == "faq":
        raise BadRequest("files cannot be uploaded into an FAQ knowledge base", code="faq_kb_no_files")
    if size is not None and size > svc.settings.max_file_size:
        raise BadRequest(
            f"file is {size} bytes; the limit is {svc.settings.max_file_size} bytes", code="file_too_large"
        )
    check_media_gates(
        file_type,
        resolve(kb, overrides),
        ocr_available=svc.ocr_available(),
        asr_available=svc.asr_available(),
    )
    return file_type


def create_from_file(svc: Services, tenant_id: str, kb_id: str, upload: FileUpload) -> Knowledge:
    kb = require_kb(svc, tenant_id, kb_id)
    overrides = _overrides_with_flag(upload.process_config, upload.enable_multimodel)
    file_type = _gate_file(svc, kb, upload.file_name, len(upload.data), overrides)
    if not upload.data:
        raise BadRequest("the file is empty", code="empty_file")
    md5 = hashlib.md5(upload.data).hexdigest()
    dedupe_key = file_dedupe_key(tenant_id, kb.id, file_type, md5)
    existing = svc.knowledge.find_duplicate(dedupe_key)
    if existing is not None:
        raise duplicate_error(existing, "duplicate_file")

    knowledge_id = upload.knowledge_id or str(uuid.uuid4())
    url = svc.files.save(source_object_key(tenant_id, knowledge_id, file_type), upload.data)
    name = safe_file_name(upload.file_name)
    knowledge = Knowledge(
        id=knowledge_id,
        tenant_id=tenant_id,
        kb_id=kb.id,
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
        tag_ids=upload.tag_ids,
        channel=upload.channel,
        folder_path=folder_of(upload.file_name),
        dedupe_key=dedupe_key,
    )
    _insert_or_remove_object(svc, knowledge, url, "duplicate_file")
    return enqueue_first_stage(svc, knowledge)


def _insert_or_remove_object(
    svc: Services, knowledge: Knowledge, url: str | None, duplicate_code: str
) -> None:
    try:
        svc.knowledge.insert(knowledge)
    except DuplicateKnowledge as duplicate:  # lost a race with an identical upload
        if url:
            svc.files.delete(url)
        raise duplicate_error(duplicate.existing, duplicate_code) from None
    except Exception:
        if url:
            svc.files.delete(url)
        raise


# ---------------------------------------------------------------- presigned uploads


def intent_key(knowledge_id: str) -> str:
    return f"intents/{knowledge_id}.json"


def create_upload_url(svc: Services, tenant_id: str, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
    kb = require_kb(svc, tenant_id, kb_id)
    file_name = str(body.get("file_name") or body.get("fileName") or "")
    if not file_name:
        raise BadRequest("file_name is required", code="missing_file_name")
    size = body.get("file_size")
    if size is not None and (not isinstance(size, int) or size < 0):
        raise BadRequest("file_size must be a non-negative integer", code="invalid_file_size")
    overrides = _overrides_with_flag(body.get("process_config"), body.get("enable_multimodel"))
    _gate_file(svc, kb, file_name, size, overrides)
    knowledge_id = str(uuid.uuid4())
    intent = {
        "tenant_id": tenant_id,
        "kb_id": kb.id,
        "knowledge_id": knowledge_id,
        "file_name": file_name,
        "metadata": parse_metadata(body.get("metadata")),
        "tag_ids": parse_tag_ids(body.get("tag_ids")),
        "process_config": overrides,
        "declared_size": size,
    }
    svc.inbox.save(intent_key(knowledge_id), json.dumps(intent).encode(), "application/json")
    key = f"{svc.settings.upload_prefix}{tenant_id}/{kb.id}/{knowledge_id}/{safe_file_name(file_name)}"
    content_type = str(body.get("content_type") or "")
    url = svc.inbox.presign_put(key, svc.settings.presign_expires_seconds, content_type)
    return {
        "upload_url": url,
        "method": "PUT",
        "key": key,
        "knowledge_id": knowledge_id,
        "headers": {"Content-Type": content_type} if content_type else {},
        "expires_in": svc.settings.presign_expires_seconds,
        "max_size": svc.settings.max_file_size,
    }


def accept_uploaded_object(svc: Services, key: str) -> Knowledge | None:
    """S3 ObjectCreated → the same create path as multipart. Returns None for keys that are not ours."""
    prefix = svc.settings.upload_prefix
    parts = key[len(prefix) :].split("/") if key.startswith(prefix) else []
    if len(parts) != 4:
        log.warning("ignoring object outside the upload layout: %s", key)
        return None
    tenant_id, kb_id, knowledge_id, _ = parts
    object_url = svc.inbox.url_for(key)
    try:
        intent = json.loads(svc.inbox.read(svc.inbox.url_for(intent_key(knowledge_id))))
    except Exception:
        log.warning("no upload intent for %s; the object is left for inspection", key)
        return None
    if intent["tenant_id"] != tenant_id or intent["kb_id"] != kb_id:
        log.warning("upload key does not match its intent: %s", key)
        return None
    if svc.knowledge.get(knowledge_id) is not None:  # redelivered event: already created
        svc.inbox.delete(object_url)
        return None
    if not svc.inbox.exists(object_url):  # a redelivered event for an object already handled
        return None
    size = svc.inbox.size(object_url)
    if size > svc.settings.max_file_size:  # a presigned PUT is not size-bound: never read it into memory
        _record_rejection(
            svc,
            knowledge_id,
            object_url,
            BadRequest(
                f"file is {size} bytes; the limit is {svc.settings.max_file_size} bytes",
                code="file_too_large",
            ),
        )
        return None
    data = svc.inbox.read(object_url)
    upload = FileUpload(
        data=data,
        file_name=intent["file_name"],
        metadata=intent.get("metadata") or {},
        tag_ids=intent.get("tag_ids") or [],
        process_config=intent.get("process_config") or {},
        channel="presigned",
        knowledge_id=knowledge_id,
    )
    try:
        knowledge = create_from_file(svc, tenant_id, kb_id, upload)
    except (BadRequest, Conflict, NotFound) as rejected:
        _record_rejection(svc, knowledge_id, object_url, rejected)
        return None
    svc.inbox.delete(object_url)
    return knowledge


def _record_rejection(svc: Services, knowledge_id: str, object_url: str, rejected: AppError) -> None:
    """The client was told "accepted": record why it was not, so GET /knowledge/{id} can say."""
    outcome = {"code": rejected.code, "message": rejected.message, "data": rejected.data}
    svc.inbox.save(f"intents/{knowledge_id}.result.json", json.dumps(outcome).encode(), "application/json")
    svc.inbox.delete(object_url)


def missing_knowledge_error(svc: Services, tenant_id: str, knowledge_id: str) -> NotFound:
    """The 404 for a knowledge id without a row of this tenant. A presigned upload of this tenant that
    has no row yet says whether it is still awaited or why it was rejected; nothing about another
    tenant's upload is ever revealed (the intent names its tenant)."""
    not_found = NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    intent_url = svc.inbox.url_for(intent_key(knowledge_id))
    if svc.knowledge.get(knowledge_id) is not None or not svc.inbox.exists(intent_url):
        return not_found
    if json.loads(svc.inbox.read(intent_url)).get("tenant_id") != tenant_id:
        return not_found
    result_url = svc.inbox.url_for(f"intents/{knowledge_id}.result.json")
    if not svc.inbox.exists(result_url):
        return NotFound("the presigned upload has not arrived yet", code="upload_pending")
    rejected = json.loads(svc.inbox.read(result_url))
    return NotFound(rejected["message"], code=rejected["code"], data=rejected.get("data"))


# ---------------------------------------------------------------- URL and manual


def validate_url_shape(url: str) -> str:
    url = url.strip()
    if not url or len(url) > MAX_URL:
        raise BadRequest(f"url must be 1 to {MAX_URL} characters", code="invalid_url")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise BadRequest("url must be an absolute http(s) URL", code="invalid_url")
    return url


def create_from_url(svc: Services, tenant_id: str, kb_id: str, body: dict[str, Any]) -> Knowledge:
    kb = require_kb(svc, tenant_id, kb_id)
    url = validate_url_shape(str(body.get("url") or ""))
    svc.check_url(url)
    overrides = _overrides_with_flag(body.get("process_config"), body.get("enable_multimodel"))
    file_name = str(body.get("file_name") or "")
    file_type = str(body.get("file_type") or "").lower().lstrip(".")
    path_type = urlparse(url).path.rsplit(".", 1)[-1].lower() if "." in urlparse(url).path else ""
    is_file = bool(file_name or file_type or is_importable(path_type))
    if is_file:
        file_type = file_type or (validate_import_file_type(file_name) if file_name else path_type)
        validate_import_file_type(f"x.{file_type}")
    dedupe_key = url_dedupe_key(tenant_id, kb.id, url)
    existing = svc.knowledge.find_duplicate(dedupe_key)
    if existing is not None:
        raise duplicate_error(existing, "duplicate_url")
    knowledge = Knowledge(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        kb_id=kb.id,
        type=KnowledgeType.FILE_URL if is_file else KnowledgeType.URL,
        title=str(body.get("title") or file_name or url)[:500],
        source=url,
        file_name=safe_file_name(file_name) if file_name else "",
        file_type=file_type if is_file else "html",
        enable_multimodel=bool(overrides.get("enable_multimodel", False)),
        process_overrides=overrides,
        tag_ids=parse_tag_ids(body.get("tag_ids")),
        channel=str(body.get("channel") or "api"),
        dedupe_key=dedupe_key,
    )
    _insert_or_remove_object(svc, knowledge, None, "duplicate_url")
    return enqueue_first_stage(svc, knowledge)


def sanitize_manual(content: str) -> str:
    content = _CONTROL.sub("", content.replace("\r\n", "\n"))
    return re.sub(r"(?is)<script\b.*?</script>", "", content).strip()


def create_manual(svc: Services, tenant_id: str, kb_id: str, body: dict[str, Any]) -> Knowledge:
    kb = require_kb(svc, tenant_id, kb_id)
    title = str(body.get("title") or "").strip()
    content = sanitize_manual(str(body.get("content") or ""))
    status = str(body.get("status") or "publish")
    if status not in ("draft", "publish"):
        raise BadRequest("status must be draft or publish", code="invalid_status")
    if not content:
        raise BadRequest("content must not be empty", code="empty_content")
    if len(content) > svc.settings.manual_max_runes:
        raise PayloadTooLarge(
            f"content is over {svc.settings.manual_max_runes} characters", code="content_too_long"
        )
    overrides = validate_overrides(body.get("process_config"))
    knowledge_id = str(uuid.uuid4())
    data = content.encode()
    url = svc.files.save(source_object_key(tenant_id, knowledge_id, "md"), data, "text/markdown")
    knowledge = Knowledge(
        id=knowledge_id,
        tenant_id=tenant_id,
        kb_id=kb.id,
        type=KnowledgeType.MANUAL,
        title=(title or content.splitlines()[0])[:500],
        file_name=f"{safe_file_name(title or 'manual')}.md",
        file_type="md",
        file_size=len(data),
        file_path=url,
        process_overrides=overrides,
        tag_ids=parse_tag_ids(body.get("tag_ids")),
        channel=str(body.get("channel") or "api"),
        parse_status=ParseStatus.DRAFT if status == "draft" else ParseStatus.PENDING,
    )
    _insert_or_remove_object(svc, knowledge, url, "duplicate_manual")
    if status == "draft":
        return knowledge
    return enqueue_first_stage(svc, knowledge)
