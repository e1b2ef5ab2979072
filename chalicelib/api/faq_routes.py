"""The FAQ HTTP operations (app.py routes to these; registered in the OpenAPI document like the others)."""

from __future__ import annotations

from chalice import Response
from chalice.app import Request

from chalicelib.api.http import ok, ok_page, public_base_url, query
from chalicelib.api.registry import caller_tenant, operation, present_request, validated_body
from chalicelib.commands import validate
from chalicelib.faq import entries, importing, uploads
from chalicelib.faq.commands import (
    FaqEntryRequest,
    FaqEntryUpdate,
    FaqImportRequest,
    FaqListQuery,
    FaqTagsQuery,
    FaqUploadGrant,
    FaqUploadUrlRequest,
)
from chalicelib.ports import Dependencies


@operation("Create an FAQ entry (FAQ knowledge bases only)", "faq", body=FaqEntryRequest, status=201)
def create_faq_entry(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, FaqEntryRequest)
    return ok(entries.create_entry(deps, tenant.id, kb_id, body).to_dict(), 201)


@operation("FAQ entries, filtered by tag, keyword and enabled, cursor-paged", "faq", query=FaqListQuery)
def list_faq_entries(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(FaqListQuery, query(present_request(request)))
    return ok(entries.list_entries(deps, tenant.id, kb_id, params))


@operation("One FAQ entry", "faq")
def get_faq_entry(deps: Dependencies, request: Request | None, kb_id: str, entry_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(entries.get_entry(deps, tenant.id, kb_id, entry_id).to_dict())


@operation("Change an FAQ entry (only the questions it adds are embedded)", "faq", body=FaqEntryUpdate)
def update_faq_entry(deps: Dependencies, request: Request | None, kb_id: str, entry_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, FaqEntryUpdate)
    return ok(entries.update_entry(deps, tenant.id, kb_id, entry_id, body).to_dict())


@operation("Delete an FAQ entry and its index entries", "faq")
def delete_faq_entry(deps: Dependencies, request: Request | None, kb_id: str, entry_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    entries.delete_entry(deps, tenant.id, kb_id, entry_id)
    return ok({"id": entry_id})


@operation(
    "The FAQ knowledge base's tag names, by name: a page; `next_cursor` beside it goes on",
    "faq",
    query=FaqTagsQuery,
)
def list_faq_tags(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    params = validate(FaqTagsQuery, query(present_request(request)))
    return ok_page(*entries.tags_page(deps, tenant.id, kb_id, params.cursor))


@operation(
    "Import FAQ entries (append or replace, dry_run): inline or an uploaded object; answers a task id",
    "faq",
    body=FaqImportRequest,
    status=202,
)
def import_faq(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, FaqImportRequest)
    task = importing.start_import(deps, tenant.id, kb_id, body)
    return ok({"task_id": task.id}, 202, message="FAQ import task submitted")


@operation(
    "A presigned form (POST, size-bound) for an FAQ import file (json, csv, xlsx)",
    "faq",
    body=FaqUploadUrlRequest,
    status=201,
    response=FaqUploadGrant,
    errors=((429, "the tenant holds 20 pending FAQ import uploads already (too_many_pending_uploads)"),),
)
def faq_import_upload_url(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, FaqUploadUrlRequest)
    return ok(uploads.upload_url(deps, tenant.id, kb_id, body), 201)


@operation("The knowledge base's last FAQ import result", "faq")
def faq_last_import(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    base_url = public_base_url(deps.settings.public_base_url, present_request(request))
    return ok(importing.last_result(deps, tenant.id, kb_id, base_url))
