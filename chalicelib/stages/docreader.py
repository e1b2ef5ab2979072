"""docreader queue: the source (stored file or URL) → Markdown + stored images, per attempt.

Idempotent: the row is moved to `processing` for this very attempt (a superseded, cancelled or deleted row
is acknowledged and dropped), and the outputs are written once under the attempt's deterministic keys: a
redelivered message leaves what an earlier delivery stored (`_store_outputs`).

Speech on Amazon Transcribe: the job is named after the attempt, and a job still running when this
invocation stops polling goes on in a delayed copy of the message (cursor `transcribe`, not a failed try),
which resumes the same job.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    BadRequest,
    PermanentStageError,
    ServiceUnavailable,
    SpanErrorCode,
    TransientStageError,
)
from chalicelib.domain.filetypes import MARKUP_EXTENSIONS, is_importable
from chalicelib.domain.languages import with_languages
from chalicelib.domain.markup import strip_active_content
from chalicelib.domain.process_config import engine_rules, resolve
from chalicelib.domain.storage_keys import exports_key, images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import (
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    SpanStatus,
    Stage,
    StageMessage,
)
from chalicelib.domain.urls import redact_credentials
from chalicelib.net.urlimport import url_file_type
from chalicelib.observability import logger
from chalicelib.parsers.asr import (
    TRANSCRIPTION_CURSOR,
    TranscriptionPending,
    transcription_key,
    transcription_scope,
)
from chalicelib.parsers.progress import progress_listener
from chalicelib.parsers.reader import NO_SPEECH_TEXT
from chalicelib.ports import (
    Dependencies,
    FetchFailed,
    ObjectNotRetained,
    ObjectTooLarge,
    ReadRequest,
    ReadResult,
    ResolvedImages,
)
from chalicelib.services import page_range_store, page_ranges, resources
from chalicelib.services.deadline import stage_deadline
from chalicelib.services.fairness import Entry, enter_pipeline, leave_pipeline
from chalicelib.services.stage_queue import enqueue
from chalicelib.services.storage import files_of
from chalicelib.services.stored_size import kept_parse_write, recount_quietly
from chalicelib.services.usable import require_usable_for_stage
from chalicelib.stages.runner import run_stage


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_stage(deps, Stage.DOCREADER, event, context, run)


def run(deps: Dependencies, message: StageMessage) -> None:
    if message.assemble:
        assembled = page_ranges.assemble(deps, message)
        if assembled is not None:
            row, assembled_markdown, assembled_images, outputs = assembled
            kept = _finish(deps, row, message, assembled_markdown, assembled_images, outputs)
            # the ranges' parts go; of an attempt that ended meanwhile the plan stays, by which a later
            # removal finds what a range still running writes (kept for a cancelled attempt)
            page_range_store.clean_up(deps, row, keep_plan=not kept)
            if not kept:  # a cancelled attempt counts what it keeps: no longer the parts just removed
                recount_quietly(deps, row.id, attempt=row.attempt, status=ParseStatus.CANCELLED)
        return
    if message.is_page_range:
        page_ranges.parse_range(
            deps, message, lambda knowledge, result: _store_images(deps, knowledge, result, "pdf")
        )
        return
    resuming = message.cursor == TRANSCRIPTION_CURSOR  # a speech-recognition job was left running
    entry = enter_pipeline(deps, message)  # or wait behind other tenants (AwaitingTurn)
    if entry is Entry.STALE:
        return
    knowledge = deps.knowledge.begin_processing(message.knowledge_id, message.attempt)
    if knowledge is None:
        if entry is Entry.ENTERED:  # the place it just took is not needed
            leave_pipeline(deps, message.tenant_id, message.knowledge_id)
        logger.info(
            "docreader: not processable (superseded, cancelled, deleted or done)",
            extra={"knowledge_id": message.knowledge_id, "attempt": message.attempt},
        )
        if resuming:
            _abandon_transcription(deps, message)
        return
    metering.attribute(knowledge.kb_id, knowledge.tenant_id)
    if _already_read(deps, knowledge):
        # a duplicate of a delivery that finished (SQS is at least once): hand over again, as that
        # delivery did (chunking is idempotent), but parse nothing and start no second Transcribe job
        enqueue(deps, Stage.CHUNKING, _handover(message))
        return
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    if kb.indexing_strategy.needs_embedding:
        require_usable_for_stage(deps, kb)  # a knowledge base that cannot index fails its documents at once
    if not resuming:
        deps.tracker.begin_stage(
            knowledge,
            Stage.DOCREADER,
            {
                "file_name": knowledge.file_name,
                "file_type": knowledge.file_type,
                "is_url": knowledge.type in (KnowledgeType.URL, KnowledgeType.FILE_URL),
            },
        )
    try:
        _read_and_finish(deps, knowledge, message, kb, resuming)
    except PermanentStageError:
        # the row fails: a Transcribe job left for a retry is not wanted any more
        _abandon_transcription(deps, message)
        raise


def _read_and_finish(
    deps: Dependencies, knowledge: Knowledge, message: StageMessage, kb: KnowledgeBase, resuming: bool
) -> None:
    scope_key = transcription_key(knowledge.id, knowledge.attempt)
    if resuming:
        # the job runs on: poll it without fetching or parsing the source again
        with transcription_scope(scope_key, stage_deadline.get()):
            transcript = _resumed_transcript(deps, knowledge)
        if transcript is not None:
            engine_name = str(getattr(deps.asr(), "name", ""))
            outputs = {"dropped_icons": 0, "title": knowledge.title, "engine": engine_name}
            _finish(deps, knowledge, message, transcript or NO_SPEECH_TEXT, [], outputs)
            _abandon_transcription(deps, message)
            return
    data, file_name, file_type, title = _source(deps, knowledge)
    tenant = deps.tenants.get(knowledge.tenant_id)
    rules = engine_rules(kb, tenant.parser_engine_rules if tenant else {}, knowledge.process_overrides)
    engine = rules.get(file_type, "")
    effective = resolve(kb, knowledge.process_overrides)
    ocr_languages = effective.ocr_languages
    request = ReadRequest(
        data=data,
        file_name=file_name or f"source.{file_type}",
        file_type=file_type,
        engine=engine,
        options={
            "parser_engine_rules": rules,
            "ocr_languages": ocr_languages,
            "asr_language": effective.asr_language,
            "spreadsheet_layout": effective.spreadsheet_layout,
            "xlsx_first_row_as_header": effective.xlsx_first_row_as_header,
        },
        url=knowledge.source,
    )
    pages = deps.docreader().page_count(request) if file_type == "pdf" else None
    if pages is not None and pages > deps.settings.parse_parallel_pages:
        page_ranges.fan_out(deps, knowledge, message, request, title, pages)
        return
    # Audio: the Transcribe job is named after this attempt, so a later delivery resumes it.
    try:
        with (
            transcription_scope(scope_key, stage_deadline.get()),
            progress_listener(lambda done: deps.tracker.progress(knowledge, Stage.DOCREADER, done)),
        ):
            result = deps.docreader().read(request)
    except TranscriptionPending:
        deps.tracker.progress(knowledge, Stage.DOCREADER, {"transcription": "running"})
        raise
    ocr_text = _ocr_uploaded_image(deps, result, ocr_languages)
    resolved = _store_images(deps, knowledge, result, file_type)
    images = [asdict(image) for image in resolved.images]
    markdown = resolved.markdown
    if ocr_text:
        markdown = f"{markdown.rstrip()}\n\n{ocr_text}\n"
        for image in images:
            if image["is_original"]:
                image["ocr_in_markdown"] = True
    outputs = {
        "dropped_icons": resolved.dropped_icons,
        "title": title,
        "engine": result.metadata.get("engine", engine or "default"),
        **_pages(result.metadata),
    }
    _finish(deps, knowledge, message, markdown, images, outputs)
    if result.is_audio:  # written: the completed Transcribe job and its transcript go now
        _abandon_transcription(deps, message)


def _resumed_transcript(deps: Dependencies, knowledge: Knowledge) -> str | None:
    """The running job's transcript (raises TranscriptionPending while it runs), or None when the engine
    has no job to resume (the source is read and transcribed afresh)."""
    resume = getattr(deps.asr(), "resume", None)
    if not callable(resume):
        return None
    try:
        transcript: str | None = resume(knowledge.file_name)
    except TranscriptionPending:
        deps.tracker.progress(knowledge, Stage.DOCREADER, {"transcription": "running"})
        raise
    return transcript.strip() if transcript is not None else None


def _already_read(deps: Dependencies, knowledge: Knowledge) -> bool:
    """The docreader stage of this very attempt is done (its span says so: best effort, so a duplicate
    whose span write was lost is parsed again, and its write leaves what the first stored)."""
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.DOCREADER.value)
    return span is not None and span.status == SpanStatus.DONE


def _handover(message: StageMessage) -> StageMessage:
    """The chunking message: the docreader's own marks do not travel on. `cursor` is embedding's resume
    point, `deferrals` count this stage's throttling (each stage has its own max_throttle_deferrals), and
    the door ticket is the docreader's turn at the pipeline's door."""
    return replace(message, assemble=False, cursor="", deferrals=0, door_ticket="")


def _finish(
    deps: Dependencies,
    knowledge: Knowledge,
    message: StageMessage,
    markdown: str,
    images: list[dict[str, Any]],
    outputs: dict[str, Any],
) -> bool:
    """Stores the attempt's Markdown and image manifest, closes the stage and hands over to chunking. False
    when the attempt ended meanwhile (what was written is then undone or removed)."""
    markdown = strip_active_content(markdown)  # no script of a file reaches a reader (as for manual text)
    if not markdown.strip() and not images:
        raise PermanentStageError(
            "the document has no extractable text", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        )
    stored = _store_outputs(deps, knowledge, markdown.encode(), images)

    def undo() -> None:
        written = (stored.parsed, stored.manifest, *(str(image["url"]) for image in stored.images))
        resources.release_urls(deps, written)  # the images registered as they were stored
        for url in written:
            deps.files.delete(url)

    if not kept_parse_write(deps, knowledge, undo):
        return False
    resources.register_written(
        deps, knowledge, resources.ROLE_PARSED, stored.parsed, len(stored.markdown), knowledge.attempt
    )
    if stored.first or not _already_read(deps, knowledge):  # (the delivery that stored them closed it)
        deps.tracker.end_stage(
            knowledge,
            Stage.DOCREADER,
            {"markdown_chars": len(stored.markdown.decode()), "images": len(stored.images), **outputs},
        )
    # handed over even by a duplicate: the delivery that stored the outputs may have died before its own
    # hand-over, and this one's ack ends the message (chunking is idempotent)
    enqueue(deps, Stage.CHUNKING, _handover(message))
    return True


@dataclass(frozen=True)
class _StoredOutputs:
    parsed: str
    manifest: str
    markdown: bytes
    images: list[dict[str, Any]]
    #: this delivery stored the Markdown (False: an earlier delivery of the attempt had)
    first: bool


def _store_outputs(
    deps: Dependencies, knowledge: Knowledge, markdown: bytes, images: list[dict[str, Any]]
) -> _StoredOutputs:
    """Writes the attempt's Markdown, then its manifest, each only where none is stored yet: a duplicate
    delivery (SQS is at least once; one running alongside the first passes the span check, and a span check
    before the write would leave a window) never rewrites what an earlier one stored, which chunking may have
    read and indexing counted, though its parse may differ (a remote image answered other bytes). A stored
    Markdown equal to this parse's links the same images, so this manifest completes a write cut short;
    another parse's manifest stands, and this parse's images it does not list go (nothing would count them)."""
    store = files_of(deps, knowledge)
    at = (knowledge.tenant_id, knowledge.id, knowledge.attempt)
    parsed = store.url_for(parsed_markdown_key(*at))
    manifest = store.url_for(images_manifest_key(*at))
    first = store.save_if_absent(parsed_markdown_key(*at), markdown, "text/markdown; charset=utf-8")
    same_markdown = first or (
        deps.files.size(parsed) == len(markdown) and deps.files.read(parsed) == markdown
    )
    if same_markdown and store.save_if_absent(
        images_manifest_key(*at), json.dumps(images).encode(), "application/json"
    ):
        return _StoredOutputs(parsed, manifest, markdown, images, first)
    try:
        stored_images: list[dict[str, Any]] = json.loads(deps.files.read(manifest))
    except FileNotFoundError:
        # another parse's Markdown without its manifest: its delivery died between the two writes (a web
        # page fetched again is rarely the same bytes), or, rarer, is between them now. Nothing can have read
        # or counted it (chunking starts after the manifest): this parse takes the attempt over, as every
        # delivery did before; that parse's images are found through the resource catalog at removal.
        store.save(parsed_markdown_key(*at), markdown, "text/markdown; charset=utf-8")
        store.save(images_manifest_key(*at), json.dumps(images).encode(), "application/json")
        return _StoredOutputs(parsed, manifest, markdown, images, True)
    listed = {str(image["url"]) for image in stored_images}
    own = (str(image["url"]) for image in images)
    unlisted = [url for url in own if url not in listed and url != knowledge.file_path]
    resources.release_urls(deps, unlisted)
    for url in unlisted:
        deps.files.delete(url)
    # read back: a delivery that took the attempt over may have replaced the Markdown this one stored
    kept = deps.files.read(parsed)
    return _StoredOutputs(parsed, manifest, kept, stored_images, kept == markdown and first)


def _abandon_transcription(deps: Dependencies, message: StageMessage) -> None:
    """The row moved on while its audio was being transcribed: the job and its objects go now."""
    abandon = getattr(deps.asr(), "abandon", None)
    if callable(abandon):
        abandon(transcription_key(message.knowledge_id, message.attempt))


def _pages(metadata: dict[str, Any]) -> dict[str, int]:
    """A paged document's page count, as its progress (the whole document is parsed by now)."""
    pages = metadata.get("pages")
    if isinstance(pages, int) and not isinstance(pages, bool) and pages > 0:
        return {"pages_parsed": pages, "pages_total": pages}
    return {}


def _source(deps: Dependencies, knowledge: Knowledge) -> tuple[bytes, str, str, str]:
    """(data, file_name, file_type, title) of the knowledge's source."""
    if knowledge.type in (KnowledgeType.URL, KnowledgeType.FILE_URL):
        fetched = _fetch_url(deps, knowledge)
        _record_fetched_size(deps, knowledge, len(fetched[0]))
        return fetched
    try:  # the limit the file was accepted under: an object replaced since is not read into memory
        data = deps.files.read(knowledge.file_path, limit=deps.settings.max_file_size)
    except ObjectTooLarge as error:
        raise _too_large("the stored source file", error.size, error.limit) from error
    except ObjectNotRetained as error:  # the `dummy` backend: the file was accepted and kept nowhere
        raise PermanentStageError(
            f"the document's storage backend {knowledge.storage_backend!r} keeps no files (a test backend): "
            "there is nothing to parse",
            code=SpanErrorCode.STORAGE_NOT_RETAINED,
        ) from error
    except FileNotFoundError as error:
        raise PermanentStageError(
            "the stored source file is missing", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        ) from error
    return data, knowledge.file_name, knowledge.file_type, knowledge.title


def _too_large(source: str, size: int, limit: int) -> PermanentStageError:
    """A source past WEKNORA_MAX_FILE_SIZE, stored or fetched, fails the document at once (an upload past it
    is refused with the same code)."""
    return PermanentStageError(
        f"{source} is {size} bytes, more than the {limit} bytes allowed", code=SpanErrorCode.FILE_TOO_LARGE
    )


#: a refused URL fails its row with the code the API answers at request time for the same refusal
_REFUSAL_CODES = {
    SpanErrorCode.SSRF_BLOCKED.value: SpanErrorCode.SSRF_BLOCKED,
    SpanErrorCode.HOST_UNRESOLVED.value: SpanErrorCode.HOST_UNRESOLVED,
    "dns_unavailable": SpanErrorCode.HOST_UNRESOLVED,  # the resolver did not answer, to the last try
    # the importer stops reading at WEKNORA_MAX_FILE_SIZE (bootstrap): the size is only known to be more
    SpanErrorCode.FILE_TOO_LARGE.value: SpanErrorCode.FILE_TOO_LARGE,
}


def _fetch_failure_code(refusal_code: str | None) -> SpanErrorCode:
    """`ssrf_blocked` / `host_unresolved` for a refused URL, `file_too_large` for a download past the limit,
    `url_fetch_failed` for any other failure."""
    return _REFUSAL_CODES.get(refusal_code or "", SpanErrorCode.URL_FETCH_FAILED)


def _fetch_url(deps: Dependencies, knowledge: Knowledge) -> tuple[bytes, str, str, str]:
    try:
        deps.urls.check(knowledge.source)  # again in the worker: DNS may have changed since the API checked
    except ServiceUnavailable as error:  # the resolver did not answer now: a later try may
        raise TransientStageError(error.message, code=_fetch_failure_code(error.code)) from error
    except BadRequest as error:
        raise PermanentStageError(error.message, code=_fetch_failure_code(error.code)) from error
    named = _named_download(knowledge)
    try:
        if named is None:
            document = deps.urls.fetch(knowledge.source)
        else:
            document = deps.urls.fetch(knowledge.source, file_type=named[0], file_name=named[1])
    except FetchFailed as error:
        stage_error = PermanentStageError if error.permanent else TransientStageError
        raise stage_error(  # the tenant's URL is theirs to see; the fetch's message names no redirect target
            f"could not fetch {redact_credentials(knowledge.source)}: {error.message}",
            code=_fetch_failure_code(error.code),
        ) from error
    # the real importer stops at the setting; this holds an importer built with another cap (or none)
    if len(document.data) > deps.settings.max_file_size:
        raise _too_large("the URL's document", len(document.data), deps.settings.max_file_size)
    if not is_importable(document.file_type):  # unnamed: what the URL really served decides, not its path
        raise PermanentStageError(
            f"the URL served an unsupported file type ({document.file_type or 'unknown'})",
            code=SpanErrorCode.UNSUPPORTED_TYPE,
        )
    return document.data, document.file_name, document.file_type, document.title or knowledge.title


def _named_download(knowledge: Knowledge) -> tuple[str, str] | None:
    """(file_type, file_name) the tenant gave a file URL import: WeKnora's download mode reads the file as
    that type. None when nothing was given: the row's type is then the URL path's extension (create records
    it), and what the URL serves decides (the server's Content-Type, the bytes, a redirect's path)."""
    if knowledge.type != KnowledgeType.FILE_URL or not knowledge.file_type:
        return None
    if not knowledge.file_name and knowledge.file_type == url_file_type(knowledge.source):
        return None  # also a type given as the path's own: the URL names it all the same
    return knowledge.file_type, knowledge.file_name


def _record_fetched_size(deps: Dependencies, knowledge: Knowledge, size: int) -> None:
    """A URL's size is known only once it is fetched: it goes on the row, as an upload's does at create,
    so indexing counts it against the tenant's storage (and a size that does not fit fails the document
    with `quota_exceeded`). Only for this very try, still processing (one conditional write); a
    redelivery writes what it fetched itself, and a row that moved on is left as it is."""
    if size == knowledge.file_size:
        return
    recorded = deps.knowledge.update_fields(
        knowledge.id,
        {"file_size": size},
        expect={"attempt": knowledge.attempt, "parse_status": ParseStatus.PROCESSING.value},
    )
    if recorded is None:
        logger.info(
            "docreader: the row moved on before the fetched size was recorded",
            extra={"knowledge_id": knowledge.id, "attempt": knowledge.attempt},
        )


def _store_images(
    deps: Dependencies, knowledge: Knowledge, result: ReadResult, file_type: str
) -> ResolvedImages:
    """Every image is stored through the KB's FileStore with dedupe, and the Markdown links rewritten.
    Remote images are fetched only for markup sources (Markdown, HTML, web archives, EPUB): in a PDF or an
    office file an image link is the document's text, and fetching it would rewrite that text."""

    def save(data: bytes, ext: str) -> str:
        key = exports_key(knowledge.tenant_id, knowledge.id, knowledge.attempt, data, ext)
        url = files_of(deps, knowledge).save(key, data)
        resources.register_written(deps, knowledge, resources.ROLE_IMAGE, url, len(data), knowledge.attempt)
        return url

    remote = file_type in MARKUP_EXTENSIONS
    return deps.image_resolver(save).resolve(result.markdown, result.images, remote=remote)


def _ocr_uploaded_image(deps: Dependencies, result: ReadResult, languages: list[str]) -> str:
    """An uploaded image's text goes into the Markdown, so it is chunked and searchable like any text.
    OCR engines raise permanent errors for input they can never read and transient ones otherwise."""
    original = next((image for image in result.images if image.is_original), None)
    ocr = deps.ocr()
    if original is None or ocr is None:
        return ""
    return with_languages(ocr, languages).recognize(original.data).strip()
