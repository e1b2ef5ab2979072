"""weknora-ingest: the HTTP routes and event handlers. Each handler is one line into chalicelib."""

from __future__ import annotations

from typing import Any

from chalice import Chalice, Rate, Response

from chalicelib import stages
from chalicelib.api import (
    admin_routes,
    console_routes,
    download_routes,
    faq_routes,
    http,
    routes,
    service_routes,
    share_routes,
    webhook_routes,
)
from chalicelib.bootstrap import get_deps
from chalicelib.observability import traced
from chalicelib.settings import get_settings

app = Chalice(app_name="weknora-ingest")
app.api.binary_types.append("multipart/form-data")


@app.middleware("http")
def one_envelope(event: Any, get_response: Any) -> Response:
    return http.envelope_middleware(event, get_response, get_deps().settings.cors_origins)


settings = get_settings()
V1 = "/api/v1"


# ---------------------------------------------------------------- service


@app.route(f"{V1}/health", methods=["GET"])
def health() -> Response:
    return service_routes.health(get_deps(), app.current_request)


@app.route(f"{V1}/openapi.json", methods=["GET"])
def openapi_document() -> Response:
    return service_routes.openapi_document(app)


@app.route(f"{V1}/docs", methods=["GET"])
def api_docs() -> Response:
    return service_routes.api_docs(app.current_request)


@app.route(f"{V1}/docs/{{asset}}", methods=["GET"])
def api_docs_asset(asset: str) -> Response:
    return service_routes.api_docs_asset(app.current_request, asset)


@app.route(f"{V1}/parser-engines", methods=["GET"])
def parser_engines() -> Response:
    return routes.parser_engines(get_deps(), app.current_request)


@app.route(f"{V1}/models", methods=["GET"])
def list_models() -> Response:
    return routes.list_models(get_deps(), app.current_request)


# ---------------------------------------------------------------- the console (static files, no key)


@app.route("/console", methods=["GET"])
def console_page() -> Response:
    return console_routes.console_page(get_settings(), app.current_request)


@app.route("/console/{asset}", methods=["GET"])
def console_asset(asset: str) -> Response:
    return console_routes.console_asset(get_settings(), app.current_request, asset)


# ---------------------------------------------------------------- knowledge bases


@app.route(f"{V1}/knowledge-bases", methods=["POST"])
def create_knowledge_base() -> Response:
    return routes.create_knowledge_base(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge-bases", methods=["GET"])
def list_knowledge_bases() -> Response:
    return routes.list_knowledge_bases(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}", methods=["GET"])
def get_knowledge_base(kb_id: str) -> Response:
    return routes.get_knowledge_base(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}", methods=["PUT"])
def update_knowledge_base(kb_id: str) -> Response:
    return routes.update_knowledge_base(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/hybrid-search", methods=["POST"])
def hybrid_search(kb_id: str) -> Response:
    return routes.hybrid_search(get_deps(), app.current_request, kb_id)


# ---------------------------------------------------------------- creating knowledge


@app.route(
    f"{V1}/knowledge-bases/{{kb_id}}/knowledge/file", methods=["POST"], content_types=["multipart/form-data"]
)
def upload_file(kb_id: str) -> Response:
    return routes.upload_file(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/upload-url", methods=["POST"])
def presigned_upload(kb_id: str) -> Response:
    return routes.presigned_upload(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/url", methods=["POST"])
def import_url(kb_id: str) -> Response:
    return routes.import_url(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/manual", methods=["POST"])
def create_manual(kb_id: str) -> Response:
    return routes.create_manual(get_deps(), app.current_request, kb_id)


# ---------------------------------------------------------------- reading and operating


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge", methods=["GET"])
def list_knowledge(kb_id: str) -> Response:
    return routes.list_knowledge(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}", methods=["GET"])
def get_knowledge(knowledge_id: str) -> Response:
    return routes.get_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/spans", methods=["GET"])
@app.route(f"{V1}/knowledge/{{knowledge_id}}/stages", methods=["GET"])
def knowledge_spans(knowledge_id: str) -> Response:
    return routes.knowledge_spans(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/reparse", methods=["POST"])
def reparse_knowledge(knowledge_id: str) -> Response:
    return routes.reparse_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/chunks", methods=["GET"])
def list_chunks(knowledge_id: str) -> Response:
    return routes.list_chunks(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/chunks/{{chunk_id}}", methods=["GET"])
def get_chunk(knowledge_id: str, chunk_id: str) -> Response:
    return routes.get_chunk(get_deps(), app.current_request, knowledge_id, chunk_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/chunks/{{chunk_id}}", methods=["PUT"])
def edit_chunk(knowledge_id: str, chunk_id: str) -> Response:
    return routes.edit_chunk(get_deps(), app.current_request, knowledge_id, chunk_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/file-url", methods=["GET"])
def knowledge_file_url(knowledge_id: str) -> Response:
    return routes.knowledge_file_url(get_deps(), app.current_request, knowledge_id)


@app.route("/r/{token}", methods=["GET"])
def redeem_download(token: str) -> Response:
    return download_routes.redeem_download(get_deps(), app.current_request, token)


@app.route(f"{V1}/chunker/preview", methods=["POST"])
def chunker_preview() -> Response:
    return routes.chunker_preview(get_deps(), app.current_request)


# ---------------------------------------------------------------- lifecycle


@app.route(f"{V1}/knowledge/{{knowledge_id}}", methods=["DELETE"])
def delete_knowledge(knowledge_id: str) -> Response:
    return routes.delete_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/batch-delete", methods=["POST"])
def batch_delete_knowledge() -> Response:
    return routes.batch_delete_knowledge(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}", methods=["DELETE"])
def delete_knowledge_base(kb_id: str) -> Response:
    return routes.delete_knowledge_base(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/cancel", methods=["POST"])
def cancel_knowledge(knowledge_id: str) -> Response:
    return routes.cancel_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}", methods=["PUT"])
def edit_knowledge(knowledge_id: str) -> Response:
    return routes.edit_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/publish", methods=["POST"])
def publish_knowledge(knowledge_id: str) -> Response:
    return routes.publish_knowledge(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge/batch-reparse", methods=["POST"])
def batch_reparse_knowledge() -> Response:
    return routes.batch_reparse_knowledge(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/retry-failed", methods=["POST"])
def retry_failed_knowledge(kb_id: str) -> Response:
    return routes.retry_failed_knowledge(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/tasks/{{task_id}}", methods=["GET"])
def get_task(task_id: str) -> Response:
    return routes.get_task(get_deps(), app.current_request, task_id)


@app.route(f"{V1}/knowledge/move", methods=["POST"])
def move_knowledge() -> Response:
    return routes.move_knowledge(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/clone", methods=["POST"])
def clone_knowledge_base(kb_id: str) -> Response:
    return routes.clone_knowledge_base(get_deps(), app.current_request, kb_id)


# ---------------------------------------------------------------- enrichment


@app.route(f"{V1}/knowledge/{{knowledge_id}}/summary/refresh", methods=["POST"])
def refresh_summary(knowledge_id: str) -> Response:
    return routes.refresh_summary(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/graph", methods=["GET"])
def knowledge_graph(kb_id: str) -> Response:
    return routes.knowledge_graph(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/wiki", methods=["GET"])
def knowledge_base_wiki(kb_id: str) -> Response:
    return routes.knowledge_base_wiki(get_deps(), app.current_request, kb_id)


# ---------------------------------------------------------------- webhooks


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks", methods=["POST"])
def create_webhook(kb_id: str) -> Response:
    return webhook_routes.create_webhook(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks", methods=["GET"])
def list_webhooks(kb_id: str) -> Response:
    return webhook_routes.list_webhooks(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks/{{webhook_id}}", methods=["GET"])
def get_webhook(kb_id: str, webhook_id: str) -> Response:
    return webhook_routes.get_webhook(get_deps(), app.current_request, kb_id, webhook_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks/{{webhook_id}}", methods=["PUT"])
def update_webhook(kb_id: str, webhook_id: str) -> Response:
    return webhook_routes.update_webhook(get_deps(), app.current_request, kb_id, webhook_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks/{{webhook_id}}/rotate-secret", methods=["POST"])
def rotate_webhook_secret(kb_id: str, webhook_id: str) -> Response:
    return webhook_routes.rotate_webhook_secret(get_deps(), app.current_request, kb_id, webhook_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks/{{webhook_id}}", methods=["DELETE"])
def delete_webhook(kb_id: str, webhook_id: str) -> Response:
    return webhook_routes.delete_webhook(get_deps(), app.current_request, kb_id, webhook_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/webhooks/{{webhook_id}}/deliveries", methods=["GET"])
def list_webhook_deliveries(kb_id: str, webhook_id: str) -> Response:
    return webhook_routes.list_webhook_deliveries(get_deps(), app.current_request, kb_id, webhook_id)


# ---------------------------------------------------------------- tags


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/tags", methods=["POST"])
def create_tag(kb_id: str) -> Response:
    return routes.create_tag(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/tags", methods=["GET"])
def list_tags(kb_id: str) -> Response:
    return routes.list_tags(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/tags/{{tag_id}}", methods=["GET"])
def get_tag(kb_id: str, tag_id: str) -> Response:
    return routes.get_tag(get_deps(), app.current_request, kb_id, tag_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/tags/{{tag_id}}", methods=["PUT"])
def update_tag(kb_id: str, tag_id: str) -> Response:
    return routes.update_tag(get_deps(), app.current_request, kb_id, tag_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/tags/{{tag_id}}", methods=["DELETE"])
def delete_tag(kb_id: str, tag_id: str) -> Response:
    return routes.delete_tag(get_deps(), app.current_request, kb_id, tag_id)


# ---------------------------------------------------------------- FAQ knowledge bases


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/entries", methods=["POST"])
def create_faq_entry(kb_id: str) -> Response:
    return faq_routes.create_faq_entry(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/entries", methods=["GET"])
def list_faq_entries(kb_id: str) -> Response:
    return faq_routes.list_faq_entries(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/entries/{{entry_id}}", methods=["GET"])
def get_faq_entry(kb_id: str, entry_id: str) -> Response:
    return faq_routes.get_faq_entry(get_deps(), app.current_request, kb_id, entry_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/entries/{{entry_id}}", methods=["PUT"])
def update_faq_entry(kb_id: str, entry_id: str) -> Response:
    return faq_routes.update_faq_entry(get_deps(), app.current_request, kb_id, entry_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/entries/{{entry_id}}", methods=["DELETE"])
def delete_faq_entry(kb_id: str, entry_id: str) -> Response:
    return faq_routes.delete_faq_entry(get_deps(), app.current_request, kb_id, entry_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/tags", methods=["GET"])
def list_faq_tags(kb_id: str) -> Response:
    return faq_routes.list_faq_tags(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/import", methods=["POST"])
def import_faq(kb_id: str) -> Response:
    return faq_routes.import_faq(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/import/upload-url", methods=["POST"])
def faq_import_upload_url(kb_id: str) -> Response:
    return faq_routes.faq_import_upload_url(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/faq/import/last-result", methods=["GET"])
def faq_last_import(kb_id: str) -> Response:
    return faq_routes.faq_last_import(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/shares", methods=["POST"])
def share_knowledge_base(kb_id: str) -> Response:
    return routes.share_knowledge_base(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/shares", methods=["GET"])
def list_knowledge_base_shares(kb_id: str) -> Response:
    return routes.list_knowledge_base_shares(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/shares/{{tenant_id}}", methods=["DELETE"])
def unshare_knowledge_base(kb_id: str, tenant_id: str) -> Response:
    return routes.unshare_knowledge_base(get_deps(), app.current_request, kb_id, tenant_id)


@app.route(f"{V1}/shared-knowledge-bases/{{kb_id}}", methods=["DELETE"])
def decline_shared_knowledge_base(kb_id: str) -> Response:
    return routes.decline_shared_knowledge_base(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/shared-knowledge-bases/blocked-tenants", methods=["POST"])
def block_tenant() -> Response:
    return share_routes.block_tenant(get_deps(), app.current_request)


@app.route(f"{V1}/shared-knowledge-bases/blocked-tenants", methods=["GET"])
def list_blocked_tenants() -> Response:
    return share_routes.list_blocked_tenants(get_deps(), app.current_request)


@app.route(f"{V1}/shared-knowledge-bases/blocked-tenants/{{tenant_id}}", methods=["DELETE"])
def unblock_tenant(tenant_id: str) -> Response:
    return share_routes.unblock_tenant(get_deps(), app.current_request, tenant_id)


# ---------------------------------------------------------------- tenant


@app.route(f"{V1}/tenant/settings", methods=["GET"])
def get_tenant_settings() -> Response:
    return routes.get_tenant_settings(get_deps(), app.current_request)


@app.route(f"{V1}/tenant/settings", methods=["PUT"])
def put_tenant_settings() -> Response:
    return routes.put_tenant_settings(get_deps(), app.current_request)


@app.route(f"{V1}/knowledge/{{knowledge_id}}/cost", methods=["GET"])
def knowledge_cost(knowledge_id: str) -> Response:
    return routes.knowledge_cost(get_deps(), app.current_request, knowledge_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/cost", methods=["GET"])
def kb_cost(kb_id: str) -> Response:
    return routes.kb_cost(get_deps(), app.current_request, kb_id)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/stats", methods=["GET"])
def kb_stats(kb_id: str) -> Response:
    return routes.kb_stats(get_deps(), app.current_request, kb_id)


# ---------------------------------------------------------------- operators (X-Operator-Key)


@app.route(f"{V1}/admin/tenants", methods=["GET"])
def admin_list_tenants() -> Response:
    return admin_routes.admin_list_tenants(get_deps(), app.current_request)


@app.route(f"{V1}/admin/tenants", methods=["POST"])
def admin_create_tenant() -> Response:
    return admin_routes.admin_create_tenant(get_deps(), app.current_request)


@app.route(f"{V1}/admin/tenants/{{tenant_id}}/api-keys", methods=["GET"])
def admin_list_keys(tenant_id: str) -> Response:
    return admin_routes.admin_list_keys(get_deps(), app.current_request, tenant_id)


@app.route(f"{V1}/admin/tenants/{{tenant_id}}/api-keys", methods=["POST"])
def admin_issue_key(tenant_id: str) -> Response:
    return admin_routes.admin_issue_key(get_deps(), app.current_request, tenant_id)


@app.route(f"{V1}/admin/tenants/{{tenant_id}}/quotas", methods=["PUT"])
def admin_set_quotas(tenant_id: str) -> Response:
    return admin_routes.admin_set_quotas(get_deps(), app.current_request, tenant_id)


@app.route(f"{V1}/admin/tenants/{{tenant_id}}/storage-recount", methods=["POST"])
def admin_storage_recount(tenant_id: str) -> Response:
    return admin_routes.admin_storage_recount(get_deps(), app.current_request, tenant_id)


@app.route(f"{V1}/admin/tenants/{{tenant_id}}/api-keys/{{key_id}}", methods=["DELETE"])
def admin_revoke_key(tenant_id: str, key_id: str) -> Response:
    return admin_routes.admin_revoke_key(get_deps(), app.current_request, tenant_id, key_id)


@app.route(f"{V1}/admin/dlq", methods=["GET"])
def admin_list_dead_letters() -> Response:
    return admin_routes.admin_list_dead_letters(get_deps(), app.current_request)


@app.route(f"{V1}/admin/dlq/redrive", methods=["POST"])
def admin_redrive_dead_letters() -> Response:
    return admin_routes.admin_redrive_dead_letters(get_deps(), app.current_request)


# ---------------------------------------------------------------- queues, workflow tasks, schedule
# (The docreader queue is served by the container-image function in functions/docreader/.)


@app.on_sqs_message(queue=settings.queue("uploads"), batch_size=10)
@traced
def on_upload_event(event: Any) -> dict[str, Any]:
    return stages.uploads.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("chunking"), batch_size=5)
@traced
def chunking_stage(event: Any) -> dict[str, Any]:
    return stages.chunking.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("embedding"), batch_size=1)
@traced
def embedding_stage(event: Any) -> dict[str, Any]:
    return stages.embedding.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("multimodal"), batch_size=5)
@traced
def multimodal_task(event: Any) -> dict[str, Any]:
    return stages.multimodal.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("postprocess"), batch_size=5)
@traced
def postprocess_task(event: Any) -> dict[str, Any]:
    return stages.postprocess.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("enrichment"), batch_size=5)
@traced
def enrichment_task(event: Any) -> dict[str, Any]:
    return stages.enrichment.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("lifecycle"), batch_size=1)
@traced
def lifecycle_task(event: Any) -> dict[str, Any]:
    return stages.lifecycle.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("wiki"), batch_size=1)
@traced
def wiki_task(event: Any) -> dict[str, Any]:
    return stages.wiki.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("faq-import"), batch_size=1)
@traced
def faq_import_task(event: Any) -> dict[str, Any]:
    return stages.faq_import.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("webhooks"), batch_size=5)
@traced
def webhook_delivery(event: Any) -> dict[str, Any]:
    return stages.webhooks.handle(get_deps(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("webhooks-slow"), batch_size=5)
@traced
def webhook_slow_delivery(event: Any) -> dict[str, Any]:
    return stages.webhooks.handle_slow(get_deps(), event.to_dict(), event.context)


@app.schedule(Rate(5, unit=Rate.MINUTES))
@traced
def housekeeping(event: Any) -> dict[str, Any]:
    return stages.housekeeping.handle(get_deps(), event, event.context)


def cors_preflight(**path_params: str) -> Response:
    return service_routes.cors_preflight(get_deps(), app)


# Every path answers a browser's CORS preflight, from the settings at run time (off unless configured).
for _path in list(app.routes):
    app.route(_path, methods=["OPTIONS"], name="cors_preflight")(cors_preflight)
