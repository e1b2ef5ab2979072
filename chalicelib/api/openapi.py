"""The OpenAPI 3.1 document, generated from the Chalice app's routes and the same pydantic models that
validate the request bodies (`chalicelib.commands`), so a client generator or a fuzzer sees exactly what
the API accepts."""

from __future__ import annotations

import functools
import re
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from chalicelib.api.registry import OPERATIONS, Operation
from chalicelib.domain.events import EVENT_DETAIL_SCHEMA, EVENT_SOURCE
from chalicelib.settings import app_version

REF_TEMPLATE = "#/components/schemas/{model}"
#: what a webhook receives: the event's detail as the JSON body, signed (README, "Events and webhooks")
WEBHOOK_DELIVERY_SCHEMA: dict[str, Any] = {
    "description": f"A webhook delivery: POST of an EventDetail (the detail of the `{EVENT_SOURCE}` event "
    "on the bus) with the headers X-Weknora-Signature (`t=<unix seconds>,v1=<hex HMAC-SHA256 of "
    "'<t>.<body>' with the webhook's secret>`; after a rotation one more `,v1=…` per previous secret "
    "until its expiry: accept any that matches), X-Weknora-Event (the detail-type) and "
    "X-Weknora-Delivery (the same on every retry of one delivery). Answer 2xx; anything else is retried "
    "with backoff.",
    "$ref": "#/components/schemas/EventDetail",
}
_PARAM = re.compile(r"{([^}]+)}")


def _envelope(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _common_schemas() -> dict[str, Any]:
    return {
        "Success": {
            "type": "object",
            "required": ["success", "data"],
            "properties": {
                "success": {"const": True},
                "data": {},
                "message": {"type": "string"},
                # a listing whose `data` is a list (GET /knowledge-bases) says beside it how to go on
                "next_cursor": {
                    "type": ["string", "null"],
                    "description": "a paged list in `data`: the `cursor` of the next page, null on the last",
                },
                "has_more": {"type": "boolean", "description": "a paged list in `data`: a next page exists"},
            },
        },
        "Error": {
            "type": "object",
            "required": ["success", "error"],
            "properties": {
                "success": {"const": False},
                "error": {
                    "type": "object",
                    "required": ["code", "message"],
                    "properties": {
                        "code": {"type": "string", "description": "a stable, machine-readable code"},
                        "message": {"type": "string"},
                        "details": {"type": "array", "items": {"type": "object"}},
                    },
                },
                "data": {"description": "409 duplicates carry the existing row"},
            },
        },
    }


def _query_parameters(model: type[BaseModel]) -> list[dict[str, Any]]:
    schema = model.model_json_schema()
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]


def _request_body(op: Operation) -> dict[str, Any] | None:
    if op.body is None:
        return None
    ref = {"$ref": REF_TEMPLATE.format(model=op.body.__name__)}
    if op.multipart:
        return {"required": True, "content": {"multipart/form-data": {"schema": _form_schema(op.body)}}}
    # a body is required when its model has a required field (no body reads as {}, which lacks it)
    required = bool(op.body.model_json_schema().get("required"))
    return {"required": required, "content": {"application/json": {"schema": ref}}}


def _form_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The form's fields (the model, which forbids other fields) plus the `file` part, as one object: an
    `allOf` of the model and `{file}` could never be satisfied, since each half forbids the other's fields."""
    schema = model.model_json_schema(ref_template=REF_TEMPLATE, by_alias=True)
    schema.pop("$defs", None)  # the referenced models are in components/schemas
    schema["properties"] = {
        **schema.get("properties", {}),
        "file": {"type": "string", "format": "binary", "description": "the document"},
    }
    schema["required"] = [*schema.get("required", []), "file"]
    return schema


#: the common 403 of a route that takes an API key (a route's own 403 replaces it, so it repeats it)
KEY_FORBIDDEN = (
    "the API key's scope is below the route's (insufficient_scope), or a key limited to some knowledge bases "
    "acts on the whole tenant (kb_limited_key)"
)
#: the operator's per-tenant quotas (services/quotas.py), refused when the request is made
OVER_STORAGE = "what it stores does not fit in the tenant's storage quota (storage_quota_exceeded)"
OVER_DOCUMENTS = "the tenant holds its quota of documents (document_quota_exceeded)"


def _forbidden(*reasons: str) -> tuple[int, str]:
    return 403, f"{'; '.join(reasons)}; or {KEY_FORBIDDEN}"


#: the services the operator runs, failing in a way that is not the caller's to fix (registry.py answers the
#: index port's errors the same for every route; services/indexing.embed_for_api the model's)
INDEX_DOWN = "the search index is not answering (index_unavailable) or refused the call (index_refused)"
MODEL_DOWN = (
    "the embedding model is not answering (embedding_unavailable; `details.retry_after`: the wait the "
    "provider named, if it did) or refused the text (embedding_refused)"
)
#: a route that embeds and queries the index (a search, a chunk's edit)
INDEX_AND_MODEL_DOWN = (503, f"{INDEX_DOWN}; or {MODEL_DOWN}")
FAQ_WRITE_DOWN = (503, f"{INDEX_DOWN}; or the entry could not be saved now (faq_store_unavailable)")
#: a route on a knowledge base being deleted or that cannot be served any more (services/usable.py)
KB_CONFLICT = (
    409,
    "the knowledge base is being deleted (kb_deleting), or its embedding model or retrieval engine is no "
    "longer offered here (knowledge_base_unusable)",
)


#: answers beyond the common ones, by view (status -> description; a 403 replaces the common 403's text)
ROUTE_ERRORS: dict[str, tuple[tuple[int, str], ...]] = {
    "upload_file": (_forbidden(OVER_STORAGE, OVER_DOCUMENTS),),
    "presigned_upload": (_forbidden(OVER_STORAGE),),  # the document is counted when the file arrives
    "import_url": (_forbidden(OVER_DOCUMENTS),),  # its size is known only once the worker fetches it
    "create_manual": (_forbidden(OVER_STORAGE, OVER_DOCUMENTS),),
    "create_faq_entry": (_forbidden(OVER_STORAGE), FAQ_WRITE_DOWN),
    "update_faq_entry": (_forbidden(OVER_STORAGE), FAQ_WRITE_DOWN),
    "hybrid_search": (KB_CONFLICT, INDEX_AND_MODEL_DOWN),
    "edit_chunk": (INDEX_AND_MODEL_DOWN,),
    "create_knowledge_base": (
        (
            403,
            "the tenant owns its limit of knowledge bases (kb_limit_reached, WEKNORA_MAX_KBS_PER_TENANT), the "
            "API key's scope is below the route's (insufficient_scope), or the key is limited to some "
            "knowledge bases (kb_limited_key)",
        ),
    ),
    "share_knowledge_base": (
        (
            409,
            "the tenant shared with has its limit of knowledge bases shared with it (share_limit_reached, "
            "WEKNORA_MAX_SHARES_PER_TENANT)",
        ),
    ),
    "list_knowledge_bases": ((400, "a `cursor` this listing did not give this tenant (invalid_cursor)"),),
    "admin_list_keys": ((400, "a `cursor` this listing did not give for this tenant (invalid_cursor)"),),
    "admin_storage_recount": (
        (400, "a `cursor` this recount did not give for this tenant (invalid_cursor)"),
    ),
    "decline_shared_knowledge_base": (
        (404, "the knowledge base is not shared with the tenant (share_not_found), or does not exist"),
    ),
    "rotate_webhook_secret": (
        (
            409,
            "another rotation of the webhook's secret came first (webhook_rotation_conflict), or other "
            "changes kept coming between this one's read and write (webhook_write_conflict)",
        ),
    ),
    "update_webhook": (
        (
            409,
            "rotations of the webhook's secret kept coming between this change's read and write "
            "(webhook_write_conflict)",
        ),
    ),
}


@functools.cache
def route_responses() -> dict[str, type[BaseModel]]:
    """The success answer's `data` of a route whose operation builds it as plain dicts (`Operation.response`
    names it for the others), by view; imported when the document is built, not on the API's cold start."""
    from chalicelib.api.answers import SearchHits

    return {"hybrid_search": SearchHits}


def _response_model(view_name: str) -> type[BaseModel] | None:
    return OPERATIONS[view_name].response or route_responses().get(view_name)


def _operation(view_name: str, path: str, method: str) -> dict[str, Any]:
    op = OPERATIONS[view_name]
    success: dict[str, Any] = _envelope("Success")
    response = _response_model(view_name)
    if response is not None:
        data = {"$ref": REF_TEMPLATE.format(model=response.__name__)}
        success = {"allOf": [success, {"type": "object", "properties": {"data": data}}]}
    responses: dict[str, Any] = {
        str(op.status): {
            "description": "success",
            "content": {"application/json": {"schema": success}},
        },
        "400": {
            "description": "invalid input",
            "content": {"application/json": {"schema": _envelope("Error")}},
        },
        "404": {"description": "not found", "content": {"application/json": {"schema": _envelope("Error")}}},
        "413": {
            "description": "body too large",
            "content": {"application/json": {"schema": _envelope("Error")}},
        },
    }
    if op.auth:
        responses["401"] = {
            "description": "missing or invalid API key",
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
        responses["403"] = {
            "description": KEY_FORBIDDEN,
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
        responses["429"] = {
            "description": "tenant_rate_limited: the tenant's keys made more requests than its rate allows in "
            "this 10 s window; send it again after Retry-After (seconds)",
            "headers": {"Retry-After": {"schema": {"type": "integer"}}},
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
    if op.operator:
        responses["401"] = {
            "description": "missing operator key",
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
        responses["403"] = {
            "description": "invalid operator key, or the admin API is disabled (no operator key configured)",
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
    if 300 <= op.status < 400:  # a redirect: no body, a Location
        responses[str(op.status)] = {
            "description": "a redirect",
            "headers": {"Location": {"schema": {"type": "string", "format": "uri"}}},
        }
    for status, description in (*op.errors, *ROUTE_ERRORS.get(view_name, ())):
        responses[str(status)] = {
            "description": description,
            "content": {"application/json": {"schema": _envelope("Error")}},
        }
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string", "maxLength": 200}}
        for name in _PARAM.findall(path)
    ]
    if op.query is not None:
        parameters += _query_parameters(op.query)
    document: dict[str, Any] = {
        "operationId": view_name,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": parameters,
        "responses": responses,
    }
    body = _request_body(op)
    if body is not None:
        document["requestBody"] = body
    document["security"] = [{"ApiKey": []}] if op.auth else [{"OperatorKey": []}] if op.operator else []
    if op.auth:  # the API key scope the route needs (read < write < admin)
        document["x-scope"] = op.required_scope(method).value
    return document


#: view name -> the ids its success answer holds: path parameter they fill -> JSON pointer into the answer
PRODUCED_IDS: dict[str, dict[str, str]] = {
    "create_knowledge_base": {"kb_id": "/data/id"},
    "clone_knowledge_base": {"task_id": "/data/task_id", "kb_id": "/data/target_kb_id"},
    "upload_file": {"knowledge_id": "/data/id"},
    "presigned_upload": {"knowledge_id": "/data/knowledge_id"},
    "import_url": {"knowledge_id": "/data/id"},
    "create_manual": {"knowledge_id": "/data/id"},
    "batch_delete_knowledge": {"task_id": "/data/task_id"},
    "batch_reparse_knowledge": {"task_id": "/data/task_id"},
    "retry_failed_knowledge": {"task_id": "/data/task_id"},
    "move_knowledge": {"task_id": "/data/task_id"},
    "create_tag": {"tag_id": "/data/id"},
    "create_faq_entry": {"entry_id": "/data/id"},
    "import_faq": {"task_id": "/data/task_id"},
    "create_webhook": {"webhook_id": "/data/id"},
    "admin_create_tenant": {"tenant_id": "/data/tenant/id", "key_id": "/data/key/id"},
    "admin_issue_key": {"key_id": "/data/key/id"},
}


def _link(paths: dict[str, Any], views: dict[str, str]) -> None:
    """OpenAPI links from each operation whose answer holds an id (PRODUCED_IDS) to every operation that
    takes that id in its path; a consumer's other path parameters the producer's path has too are passed
    on from the request (a tag's `kb_id`). Clients and generators follow them; so does a stateful fuzzer,
    which then reaches objects that exist instead of 404s. `views`: operationId -> view name."""
    unknown = set(PRODUCED_IDS) - set(views.values())
    if unknown:  # a renamed view would silently lose its links
        raise KeyError(f"PRODUCED_IDS names views the app does not serve: {sorted(unknown)}")
    items = [(path, item) for path, methods in paths.items() for item in methods.values()]
    for path, item in items:
        view = views[item["operationId"]]
        produced = PRODUCED_IDS.get(view)
        if not produced:
            continue
        own = set(_PARAM.findall(path))
        links: dict[str, Any] = {}
        for consumer_path, consumer in items:
            wanted = _PARAM.findall(consumer_path)
            values = {
                name: f"$response.body#{pointer}" for name, pointer in produced.items() if name in wanted
            }
            if not values:
                continue
            values |= {name: f"$request.path.{name}" for name in wanted if name in own and name not in values}
            links[consumer["operationId"]] = {"operationId": consumer["operationId"], "parameters": values}
        item["responses"][str(OPERATIONS[view].status)]["links"] = links


def build_document(app: Any) -> dict[str, Any]:
    """`app` is the Chalice app: every route it serves is documented (a test checks none is missing)."""
    unknown = (set(ROUTE_ERRORS) | set(route_responses())) - set(OPERATIONS)
    if unknown:  # a renamed view would silently lose what the document says of its answers
        raise KeyError(
            f"ROUTE_ERRORS or route_responses() name views the app does not serve: {sorted(unknown)}"
        )
    paths: dict[str, Any] = {}
    seen_ids: dict[str, int] = {}
    views: dict[str, str] = {}
    for path, methods in sorted(app.routes.items()):
        for method, entry in sorted(methods.items()):
            # CORS preflights (the browser's) and the console's files (a page): not the API
            if method == "OPTIONS" or not OPERATIONS[entry.view_name].api:
                continue
            item = _operation(entry.view_name, path, method.lower())
            count = seen_ids.get(item["operationId"], 0)
            seen_ids[item["operationId"]] = count + 1
            if count:  # one view serving two paths (an alias): operation ids must be unique
                item["operationId"] = f"{item['operationId']}_{count + 1}"
            views[item["operationId"]] = entry.view_name
            paths.setdefault(path, {})[method.lower()] = item
    _link(paths, views)
    models = sorted(
        {op.body for op in OPERATIONS.values() if op.body is not None}, key=lambda model: model.__name__
    )
    answers = sorted(
        {model for model in map(_response_model, OPERATIONS) if model is not None},
        key=lambda model: model.__name__,
    )
    _, schemas = models_json_schema(
        [(model, "validation") for model in models] + [(model, "serialization") for model in answers],
        ref_template=REF_TEMPLATE,
    )
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "weknora-ingest",
            "version": app_version(),
            "description": "WeKnora-grade document ingestion for RAG knowledge bases. Replies use the "
            "envelope {success, data} or {success: false, error: {code, message}}.",
        },
        "paths": paths,
        "components": {
            "schemas": {
                **_common_schemas(),
                "EventDetail": EVENT_DETAIL_SCHEMA,
                "WebhookDelivery": WEBHOOK_DELIVERY_SCHEMA,
                **schemas.get("$defs", {}),
            },
            "securitySchemes": {
                "ApiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "OperatorKey": {"type": "apiKey", "in": "header", "name": "X-Operator-Key"},
            },
        },
    }
