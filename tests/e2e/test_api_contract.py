"""The API's own contract: health, the OpenAPI document generated from the validating models, and bodies
that are validated at the boundary (a clear 400 with a stable code, never a 500)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from chalice.test import Client

from chalicelib.api.registry import OPERATIONS
from chalicelib.bootstrap import Services

from .conftest import V1, Api, multipart


def test_health_needs_no_key_and_reports_every_backing_service(client: Client, services: Services) -> None:
    response = client.http.get(f"{V1}/health")
    assert response.status_code == 200, response.json_body
    data = response.json_body["data"]
    assert data["status"] == "ok" and data["version"]
    assert data["checks"] == {"table": True, "queues": True, "bucket": True}


def test_health_is_503_and_names_what_does_not_answer(client: Client, services: Services) -> None:
    s3 = boto3.client("s3", region_name=services.settings.region)
    bucket = services.settings.files_bucket
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=item["Key"])
    s3.delete_bucket(Bucket=bucket)
    response = client.http.get(f"{V1}/health")
    assert response.status_code == 503
    assert response.json_body["data"]["checks"] == {"table": True, "queues": True, "bucket": False}


def _document(client: Client) -> dict[str, Any]:
    response = client.http.get(f"{V1}/openapi.json")
    assert response.status_code == 200
    return dict(response.json_body)


def test_every_route_is_in_the_openapi_document(client: Client, runtime: Any) -> None:
    document = _document(client)
    assert document["openapi"].startswith("3.1")
    for path, methods in runtime.app.routes.items():
        for method, entry in methods.items():
            if method == "OPTIONS":  # every path's CORS preflight (tests/e2e/test_one_envelope.py)
                continue
            if not OPERATIONS[entry.view_name].api:
                # only the console's page and static files are not the API: left out of its document
                assert path == "/console" or path.startswith("/console/"), path
                assert path not in document["paths"]
                continue
            assert method.lower() in document["paths"][path], f"{method} {path} is not documented"
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))
    # every tenant route says the key scope it needs
    search = document["paths"][f"{V1}/knowledge-bases/{{kb_id}}/hybrid-search"]["post"]
    shares = document["paths"][f"{V1}/knowledge-bases/{{kb_id}}/shares"]
    assert (search["x-scope"], shares["post"]["x-scope"], shares["get"]["x-scope"]) == (
        "read",
        "admin",
        "admin",
    )
    assert document["paths"][f"{V1}/knowledge-bases"]["post"]["x-scope"] == "write"
    assert all(
        "x-scope" in op
        for item in document["paths"].values()
        for op in item.values()
        if op["security"] == [{"ApiKey": []}]
    )


def test_the_documents_links_name_real_operations_and_resolve_in_real_answers(
    client: Client, api: Api
) -> None:
    """Each link's target exists and takes the parameters it fills; `$request.path.x` is a parameter of the
    producer's own path; and the pointers hold ids in what the producers really answer."""
    document = _document(client)
    by_id = {op["operationId"]: path for path, item in document["paths"].items() for op in item.values()}
    pointers: dict[str, set[str]] = {}
    for path, item in document["paths"].items():
        for op in item.values():
            for answer in op["responses"].values():
                for link in answer.get("links", {}).values():
                    target = by_id[link["operationId"]]
                    for name, value in link["parameters"].items():
                        assert "{" + name + "}" in target, (op["operationId"], link)
                        if value.startswith("$request.path."):
                            assert "{" + value.removeprefix("$request.path.") + "}" in path
                        else:
                            pointers.setdefault(op["operationId"], set()).add(
                                value.removeprefix("$response.body#")
                            )
    assert {"create_knowledge_base", "create_manual", "create_tag", "batch_reparse_knowledge"} <= set(
        pointers
    )

    def at(answer: Any, pointer: str) -> Any:
        for part in pointer.strip("/").split("/"):
            answer = answer[part]
        return answer

    kb = api.post("/knowledge-bases", {"name": "linked"})
    manual = api.post(f"/knowledge-bases/{kb.json_body['data']['id']}/knowledge/manual", {"content": "# x"})
    tag = api.post(f"/knowledge-bases/{kb.json_body['data']['id']}/tags", {"name": "t"})
    reparse = api.post(
        "/knowledge/batch-reparse",
        {"kb_id": at(kb.json_body, "/data/id"), "ids": [at(manual.json_body, "/data/id")]},
    )
    for operation, answer in (
        ("create_knowledge_base", kb),
        ("create_manual", manual),
        ("create_tag", tag),
        ("batch_reparse_knowledge", reparse),
    ):
        assert answer.status_code < 300, answer.json_body
        for pointer in pointers[operation]:
            assert isinstance(at(answer.json_body, pointer), str), (operation, pointer)
    task = api.get(f"/tasks/{at(reparse.json_body, '/data/task_id')}")
    assert task.status_code == 200


def test_request_bodies_are_the_validating_models_with_their_error_codes(client: Client, api: Api) -> None:
    document = _document(client)
    create = document["paths"][f"{V1}/knowledge-bases"]["post"]
    ref = create["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    schema = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["name"]["x-error-code"] == "invalid_name"
    assert schema["properties"]["name"]["maxLength"] == 200
    upload = document["paths"][f"{V1}/knowledge-bases/{{kb_id}}/knowledge/file"]["post"]
    assert "multipart/form-data" in upload["requestBody"]["content"]
    assert upload["security"] == [{"ApiKey": []}]
    assert document["paths"][f"{V1}/health"]["get"]["security"] == []
    # What the document promises is what the API does:
    response = api.post("/knowledge-bases", {"name": "x" * 201})
    assert response.status_code == 400 and response.json_body["error"]["code"] == "invalid_name"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"name": 5}, "invalid_name"),
        ({"name": "kb", "surprise": 1}, "invalid_body"),
        ({"name": "kb", "chunking_config": {"separators": 5}}, "invalid_chunking_config"),
        ({"name": "kb", "chunking_config": {"separators": [None, 5]}}, "invalid_chunking_config"),
        ({"name": "kb", "chunking_config": {"parent_chunk_size": "x"}}, "invalid_chunking_config"),
        ({"name": "kb", "chunking_config": {"strategy": "abc"}}, "invalid_chunking_config"),
        ({"name": "kb", "indexing_strategy": {"vector_enabled": "yes"}}, "invalid_indexing_strategy"),
        ({"name": "kb", "embedding_model_id": 5}, "invalid_model_id"),
        ({"name": "kb", "retrieval_engine": "elastic"}, "invalid_engine"),
        ({"name": "kb", "description": "d" * 10_001}, "invalid_description"),
    ],
)
def test_a_bad_knowledge_base_body_is_a_400_with_a_stable_code(api: Api, body: Any, code: str) -> None:
    response = api.post("/knowledge-bases", body)
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == code
    assert response.json_body["error"]["details"]


def test_hostile_json_is_a_400_not_a_500(client: Client, api: Api) -> None:
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    deep = "[" * 100_000 + "]" * 100_000
    for raw, code in (
        ('{"name": ' + deep + "}", "invalid_json"),
        ('{"title": "t", "content": "\\ud800 lone"}', "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ("{not json", "invalid_json"),
        (b"\xff\xfe", "invalid_json"),
    ):
        kb = api.create_kb()
        path = f"{V1}/knowledge-bases/{kb['id']}/knowledge/manual"
        response = client.http.post(path, headers=headers, body=raw)
        assert response.status_code == 400, (raw[:40], response.json_body)
        assert response.json_body["error"]["code"] == code


def test_bad_form_fields_are_a_400(api: Api) -> None:
    kb = api.create_kb()
    for fields, code in (
        ({"process_config": "{not json"}, "invalid_process_config"),
        ({"process_config": json.dumps({"chunking": {"chunk_size": 0}})}, "invalid_process_config"),
        ({"metadata": "[1]"}, "invalid_metadata"),
        ({"metadata": json.dumps({"a": "x" * 70_000})}, "invalid_metadata"),
        ({"tag_ids": ",".join(f"t{i}" for i in range(101))}, "invalid_tag_ids"),
    ):
        response = api.upload(kb["id"], "notes.md", b"# Notes\n\nbody", fields)
        assert response.status_code == 400, (fields, response.json_body)
        assert response.json_body["error"]["code"] == code


def test_a_form_part_with_an_unknown_charset_is_a_400(client: Client, api: Api) -> None:
    kb = api.create_kb()
    body, content_type = multipart({"file": ("a.md", b"# A\n\ntext")}, {})
    boundary = content_type.split("boundary=", 1)[1]
    field = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="channel"\r\n'
        "Content-Type: text/plain; charset=bogus\r\n\r\nweb\r\n"
    ).encode()
    response = client.http.post(
        f"{V1}/knowledge-bases/{kb['id']}/knowledge/file",
        headers={"X-API-Key": api.api_key, "Content-Type": content_type},
        body=field + body,
    )
    assert response.status_code == 400 and response.json_body["error"]["code"] == "invalid_multipart"
