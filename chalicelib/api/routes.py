"""The HTTP operations app.py routes to: authenticate, validate the body into its command model, call one
operation, shape the reply. Each is registered (`registry.operation`) with its body and query models, from
which `openapi.build_document` generates the OpenAPI document.
"""

from __future__ import annotations

from typing import Any

from chalice import Response
from chalice.app import Request

from chalicelib import commands, tasks
from chalicelib.api.http import ok, ok_page, parse_multipart, public_base_url, query, raw_body
from chalicelib.api.registry import (
    caller_tenant,
    offered_models_only,
    operation,
    present_request,
    validated_body,
)
from chalicelib.commands import validate
from chalicelib.domain.api_keys import Scope
from chalicelib.domain.errors import BadRequest
from chalicelib.faq.failed_rows import present_task
from chalicelib.operations import (
    chunk_preview,
    chunks,
    cost,
    create,
    enrichment_outputs,
    file_links,
    kb_reports,
    knowledge,
    knowledge_bases,
    knowledge_changes,
    listing,
    move_and_clone,
    search,
    shares,
    stats,
    tags,
    tenants,
)
from chalicelib.ports import Dependencies
from chalicelib.services import offered
from chalicelib.tasks import reparse

# ---------------------------------------------------------------- service


@operation("The parser engines and whether each is available here", "service")
def parser_engines(deps: Dependencies, request: Request | None) -> Response:
    caller_tenant(deps, request)
    return ok(deps.parser_engines())


@operation("The models this deployment offers, by kind: pick one by name", "service")
def list_models(deps: Dependencies, request: Request | None) -> Response:
    caller_tenant(deps, request)
    return ok(offered.offered_models(deps.settings))


# ---------------------------------------------------------------- knowledge bases


@operation("Create a knowledge base", "knowledge-bases", body=commands.CreateKnowledgeBase, status=201)
def create_knowledge_base(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    kb = knowledge_bases.create_kb(
        deps, tenant.id, validated_body(deps, request, commands.CreateKnowledgeBase)
    )
    return ok(kb.to_dict(), 201)


@operation(
    "The tenant's knowledge bases by name, then those shared with it: a page; `next_cursor` beside it goes on",
    "knowledge-bases",
    query=knowledge_bases.ListKnowledgeBasesQuery,
)
def list_knowledge_bases(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(knowledge_bases.ListKnowledgeBasesQuery, query(present_request(request)))
    found, next_cursor = knowledge_bases.list_kbs(deps, tenant.id, params)
    return ok_page([knowledge_bases.kb_view(kb, tenant.id) for kb in found], next_cursor)


@operation("One knowledge base", "knowledge-bases")
def get_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(knowledge_bases.kb_view(knowledge_bases.get_kb(deps, tenant.id, kb_id), tenant.id))


@operation(
    "Change a knowledge base's settings: for new documents only, or `apply_to: reparse` (202, a task); a new "
    "embedding model or engine needs `reembed: true` (202, a task that builds the new index, then switches)",
    "knowledge-bases",
    body=commands.UpdateKnowledgeBase,
)
def update_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.UpdateKnowledgeBase)
    kb, task = knowledge_bases.update_kb(deps, tenant.id, kb_id, body)
    if task is None:
        return ok(kb.to_dict())
    return ok({**kb.to_dict(), "task_id": task.id}, 202, message=f"{task.kind.value} task submitted")


@operation("Hybrid (BM25 + vector) search", "knowledge-bases", body=commands.SearchRequest, scope=Scope.READ)
def hybrid_search(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(
        search.hybrid_search(deps, tenant.id, kb_id, validated_body(deps, request, commands.SearchRequest))
    )


# ---------------------------------------------------------------- creating knowledge


@operation(
    "Upload a file (multipart: `file` and the form fields; over ~4.5 MB use upload-url)",
    "knowledge",
    body=commands.FileUploadForm,
    multipart=True,
)
def upload_file(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    http = present_request(request)
    body = raw_body(http, deps.settings.api_max_body)
    headers: Any = http.headers or {}
    form = parse_multipart(str(headers.get("content-type", "")), body)
    if "file" not in form.files:
        raise BadRequest("the form has no `file` part", code="missing_file")
    file_name, data = form.files["file"]
    fields = offered_models_only(
        deps, validate(commands.FileUploadForm, {k: v for k, v in form.fields.items() if v != ""})
    )
    upload = create.FileUpload(
        data=data,
        file_name=fields.file_name or file_name,
        metadata=fields.metadata,
        tag_ids=fields.tag_ids,
        overrides=(fields.process_config or commands.ProcessConfig()).overrides(fields.enable_multimodel),
        channel=fields.channel,
    )
    return ok(create.create_from_file(deps, tenant.id, kb_id, upload).to_dict())


@operation("A presigned S3 PUT for a large file", "knowledge", body=commands.UploadUrlRequest, status=201)
def presigned_upload(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.UploadUrlRequest)
    return ok(create.create_upload_url(deps, tenant.id, kb_id, body), 201)


@operation(
    "Import a URL (a file link or a web page)", "knowledge", body=commands.UrlImportRequest, status=201
)
def import_url(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.UrlImportRequest)
    return ok(create.create_from_url(deps, tenant.id, kb_id, body).to_dict(), 201)


@operation("Hand-written Markdown (draft or publish)", "knowledge", body=commands.ManualRequest)
def create_manual(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.ManualRequest)
    return ok(create.create_manual(deps, tenant.id, kb_id, body).to_dict())


# ---------------------------------------------------------------- reading and operating


@operation(
    "A knowledge base's knowledge, newest first: filters by tag, status, file type, source, keyword and "
    "time; paged by `next_cursor`",
    "knowledge",
    query=commands.ListKnowledgeQuery,
)
def list_knowledge(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(commands.ListKnowledgeQuery, query(present_request(request)))
    return ok(listing.list_knowledge(deps, tenant.id, kb_id, params))


@operation("One knowledge row", "knowledge")
def get_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(knowledge.get_knowledge(deps, tenant.id, knowledge_id).to_dict())


@operation("The stage tree of an attempt (alias /stages)", "knowledge", query=commands.SpansQuery)
def knowledge_spans(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(commands.SpansQuery, query(present_request(request)))
    return ok(knowledge.spans(deps, tenant.id, knowledge_id, params.attempt))


@operation("Parse again as a new attempt", "knowledge", body=commands.ReparseRequest)
def reparse_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.ReparseRequest)
    return ok(reparse.reparse(deps, tenant.id, knowledge_id, body).to_dict())


@operation(
    "Chunks of a text or a parsed knowledge, with tier diagnostics",
    "knowledge",
    body=commands.ChunkPreviewRequest,
    scope=Scope.READ,
)
def chunker_preview(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.ChunkPreviewRequest)
    return ok(chunk_preview.preview_chunks(deps, tenant.id, body))


@operation(
    "A document's chunks in order (current attempt), paged by `next_cursor`",
    "knowledge",
    query=commands.ChunkListQuery,
)
def list_chunks(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(commands.ChunkListQuery, query(present_request(request)))
    return ok(chunks.list_chunks(deps, tenant.id, knowledge_id, params))


@operation("One chunk", "knowledge")
def get_chunk(deps: Dependencies, request: Request | None, knowledge_id: str, chunk_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(chunks.get_chunk(deps, tenant.id, knowledge_id, chunk_id))


@operation(
    "Edit a chunk's text (re-embedded and re-indexed; the summary is made again) or switch it on or off",
    "knowledge",
    body=commands.EditChunkRequest,
)
def edit_chunk(deps: Dependencies, request: Request | None, knowledge_id: str, chunk_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.EditChunkRequest)
    return ok(chunks.edit_chunk(deps, tenant.id, knowledge_id, chunk_id, body))


@operation(
    "A short-lived download link (`/r/{token}`) to the stored original file or the parsed Markdown",
    "knowledge",
    query=commands.FileUrlQuery,
    response=commands.DownloadGrant,
)
def knowledge_file_url(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    http = present_request(request)
    params = validate(commands.FileUrlQuery, query(http))
    base = public_base_url(deps.settings.public_base_url, http)
    return ok(file_links.file_url(deps, tenant.id, knowledge_id, params, base))


# ---------------------------------------------------------------- lifecycle


@operation("Delete a knowledge (durable: answers a task id)", "lifecycle", status=202)
def delete_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    task = knowledge_changes.delete_knowledge(deps, tenant.id, knowledge_id)
    return ok({"task_id": task.id}, 202, message="Delete task submitted")


@operation(
    "Delete up to 200 knowledge of one knowledge base",
    "lifecycle",
    body=commands.BatchDeleteRequest,
    status=202,
)
def batch_delete_knowledge(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    task = knowledge_changes.batch_delete(
        deps, tenant.id, validated_body(deps, request, commands.BatchDeleteRequest)
    )
    return ok({"task_id": task.id}, 202, message="Delete task submitted")


@operation("Delete a knowledge base: its knowledge, index, files, then itself", "lifecycle", status=202)
def delete_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    task = knowledge_changes.delete_kb(deps, tenant.id, kb_id)
    return ok({"task_id": task.id}, 202, message="Delete task submitted")


@operation(
    "Stop a knowledge on its way (pending, processing or finalizing); what was written stays", "lifecycle"
)
def cancel_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(knowledge_changes.cancel(deps, tenant.id, knowledge_id).to_dict())


@operation(
    "Edit title, description, metadata, tags, enable_status (and a manual knowledge's text)",
    "lifecycle",
    body=commands.EditKnowledgeRequest,
)
def edit_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.EditKnowledgeRequest)
    return ok(knowledge_changes.edit(deps, tenant.id, knowledge_id, body).to_dict())


@operation("Publish a draft: it is ingested", "lifecycle")
def publish_knowledge(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(knowledge_changes.publish(deps, tenant.id, knowledge_id).to_dict())


@operation(
    "Reparse up to 200 knowledge of one knowledge base",
    "lifecycle",
    body=commands.BatchReparseRequest,
    status=202,
)
def batch_reparse_knowledge(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    task = knowledge_changes.batch_reparse(
        deps, tenant.id, validated_body(deps, request, commands.BatchReparseRequest)
    )
    return ok({"task_id": task.id}, 202, message="Reparse task submitted")


@operation("Reparse every failed knowledge of a knowledge base", "lifecycle", status=202)
def retry_failed_knowledge(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    task = knowledge_changes.retry_failed(deps, tenant.id, kb_id)
    return ok({"task_id": task.id}, 202, message="Retry task submitted")


@operation("Progress of a durable task", "lifecycle")
def get_task(deps: Dependencies, request: Request | None, task_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    base = public_base_url(deps.settings.public_base_url, present_request(request))  # links for the caller
    return ok(present_task(deps, tasks.get_task(deps, tenant.id, task_id), base))


@operation(
    "Move up to 200 completed knowledge into another knowledge base (same type and embedding model)",
    "lifecycle",
    body=commands.MoveKnowledgeRequest,
    status=202,
)
def move_knowledge(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    task = move_and_clone.move(deps, tenant.id, validated_body(deps, request, commands.MoveKnowledgeRequest))
    return ok({"task_id": task.id}, 202, message="Move task submitted")


@operation(
    "Clone a knowledge base into a new or an existing one (diff by file hash; vectors copied, not re-embedded)",
    "lifecycle",
    body=commands.CloneKnowledgeBaseRequest,
    status=202,
)
def clone_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.CloneKnowledgeBaseRequest)
    return ok(move_and_clone.clone_kb(deps, tenant.id, kb_id, body), 202, message="Clone task submitted")


# ---------------------------------------------------------------- enrichment


@operation("Summarise the knowledge again (outside its processing)", "enrichment", status=202)
def refresh_summary(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(enrichment_outputs.refresh_summary(deps, tenant.id, knowledge_id).to_dict(), 202)


@operation("An entity of the knowledge graph and its neighbourhood", "enrichment", query=commands.GraphQuery)
def knowledge_graph(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(commands.GraphQuery, query(present_request(request)))
    return ok(enrichment_outputs.graph(deps, tenant.id, kb_id, params))


@operation("The wiki: its index and pages, paged by `next_cursor`", "enrichment", query=commands.WikiQuery)
def knowledge_base_wiki(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(enrichment_outputs.wiki(deps, tenant.id, kb_id, query(present_request(request))))


# ---------------------------------------------------------------- tags


@operation(
    "Create a tag (names are unique per knowledge base)", "tags", body=commands.CreateTagRequest, status=201
)
def create_tag(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.CreateTagRequest)
    return ok(tags.create_tag(deps, tenant.id, kb_id, body).to_dict(), 201)


@operation("The knowledge base's tags, by name", "tags")
def list_tags(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok([t.to_dict() for t in tags.list_tags(deps, tenant.id, kb_id)])


@operation("One tag", "tags")
def get_tag(deps: Dependencies, request: Request | None, kb_id: str, tag_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(tags.get_tag(deps, tenant.id, kb_id, tag_id).to_dict())


@operation("Rename or recolour a tag", "tags", body=commands.UpdateTagRequest)
def update_tag(deps: Dependencies, request: Request | None, kb_id: str, tag_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.UpdateTagRequest)
    return ok(tags.update_tag(deps, tenant.id, kb_id, tag_id, body).to_dict())


@operation("Delete a tag (durable: takes it off its knowledge, answers a task id)", "tags", status=202)
def delete_tag(deps: Dependencies, request: Request | None, kb_id: str, tag_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    task = tags.delete_tag(deps, tenant.id, kb_id, tag_id)
    return ok({"task_id": task.id}, 202, message="Delete task submitted")


# ---------------------------------------------------------------- shares


@operation(
    "Share the knowledge base, read-only, with another tenant (its keys may read and search it)",
    "knowledge-bases",
    body=commands.ShareRequest,
    status=201,
    scope=Scope.ADMIN,
)
def share_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.ShareRequest)
    return ok(shares.share(deps, tenant.id, kb_id, body), 201)


@operation("The tenants the knowledge base is shared with", "knowledge-bases", scope=Scope.ADMIN)
def list_knowledge_base_shares(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(shares.list_shares(deps, tenant.id, kb_id))


@operation("Stop sharing the knowledge base with a tenant", "knowledge-bases", scope=Scope.ADMIN)
def unshare_knowledge_base(
    deps: Dependencies, request: Request | None, kb_id: str, tenant_id: str
) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(shares.unshare(deps, tenant.id, kb_id, tenant_id))


@operation("Decline a knowledge base shared with the tenant", "knowledge-bases", scope=Scope.ADMIN)
def decline_shared_knowledge_base(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(shares.decline(deps, tenant.id, kb_id))


# ---------------------------------------------------------------- tenant


@operation("The tenant's settings", "tenant")
def get_tenant_settings(deps: Dependencies, request: Request | None) -> Response:
    return ok(tenants.settings_of(caller_tenant(deps, request)))


@operation("Replace the tenant's settings", "tenant", body=commands.TenantSettingsRequest, scope=Scope.ADMIN)
def put_tenant_settings(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, commands.TenantSettingsRequest)
    return ok(tenants.put_settings(deps, tenant, body))


# ---------------------------------------------------------------- cost


@operation("What a knowledge cost: metered usage priced with the dated price table", "cost")
def knowledge_cost(deps: Dependencies, request: Request | None, knowledge_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(cost.knowledge_cost(deps, tenant.id, knowledge_id))


#: what a big knowledge base's report answers (operations/kb_reports.py)
_BIG_KB_REPORT = (
    "; `as_of` and `fresh`: a knowledge base too big to read in one request answers the report its last "
    "refresh stored (`fresh: false`, `as_of`, `refreshing` with its `task_id`), or, before the first one, "
    "202 with `code: report_pending` and the refresh's `task_id` (poll this URL: a reader of a shared "
    "knowledge base polls it too, the task being the owner's; repeated GETs start no second refresh); "
    "a refresh that ended without a report answers 503 `report_unavailable` saying why until the next may start"
)


@operation("What a knowledge base's documents cost (deleted ones included)" + _BIG_KB_REPORT, "cost")
def kb_cost(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    report = cost.kb_cost(deps, tenant.id, kb_id)
    return ok(report, kb_reports.status_of(report))


@operation(
    "A knowledge base at a glance: documents by parse, enable and summary status, chunks, bytes, cost, and "
    "the document waiting longest for a queue" + _BIG_KB_REPORT,
    "knowledge-bases",
)
def kb_stats(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    report = stats.kb_stats(deps, tenant.id, kb_id)
    return ok(report, kb_reports.status_of(report))
