"""Entry paths of the create flow: presigned upload, duplicates (also racing), gates, limits, URL, manual."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import boto3
import requests

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import API_KEY, Api, multipart
from .stored import stored_keys

TEXT = b"# Notes\n\nThe lighthouse keeper logs the weather at dawn and at dusk.\n"


def test_presigned_upload_and_s3_event_complete_the_same_way(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    grant = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "big notes.md"})
    assert grant.status_code == 201, grant.json_body
    data = grant.json_body["data"]
    pending = api.get(f"/knowledge/{data['knowledge_id']}")
    assert pending.status_code == 404 and pending.json_body["error"]["code"] == "upload_pending"

    put = requests.put(data["upload_url"], data=TEXT, headers=data["headers"], timeout=30)
    assert put.status_code == 200
    runtime.drain(timeout=120)  # S3 ObjectCreated → uploads queue → create path → stages → state machine

    knowledge = api.knowledge(data["knowledge_id"])
    assert knowledge["parse_status"] == "completed"
    assert knowledge["channel"] == "presigned" and knowledge["file_name"] == "big notes.md"
    hits = api.post(
        f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "lighthouse", "match_count": 1}
    )
    assert hits.json_body["data"][0]["knowledge_id"] == data["knowledge_id"]


def test_a_presigned_upload_whose_name_has_a_hash_completes(api: Api, runtime: LocalRuntime) -> None:
    """Regression: the object's key keeps the file name, and `s3://bucket/notes #1.md` parsed as a URL lost
    everything after the `#`: the object looked gone and the upload was dropped, `upload_pending` forever."""
    kb = api.create_kb()
    grant = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "notes #1.md"})
    data = grant.json_body["data"]
    assert data["key"].endswith("/notes #1.md")
    assert requests.put(data["upload_url"], data=TEXT, headers=data["headers"], timeout=30).status_code == 200
    runtime.drain(timeout=120)
    knowledge = api.knowledge(data["knowledge_id"])
    assert knowledge["parse_status"] == "completed" and knowledge["file_name"] == "notes #1.md"


def test_presigned_duplicate_is_reported_on_the_knowledge_id(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    first = api.upload(kb["id"], "a.md", TEXT).json_body["data"]
    grant = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "copy.md"}).json_body[
        "data"
    ]
    requests.put(grant["upload_url"], data=TEXT, timeout=30)
    runtime.drain(timeout=120)
    response = api.get(f"/knowledge/{grant['knowledge_id']}")
    assert response.status_code == 404
    assert response.json_body["error"]["code"] == "duplicate_file"
    assert response.json_body["data"]["id"] == first["id"]


def test_a_presigned_upload_of_the_same_type_name_and_size_is_a_409_before_any_byte_moves(
    api: Api, runtime: LocalRuntime
) -> None:
    """The specification's second dedupe branch (issue 24): before the bytes exist, the same file type, name
    and size in the knowledge base is the duplicate; a failed row does not block, another size does not."""
    kb = api.create_kb()
    first = api.upload(kb["id"], "report.md", TEXT).json_body["data"]
    same = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url",
        {"file_name": "report.md", "file_size": len(TEXT)},
    )
    assert same.status_code == 409 and same.json_body["error"]["code"] == "duplicate_file"
    assert same.json_body["data"]["id"] == first["id"]
    for body in (
        {"file_name": "report.md", "file_size": len(TEXT) + 1},
        {"file_name": "other.md", "file_size": len(TEXT)},
        {"file_name": "report.txt", "file_size": len(TEXT)},
        {"file_name": "report.md"},  # no size given: checked by content when the bytes arrive
    ):
        response = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", body)
        assert response.status_code == 201, (body, response.json_body)
    other_kb = api.create_kb()
    elsewhere = api.post(
        f"/knowledge-bases/{other_kb['id']}/knowledge/upload-url",
        {"file_name": "report.md", "file_size": len(TEXT)},
    )
    assert elsewhere.status_code == 201
    broken = api.upload(kb["id"], "broken.pdf", b"%PDF-1.7 not a pdf").json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(broken["id"])["parse_status"] == "failed"
    again = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "broken.pdf", "file_size": 18}
    )
    assert again.status_code == 201, again.json_body


def test_duplicate_upload_returns_409_with_the_existing_row(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    first = api.upload(kb["id"], "notes.md", TEXT).json_body["data"]
    second = api.upload(kb["id"], "renamed.md", TEXT)
    assert second.status_code == 409
    assert second.json_body["success"] is False
    assert second.json_body["error"]["code"] == "duplicate_file"
    assert second.json_body["data"]["id"] == first["id"]
    # type-scoped: the same bytes as .txt are a different knowledge (spec §1.2)
    assert api.upload(kb["id"], "notes.txt", TEXT).status_code == 200


def test_two_racing_uploads_of_one_file_create_one_knowledge(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    body, content_type = multipart({"file": ("race.md", TEXT * 50)}, {})
    barrier = threading.Barrier(4)
    statuses: list[int] = []

    def upload() -> None:
        # Straight into the app (as API Gateway would call concurrent Lambdas), bypassing the test client's lock.
        event = upload_event(kb["id"], body, content_type)
        barrier.wait()
        statuses.append(runtime.app(event, None)["statusCode"])

    threads = [threading.Thread(target=upload) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [200, 409, 409, 409]
    listing = api.get(f"/knowledge-bases/{kb['id']}/knowledge").json_body["data"]
    assert listing["total"] == 1
    # the losers' objects were removed: only the winner's source file is stored
    winner = services.knowledge.get(listing["items"][0]["id"])
    assert winner is not None
    stored = [key for key in stored_keys(services.files, "") if key.endswith(".md")]
    assert stored == [services.files.key_of(winner.file_path)]


def proxy_event(
    method: str, path: str, body: bytes, content_type: str, *, base64_body: bool = True
) -> dict[str, Any]:
    return {
        "resource": path,
        "path": path,
        "httpMethod": method,
        "headers": {"Content-Type": content_type, "X-API-Key": API_KEY},
        "multiValueHeaders": {"Content-Type": [content_type], "X-API-Key": [API_KEY]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "stageVariables": None,
        "requestContext": {
            "httpMethod": method,
            "resourcePath": path,
            "path": path,
            "stage": "api",
            "requestId": "test",
            "identity": {"sourceIp": "127.0.0.1"},
        },
        "body": base64.b64encode(body).decode() if base64_body else body.decode("latin-1"),
        "isBase64Encoded": base64_body,
    }


def upload_event(kb_id: str, body: bytes, content_type: str) -> dict[str, Any]:
    event = proxy_event("POST", "/api/v1/knowledge-bases/{kb_id}/knowledge/file", body, content_type)
    event["pathParameters"] = {"kb_id": kb_id}
    event["path"] = f"/api/v1/knowledge-bases/{kb_id}/knowledge/file"
    return event


def test_binary_upload_through_an_api_gateway_base64_event(api: Api, runtime: LocalRuntime) -> None:
    """API Gateway base64-encodes multipart bodies (binary_types); the local gateway never does, so the
    encoding path is tested with a hand-built proxy event."""
    kb = api.create_kb()
    payload = "# Ünïcödé\n\n바이너리 안전 — bytes survive base64.\n".encode()
    body, content_type = multipart({"file": ("u.md", payload)}, {"metadata": json.dumps({"k": "v"})})
    response = runtime.app(upload_event(kb["id"], body, content_type), None)
    assert response["statusCode"] == 200, response
    created = json.loads(response["body"])["data"]
    assert created["file_size"] == len(payload) and created["metadata"] == {"k": "v"}


def test_unsupported_extension_is_a_400_with_a_stable_code(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    response = api.upload(kb["id"], "tool.exe", b"MZ\x90\x00")
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == "unsupported_file_type"
    assert api.upload(kb["id"], "noext", b"data").json_body["error"]["code"] == "unsupported_file_type"


def test_video_gets_its_own_message(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    response = api.upload(kb["id"], "talk.mp4", b"\x00\x00\x00\x18ftypmp42")
    assert response.status_code == 400
    assert response.json_body["error"]["code"] == "video_not_supported"
    assert "Video" in response.json_body["error"]["message"]


def test_empty_file_is_rejected(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    response = api.upload(kb["id"], "empty.txt", b"")
    assert response.status_code == 400 and response.json_body["error"]["code"] == "empty_file"


def test_body_over_the_gateway_limit_is_a_413_pointing_to_presigned_upload(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    response = api.upload(kb["id"], "huge.txt", b"x" * (runtime_limit(runtime) + 1))
    assert response.status_code == 413
    assert response.json_body["error"]["code"] == "use_presigned_upload"
    assert "upload-url" in response.json_body["error"]["message"]


def runtime_limit(runtime: LocalRuntime) -> int:
    from chalicelib.settings import get_settings

    return get_settings().api_max_body


def test_enqueue_failure_leaves_a_failed_row_that_reparse_recovers(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName="weknora-docreader")["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)  # the first stage cannot be enqueued
    response = api.upload(kb["id"], "notes.md", TEXT)
    assert response.status_code == 200
    created = response.json_body["data"]
    assert created["parse_status"] == "failed" and created["error_code"] == "enqueue_failed"
    assert api.knowledge(created["id"])["parse_status"] == "failed"

    sqs.create_queue(QueueName="weknora-docreader")  # the queue is back
    reparsed = api.post(f"/knowledge/{created['id']}/reparse")
    assert reparsed.status_code == 200 and reparsed.json_body["data"]["attempt"] == 2
    runtime.drain(timeout=120)
    recovered = api.knowledge(created["id"])
    assert recovered["parse_status"] == "completed" and recovered["error_message"] == ""


def test_manual_publish_completes_and_draft_stays_a_draft(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    published = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": "Tides", "content": "Spring tides follow the full moon.", "status": "publish"},
    )
    draft = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": "Later", "content": "Not yet.", "status": "draft"},
    )
    assert published.status_code == 200 and draft.status_code == 200
    runtime.drain(timeout=120)
    assert api.knowledge(published.json_body["data"]["id"])["parse_status"] == "completed"
    assert api.knowledge(draft.json_body["data"]["id"])["parse_status"] == "draft"
    empty = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", {"title": "x", "content": "  "})
    assert empty.status_code == 400 and empty.json_body["error"]["code"] == "empty_content"


def test_an_oversized_presigned_upload_is_rejected_without_being_read(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    from dataclasses import replace

    services.settings = replace(services.settings, max_file_size=1000)
    kb = api.create_kb()
    grant = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "big.md"}).json_body[
        "data"
    ]
    reads: list[tuple[str, int | None]] = []
    real_read = services.inbox.read

    def read(url: str, limit: int | None = None) -> bytes:
        reads.append((url, limit))
        return real_read(url, limit)

    services.inbox.read = read  # type: ignore[method-assign]
    requests.put(grant["upload_url"], data=b"x" * 5000, timeout=30)
    runtime.drain(timeout=60)
    response = api.get(f"/knowledge/{grant['knowledge_id']}")
    assert response.status_code == 404 and response.json_body["error"]["code"] == "file_too_large"
    # the staged object is read once, bounded: S3 answers its length before its bytes, and a bigger one is
    # refused unread (a size check and then a read had let a PUT replayed in between into memory)
    uploads = [(url, limit) for url, limit in reads if "/uploads/" in url]
    assert len(uploads) == 1 and uploads[0][1] == 1000


def test_another_tenant_learns_nothing_about_a_rejected_presigned_upload(
    api: Api, other_api: Api, runtime: LocalRuntime
) -> None:
    """The rejection record of a presigned duplicate carries the existing row: only its tenant may see it."""
    kb = api.create_kb()
    api.upload(kb["id"], "a.md", TEXT)
    grant = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "copy.md"}).json_body[
        "data"
    ]
    requests.put(grant["upload_url"], data=TEXT, timeout=30)
    runtime.drain(timeout=120)
    assert api.get(f"/knowledge/{grant['knowledge_id']}").json_body["error"]["code"] == "duplicate_file"
    foreign = other_api.get(f"/knowledge/{grant['knowledge_id']}")
    assert foreign.status_code == 404
    assert foreign.json_body["error"]["code"] == "knowledge_not_found" and "data" not in foreign.json_body
