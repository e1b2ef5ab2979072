"""No tenant can make the server call a host the operator did not configure through a model setting.

Regression (issue 9, critical): a tenant could set `embedding_model_id`, `summary_model_id` or `vlm_model_id`
(on a KB or in an upload's process_config) to `openai/x@http://<any host>/…`; the server POSTed there with
no SSRF check and copied up to 300 characters of the reply into the document's error_message and the logs.
Pointed at the local AWS endpoint's reset URL, one search call wiped every tenant's state."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from e2e.conftest import Api


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """A server that records every request it receives: a tenant must never make us reach it."""
    received: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_GET = do_POST

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()


ENDPOINT_SETTINGS = ("embedding_model_id", "summary_model_id", "vlm_model_id", "asr_model_id")


@pytest.mark.parametrize("setting", ENDPOINT_SETTINGS)
def test_a_knowledge_base_cannot_name_a_model_endpoint(
    api: Api, listener: tuple[str, list[str]], setting: str
) -> None:
    url, received = listener
    for value in (
        f"openai/x@{url}/v1",
        "openai/x@http://169.254.169.254/latest",
        f"openai/x@{url}/moto-api/reset",
    ):
        response = api.post("/knowledge-bases", {"name": f"kb-{setting}", setting: value})
        assert response.status_code == 400, response.json_body
        assert response.json_body["error"]["code"] == "unknown_model"
        assert (
            url not in response.json_body["error"]["message"]
            or value in response.json_body["error"]["message"]
        )
    assert received == []


@pytest.mark.parametrize("setting", ("vlm_model_id", "asr_model_id"))
def test_an_upload_cannot_name_a_model_endpoint(
    api: Api, listener: tuple[str, list[str]], setting: str
) -> None:
    url, received = listener
    kb = api.create_kb()
    bad = {setting: f"openai/x@{url}/v1"}
    upload = api.upload(kb["id"], "a.md", b"# A\n\ntext", {"process_config": __import__("json").dumps(bad)})
    assert upload.status_code == 400 and upload.json_body["error"]["code"] == "unknown_model"
    imported = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": "https://example.com/", "process_config": bad}
    )
    assert imported.status_code == 400 and imported.json_body["error"]["code"] == "unknown_model"
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# x\n\ny", "process_config": bad}
    )
    assert manual.status_code == 400 and manual.json_body["error"]["code"] == "unknown_model"
    assert received == []


@pytest.mark.parametrize("setting", ("vlm_model_id", "asr_model_id"))
def test_a_reparse_or_an_upload_url_cannot_name_a_model_endpoint(
    api: Api, listener: tuple[str, list[str]], setting: str
) -> None:
    """Issue 24, defect 14: batch reparse answered 202 to a process_config naming a model endpoint."""
    url, received = listener
    kb = api.create_kb()
    created = api.upload(kb["id"], "a.md", b"# A\n\ntext").json_body["data"]
    for value in (f"openai/x@{url}/v1", "openai/x@http://169.254.169.254/latest"):
        bad = {setting: value}
        for path, body in (
            ("/knowledge/batch-reparse", {"kb_id": kb["id"], "ids": [created["id"]], "process_config": bad}),
            (f"/knowledge/{created['id']}/reparse", {"process_config": bad}),
            (
                f"/knowledge-bases/{kb['id']}/knowledge/upload-url",
                {"file_name": "b.md", "process_config": bad},
            ),
        ):
            response = api.post(path, body)
            assert response.status_code == 400, (path, response.json_body)
            assert response.json_body["error"]["code"] == "unknown_model"
    assert received == []


def test_every_body_field_that_names_a_model_is_checked_against_the_catalog() -> None:
    """The boundary check finds model names by field name: a new `*_model_id` field anywhere in a request
    body must be in the table, or it would skip the catalog."""
    from pydantic import BaseModel

    from chalicelib import commands
    from chalicelib.faq import commands as faq_commands

    def model_id_fields(model: type[BaseModel]) -> set[str]:
        return {name for name in model.model_fields if name.endswith("_model_id")}

    bodies = [
        value
        for module in (commands, faq_commands)
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__
    ]
    named = set().union(*(model_id_fields(b) for b in bodies))
    assert named and named <= set(commands.MODEL_FIELDS)
    body = commands.BatchReparseRequest.model_validate(
        {"kb_id": "k", "ids": ["a"], "process_config": {"vlm_model_id": "x", "asr_model_id": "y"}}
    )
    assert sorted(commands.named_models(body)) == [("asr", "y"), ("vision", "x")]


def test_the_offered_models_are_listed_by_name(api: Api) -> None:
    response = api.get("/models")
    assert response.status_code == 200
    offered = response.json_body["data"]
    assert "local/all-MiniLM-L6-v2-qint8" in offered["embedding"]
    assert "local/all-MiniLM-L6-v2-int8" in offered["embedding"]
    assert offered["chat"] == ["local/extractive"]
    kb = api.create_kb(embedding_model_id=offered["embedding"][0], summary_model_id="local/extractive")
    assert kb["summary_model_id"] == "local/extractive"


def test_an_unconfigured_engine_is_a_400(api: Api) -> None:
    response = api.post("/knowledge-bases", {"name": "os", "retrieval_engine": "opensearch"})
    assert response.status_code == 400 and response.json_body["error"]["code"] == "engine_not_configured"
