"""Which CLI command calls each API route (by the route's view name in app.py). A test checks this against
the app's route table: a new route without a command fails it."""

from __future__ import annotations

ROUTE_COMMANDS: dict[str, str] = {
    "health": "health",
    "openapi_document": "openapi",
    "api_docs": "docs",
    "api_docs_asset": "docs",  # the page's own files
    "parser_engines": "engines",
    "list_models": "models",
    "create_knowledge_base": "kb create",
    "list_knowledge_bases": "kb list",
    "get_knowledge_base": "kb show",
    "update_knowledge_base": "kb update",
    "hybrid_search": "search",
    "upload_file": "ingest",
    "presigned_upload": "ingest",  # files over DIRECT_UPLOAD_MAX_BYTES
    "import_url": "add-url",  # and `ingest` with http(s) arguments
    "create_manual": "add-text",
    "list_knowledge": "ls",
    "get_knowledge": "show",
    "knowledge_spans": "status",
    "reparse_knowledge": "reparse",
    "list_chunks": "chunks list",
    "get_chunk": "chunks show",
    "edit_chunk": "chunks edit",
    "knowledge_file_url": "download",
    "chunker_preview": "preview",
    "delete_knowledge": "rm",
    "batch_delete_knowledge": "rm",  # several ids
    "delete_knowledge_base": "kb delete",
    "cancel_knowledge": "cancel",
    "edit_knowledge": "edit",
    "publish_knowledge": "publish",
    "batch_reparse_knowledge": "reparse",  # several ids
    "retry_failed_knowledge": "retry-failed",
    "get_task": "task",
    "move_knowledge": "move",
    "clone_knowledge_base": "kb clone",
    "refresh_summary": "summary",
    "knowledge_graph": "kb graph",
    "knowledge_base_wiki": "kb wiki",
    "create_tag": "tags create",
    "list_tags": "tags list",
    "get_tag": "tags show",
    "update_tag": "tags update",
    "delete_tag": "tags delete",
    "create_faq_entry": "faq add",
    "list_faq_entries": "faq list",
    "get_faq_entry": "faq show",
    "update_faq_entry": "faq update",
    "delete_faq_entry": "faq rm",
    "list_faq_tags": "faq tags",
    "import_faq": "faq import",
    "faq_import_upload_url": "faq import",  # files too big to send inline
    "faq_last_import": "faq failed",
    "share_knowledge_base": "share add",
    "list_knowledge_base_shares": "share list",
    "unshare_knowledge_base": "share remove",
    "get_tenant_settings": "settings show",
    "put_tenant_settings": "settings set",
    "knowledge_cost": "cost",
    "kb_cost": "cost",  # --kb
    "kb_stats": "kb stats",  # and `watch`
    "admin_list_tenants": "tenant list",
    "admin_create_tenant": "tenant create",
    "admin_list_keys": "key list",
    "admin_issue_key": "key issue",
    "admin_set_quotas": "tenant quotas",
    "admin_revoke_key": "key revoke",
    "admin_list_dead_letters": "dlq list",
    "admin_redrive_dead_letters": "dlq redrive",
}
