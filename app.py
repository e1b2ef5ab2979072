"""weknora-ingest: HTTP routes and event handlers. Each handler parses, calls one use case, shapes the reply."""

from __future__ import annotations

import json
from typing import Any

from chalice import Chalice, Rate, Response

from chalicelib import api, chunk_preview, create, knowledge_bases, pipeline, reparse, search, workflow_tasks
from chalicelib.bootstrap import get_services
from chalicelib.domain.process_config import validate_engine_rules
from chalicelib.domain.types import Stage
from chalicelib.housekeeping import sweep
from chalicelib.settings import get_settings
from chalicelib.stage_runner import run_stage
from chalicelib.uploads import handle_upload_events

app = Chalice(app_name="weknora-ingest")
app.api.binary_types.append("multipart/form-data")
settings = get_settings()
V1 = "/api/v1"


def _tenant() -> Any:
    return api.authenticate(get_services(), app.current_request)


# ---------------------------------------------------------------- knowledge bases


@app.route(f"{V1}/knowledge-bases", methods=["POST"])
@api.endpoint
def create_knowledge_base() -> Response:
    kb = knowledge_bases.create_kb(get_services(), _tenant().id, api.json_body(app.current_request))
    return api.ok(knowledge_bases.kb_to_dict(kb), 201)


@app.route(f"{V1}/knowledge-bases", methods=["GET"])
@api.endpoint
def list_knowledge_bases() -> Response:
    return api.ok([knowledge_bases.kb_to_dict(kb) for kb in get_services().kbs.list(_tenant().id)])


@app.route(f"{V1}/knowledge-bases/{{kb_id}}", methods=["GET"])
@api.endpoint
def get_knowledge_base(kb_id: str) -> Response:
    return api.ok(knowledge_bases.kb_to_dict(knowledge_bases.get_kb(get_services(), _tenant().id, kb_id)))


# ---------------------------------------------------------------- create knowledge


@app.route(
    f"{V1}/knowledge-bases/{{kb_id}}/knowledge/file", methods=["POST"], content_types=["multipart/form-data"]
)
@api.endpoint
def upload_file(kb_id: str) -> Response:
    svc = get_services()
    tenant = _tenant()
    request = app.current_request
    body = api.check_body_size(svc, request)
    form = api.parse_multipart(request.headers.get("content-type", ""), body)
    if "file" not in form.files:
        raise create.BadRequest("the form has no `file` part", code="missing_file")
    file_name, data = form.files["file"]
    upload = create.FileUpload(
        data=data,
        file_name=form.fields.get("fileName") or file_name,
        metadata=create.parse_metadata(form.fields.get("metadata")),
        enable_multimodel=api.form_bool(form.fields.get("enable_multimodel")),
        tag_ids=create.parse_tag_ids(form.fields.get("tag_ids")),
        process_config=json.loads(form.fields["process_config"])
        if form.fields.get("process_config")
        else None,
        channel=form.fields.get("channel") or "api",
    )
    return api.ok(create.create_from_file(svc, tenant.id, kb_id, upload).to_dict())


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/upload-url", methods=["POST"])
@api.endpoint
def presigned_upload(kb_id: str) -> Response:
    svc = get_services()
    return api.ok(create.create_upload_url(svc, _tenant().id, kb_id, api.json_body(app.current_request)), 201)


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/url", methods=["POST"])
@api.endpoint
def import_url(kb_id: str) -> Response:
    svc = get_services()
    return api.ok(
        create.create_from_url(svc, _tenant().id, kb_id, api.json_body(app.current_request)).to_dict(), 201
    )


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge/manual", methods=["POST"])
@api.endpoint
def create_manual(kb_id: str) -> Response:
    svc = get_services()
    return api.ok(
        create.create_manual(svc, _tenant().id, kb_id, api.json_body(app.current_request)).to_dict()
    )


# ---------------------------------------------------------------- read and operate


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/knowledge", methods=["GET"])
@api.endpoint
def list_knowledge(kb_id: str) -> Response:
    svc = get_services()
    create.require_kb(svc, _tenant().id, kb_id)
    request = app.current_request
    page = svc.knowledge.list_by_kb(
        kb_id, api.query_int(request, "page", 1, 1, 100_000), api.query_int(request, "page_size", 20, 1, 100)
    )
    return api.ok(
        {
            "items": [k.to_dict() for k in page.items],
            "total": page.total,
            "page": page.page,
            "page_size": page.page_size,
        }
    )


@app.route(f"{V1}/knowledge/{{knowledge_id}}", methods=["GET"])
@api.endpoint
def get_knowledge(knowledge_id: str) -> Response:
    svc = get_services()
    tenant = _tenant()
    knowledge = svc.knowledge.get(knowledge_id)
    if knowledge is None or knowledge.tenant_id != tenant.id:
        raise create.missing_knowledge_error(svc, tenant.id, knowledge_id)
    return api.ok(knowledge.to_dict())


@app.route(f"{V1}/knowledge/{{knowledge_id}}/spans", methods=["GET"])
@app.route(f"{V1}/knowledge/{{knowledge_id}}/stages", methods=["GET"])
@api.endpoint
def knowledge_spans(knowledge_id: str) -> Response:
    svc = get_services()
    knowledge = reparse.owned_knowledge(svc, _tenant().id, knowledge_id)
    attempt = api.query_int(app.current_request, "attempt", knowledge.attempt, 1, knowledge.attempt)
    return api.ok(svc.tracker.view(knowledge, attempt))


@app.route(f"{V1}/knowledge/{{knowledge_id}}/reparse", methods=["POST"])
@api.endpoint
def reparse_knowledge(knowledge_id: str) -> Response:
    svc = get_services()
    body = api.json_body(app.current_request)
    return api.ok(reparse.reparse(svc, _tenant().id, knowledge_id, body).to_dict())


@app.route(f"{V1}/knowledge-bases/{{kb_id}}/hybrid-search", methods=["POST"])
@api.endpoint
def hybrid_search(kb_id: str) -> Response:
    svc = get_services()
    return api.ok(search.hybrid_search(svc, _tenant().id, kb_id, api.json_body(app.current_request)))


@app.route(f"{V1}/tenant/settings", methods=["GET"])
@api.endpoint
def get_tenant_settings() -> Response:
    return api.ok({"parser_engine_rules": _tenant().parser_engine_rules})


@app.route(f"{V1}/tenant/settings", methods=["PUT"])
@api.endpoint
def put_tenant_settings() -> Response:
    tenant = _tenant()
    body = api.json_body(app.current_request)
    tenant.parser_engine_rules = validate_engine_rules(body.get("parser_engine_rules", {}))
    get_services().tenants.put(tenant)
    return api.ok({"parser_engine_rules": tenant.parser_engine_rules})


@app.route(f"{V1}/parser-engines", methods=["GET"])
@api.endpoint
def parser_engines() -> Response:
    _tenant()
    return api.ok(get_services().docreader().engines())


@app.route(f"{V1}/chunker/preview", methods=["POST"])
@api.endpoint
def chunker_preview() -> Response:
    return api.ok(
        chunk_preview.preview_chunks(get_services(), _tenant().id, api.json_body(app.current_request))
    )


# ---------------------------------------------------------------- queues, workflow tasks, schedule


@app.on_sqs_message(queue=settings.queue("uploads"), batch_size=10)
def on_upload_event(event: Any) -> dict[str, Any]:
    return handle_upload_events(get_services(), event.to_dict(), event.context)


@app.on_sqs_message(queue=settings.queue("docreader"), batch_size=1)
def docreader_stage(event: Any) -> dict[str, Any]:
    return run_stage(
        get_services(), Stage.DOCREADER, event.to_dict(), event.context, pipeline.docreader_stage
    )


@app.on_sqs_message(queue=settings.queue("chunking"), batch_size=5)
def chunking_stage(event: Any) -> dict[str, Any]:
    return run_stage(get_services(), Stage.CHUNKING, event.to_dict(), event.context, pipeline.chunking_stage)


@app.on_sqs_message(queue=settings.queue("embedding"), batch_size=1)
def embedding_stage(event: Any) -> dict[str, Any]:
    return run_stage(
        get_services(),
        Stage.EMBEDDING,
        event.to_dict(),
        event.context,
        pipeline.embedding_stage,
        rollback=pipeline.rollback_embedding,
    )


@app.on_sqs_message(queue=settings.queue("multimodal"), batch_size=5)
def multimodal_task(event: Any) -> dict[str, Any]:
    return workflow_tasks.run_callback_tasks(
        get_services(), event.to_dict(), event.context, workflow_tasks.multimodal_task, "multimodal"
    )


@app.on_sqs_message(queue=settings.queue("postprocess"), batch_size=5)
def postprocess_task(event: Any) -> dict[str, Any]:
    return workflow_tasks.run_callback_tasks(
        get_services(), event.to_dict(), event.context, workflow_tasks.postprocess_task, "postprocess"
    )


@app.on_sqs_message(queue=settings.queue("enrichment"), batch_size=5)
def enrichment_task(event: Any) -> dict[str, Any]:
    return workflow_tasks.run_callback_tasks(
        get_services(), event.to_dict(), event.context, workflow_tasks.enrichment_task, "enrichment"
    )


@app.schedule(Rate(5, unit=Rate.MINUTES))
def housekeeping(event: Any) -> dict[str, Any]:
    report = sweep(get_services())
    return {
        "recovered": report.recovered,
        "spared": report.spared,
        "summaries_failed": report.summaries_failed,
    }
