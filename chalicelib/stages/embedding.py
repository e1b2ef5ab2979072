"""embedding queue: embed and index the attempt's chunks, enable the document, start its state machine.

WeKnora fails a whole document on one rate-limited batch and throws away every batch already embedded.
Here each finished batch is written to the embedding cache at once (the checkpoint), throttling backs off
with jitter and honours Retry-After, a long wait puts the stage back on its queue instead of failing it,
a stage near its Lambda deadline hands over to a fresh invocation, and a retried stage, a reparse or a
clone only embeds texts the cache does not already hold. When indexing fails for good, the attempt's
chunks and index entries are rolled back (spec §1.10).
"""

from __future__ import annotations

import json
from typing import Any

from chalicelib.domain.errors import ContinueLater, PermanentStageError
from chalicelib.domain.ids import execution_name
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import Knowledge, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.services.derived_data import remove_derived_data
from chalicelib.services.fairness import leave_pipeline
from chalicelib.services.indexing import Stopped, index_knowledge
from chalicelib.services.liveness import live_knowledge
from chalicelib.services.quotas import require_storage_within_quota
from chalicelib.services.storage import files_of
from chalicelib.stages.runner import run_stage


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_stage(deps, Stage.EMBEDDING, event, context, run, rollback=rollback)


def run(deps: Dependencies, message: StageMessage) -> None:
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    offset, cursor = message.offset, message.cursor or None
    if offset and cursor is None:
        # A hand-over from before slices carried a cursor (an index into a full listing): start over.
        # Safe: entries are upserted by chunk id and the texts' vectors come back from the cache.
        logger.info("embedding: a slice without a cursor starts over", extra={"knowledge_id": knowledge.id})
        offset = 0
    if offset == 0:
        deps.tracker.begin_stage(knowledge, Stage.EMBEDDING, {"model": kb.embedding_model_id or "default"})
    try:
        outputs = index_knowledge(deps, knowledge, kb, offset, cursor)
    except Stopped as stopped:
        logger.info(str(stopped), extra={"knowledge_id": knowledge.id})
        leave_pipeline(deps, knowledge.tenant_id, knowledge.id)
        return
    if outputs["next_cursor"] is not None:
        raise ContinueLater(
            f"indexed {outputs['next_offset']} of {outputs['texts_total']} texts",
            offset=outputs["next_offset"],
            cursor=outputs["next_cursor"],
        )
    del outputs["next_offset"], outputs["next_cursor"]
    now = deps.kbs.get(kb.id)
    if now is not None and (now.embedding_model_id, now.retrieval_engine) != (
        kb.embedding_model_id,
        kb.retrieval_engine,
    ):
        # a re-embed switched the knowledge base while this document indexed into the old space
        raise ContinueLater(
            "the knowledge base switched its embedding model: indexing again", offset=0, cursor=""
        )
    manifest = files_of(deps, knowledge).url_for(
        images_manifest_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    images = json.loads(deps.files.read(manifest))
    require_storage_within_quota(deps, knowledge.tenant_id, knowledge.file_size - knowledge.storage_size)
    if not deps.knowledge.mark_indexed(
        knowledge.id,
        knowledge.attempt,
        chunk_count=outputs["chunks"],
        storage_size=knowledge.file_size,
        completed=False,
    ):
        logger.info("embedding: superseded or cancelled while indexing", extra={"knowledge_id": knowledge.id})
        return
    deps.tenants.add_usage(knowledge.tenant_id, knowledge.file_size - knowledge.storage_size)
    leave_pipeline(deps, knowledge.tenant_id, knowledge.id)  # indexed: the next document may come in
    deps.tracker.end_stage(knowledge, Stage.EMBEDDING, outputs)
    if knowledge.attempt > 1:
        remove_earlier_attempts(deps, knowledge, images)
    if not images:
        deps.tracker.skip_stage(knowledge, Stage.MULTIMODAL, "no images")
    deps.workflow.start(
        execution_name(knowledge.id, knowledge.attempt),
        {
            "knowledge_id": knowledge.id,
            "tenant_id": knowledge.tenant_id,
            "attempt": knowledge.attempt,
            "attempt_n": str(knowledge.attempt),
            "images": [
                {
                    "index": i,
                    "url": image["url"],
                    "ocr_done": bool(image.get("ocr_in_markdown")),
                    "original": bool(image.get("is_original")),
                }
                for i, image in enumerate(images)
            ],
        },
    )


def remove_earlier_attempts(deps: Dependencies, knowledge: Knowledge, images: list[dict[str, Any]]) -> None:
    """Once a reparse's attempt is indexed, the earlier attempts' parsed Markdown, image manifests and the
    images only they referenced are garbage: removed, so nothing is left behind (idempotent)."""
    keep = {str(image["url"]) for image in images}
    for attempt in range(1, knowledge.attempt):
        parsed = files_of(deps, knowledge).url_for(
            parsed_markdown_key(knowledge.tenant_id, knowledge.id, attempt)
        )
        manifest = files_of(deps, knowledge).url_for(
            images_manifest_key(knowledge.tenant_id, knowledge.id, attempt)
        )
        if deps.files.exists(manifest):
            for image in json.loads(deps.files.read(manifest)):
                if str(image["url"]) not in keep:
                    deps.files.delete(str(image["url"]))
        deps.files.delete(manifest)
        deps.files.delete(parsed)


def rollback(deps: Dependencies, message: StageMessage) -> None:
    """Indexing failed for good: delete this attempt's chunks and index entries (spec §1.10)."""
    knowledge = deps.knowledge.get(message.knowledge_id)
    if knowledge is not None and knowledge.attempt == message.attempt:
        remove_derived_data(deps, knowledge)
