"""Reparse: a new attempt that cleans the previous chunks and index entries and re-enqueues."""

from __future__ import annotations

from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.events import EventType
from chalicelib.domain.process_config import check_document_settings
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.ports import Dependencies
from chalicelib.services import resources
from chalicelib.services.derived_data import remove_derived_data
from chalicelib.services.dispatch import enqueue_first_stage, fail_not_queued
from chalicelib.services.events import knowledge_changed
from chalicelib.services.offered import check_override_models
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.stored_size import recount_quietly, remove_ended_attempt


def reparse(deps: Dependencies, tenant_id: str, knowledge_id: str, request: ReparseRequest) -> Knowledge:
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status in (ParseStatus.DELETING, ParseStatus.DRAFT):
        raise BadRequest(
            f"cannot reparse a knowledge that is {knowledge.parse_status.value}", code="invalid_state"
        )
    overrides = request.process_config.overrides() if request.process_config is not None else None
    if overrides is not None:  # new settings for this document: checked as an upload's are
        check_override_models(deps.settings, overrides)
        kb = require_kb(deps, tenant_id, knowledge.kb_id)
        check_document_settings(deps, kb, overrides, knowledge.file_type)
    previous = knowledge
    # an attempt never indexed is reset only while it still is not (its outputs then count for no one,
    # and no later write can count them: indexing needs the attempt), so they go; an indexed one's stay,
    # counted, until the new attempt is indexed
    unindexed = previous.processed_at is None
    try:
        knowledge = deps.knowledge.reset_for_reparse(
            knowledge.id,
            overrides,
            unindexed_attempt=previous.attempt if unindexed else None,
            at_attempt=previous.attempt,  # another reparse meanwhile made a newer attempt: not reset again
        )
    except LookupError as error:  # it changed meanwhile (indexed, another reparse, deleted)
        raise BadRequest("the knowledge changed state; try again", code="invalid_state") from error
    # the document left search (pending, a new attempt): announced once, by the write that decided it
    knowledge_changed(deps, knowledge, EventType.KNOWLEDGE_REPARSE_STARTED)
    # only now, as a restart does: a refused reset must leave the document whole, and an earlier attempt's
    # write landing after this finds itself superseded and takes itself back
    clear_earlier_attempts(deps, knowledge, "reparse to retry")
    queued = enqueue_first_stage(deps, knowledge)
    if unindexed:  # last: the new attempt is queued whatever the store answers here
        remove_ended_attempt(deps, knowledge, previous.attempt)
        if previous.storage_size > previous.file_size:
            # the row counted outputs (a cancelled attempt's, recounted; an earlier indexed one's, which
            # stay): what was removed is given back, what a refused removal left stays counted
            recount_quietly(deps, knowledge.id, attempt=knowledge.attempt)
    return queued


def clear_earlier_attempts(deps: Dependencies, fresh: Knowledge, retry_hint: str) -> None:
    """What earlier attempts derived (chunks, index entries, graph facts, wiki pages) goes, and their
    Markdown's links stop working: run after the reset to `fresh` and before its first stage is queued, so
    nothing of `fresh`'s own exists yet. A failure fails `fresh` as an attempt not queued (`retry_hint`
    says how to start it again; the removal is idempotent) and is raised to the caller."""
    try:
        remove_derived_data(deps, fresh)
        resources.release_owner(deps, fresh.id, role="parsed")
    except Exception as error:  # raised again: the caller sees it, the row says how to retry
        fail_not_queued(
            deps, fresh, f"could not clear the earlier attempt's data ({type(error).__name__}); {retry_hint}"
        )
        raise
