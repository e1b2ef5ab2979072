"""What a model endpoint sent never rides along on the error raised for it: not in its text, nor as its
cause or context (what a logged traceback prints). And embeddings a provider sent as malformed base64 are
the port's ModelRequestError (`embedding_provider_fail`), not a raw binascii.Error or ValueError.

Regression (found by an audit): the adapters raised their clean errors `from exc`, so the traceback the
stage runner's Lambda error carried quoted the cause: Bedrock's message, urllib3's chunk-size line (the bytes
the server sent), an int() of the provider's `index`; base64 embeddings were decoded outside the adapter's
error handling, a bug to the runner (retried to the last try, recorded `unknown`)."""

from __future__ import annotations

import base64
import io
import json
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.stub import Stubber
from marker_servers import chunk_size_marker_server

from chalicelib.adapters.models.bedrock import BedrockTitanEmbedding
from chalicelib.adapters.models.openai_compat import HttpResponse, OpenAIEmbedding, SafeTransport
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.net.client import SafeHttpClient
from chalicelib.net.ssrf import AllowList
from chalicelib.ports import ModelRequestError, ModelUnavailable

MARKER = "SECRET-MARKER-123"


def assert_unchained(error: BaseException) -> None:
    assert MARKER not in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    assert MARKER not in "".join(traceback.format_exception(error))


class Scripted:
    """An HttpTransport answering every POST with one canned JSON body."""

    def __init__(self, body: Any) -> None:
        self.body = json.dumps(body).encode()

    def post_json(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float
    ) -> HttpResponse:
        return HttpResponse(200, self.body)


def embeddings(*items: Any) -> dict[str, Any]:
    return {"object": "list", "data": list(items), "usage": {"prompt_tokens": 1, "total_tokens": 1}}


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    "encoded",
    [
        "abc",  # incorrect padding: binascii.Error
        _b64(b"\x00" * 5),  # 5 bytes: not a whole number of float32s (ValueError)
    ],
)
def test_malformed_base64_embeddings_are_a_model_request_error(encoded: str) -> None:
    model = OpenAIEmbedding(
        "m", base_url="http://models/v1", transport=Scripted(embeddings({"embedding": encoded}))
    )
    with pytest.raises(ModelRequestError, match="malformed base64 embeddings") as raised:
        model.embed(["hello"])
    assert_unchained(raised.value)


def test_well_formed_base64_embeddings_still_decode() -> None:
    encoded = _b64(np.array([3.0, 4.0], dtype="<f4").tobytes())
    model = OpenAIEmbedding(
        "m", base_url="http://models/v1", transport=Scripted(embeddings({"embedding": encoded}))
    )
    np.testing.assert_allclose(model.embed(["hello"])[0], [0.6, 0.8], atol=1e-6)


def test_malformed_base64_embeddings_fail_the_document_as_a_provider_failure(tmp_path: Path) -> None:
    from chalicelib.bootstrap import memory_deps
    from chalicelib.services.embedding_runs import embed_texts

    deps = memory_deps(index_dir=tmp_path / "index")
    model = OpenAIEmbedding(
        "m", base_url="http://models/v1", declared_dim=4, transport=Scripted(embeddings({"embedding": "abc"}))
    )
    with pytest.raises(PermanentStageError) as raised:
        embed_texts(deps, "t1", model, ["hello"])
    assert raised.value.code == SpanErrorCode.EMBEDDING_PROVIDER_FAIL


@pytest.mark.parametrize(
    "items",
    [
        [{"index": MARKER, "embedding": [1.0]}],  # int() quotes the value
        [{"index": 0, "embedding": [MARKER]}],  # float() quotes the value
    ],
)
def test_a_providers_values_never_ride_on_a_malformed_answers_error(items: list[Any]) -> None:
    model = OpenAIEmbedding("m", base_url="http://models/v1", transport=Scripted(embeddings(*items)))
    with pytest.raises(ModelRequestError) as raised:
        model.embed(["hello"])
    assert_unchained(raised.value)


@pytest.fixture
def broken_chunked_endpoint() -> Iterator[str]:
    """Answers every request 200, chunked, with the marker where the first chunk's size belongs."""
    with chunk_size_marker_server(MARKER, "application/json") as port:
        yield f"127.0.0.1:{port}"


def test_an_answer_broken_off_mid_body_is_unavailable_without_the_bytes_sent(
    broken_chunked_endpoint: str,
) -> None:
    client = SafeHttpClient(AllowList.parse(broken_chunked_endpoint))
    model = OpenAIEmbedding(
        "m", base_url=f"http://{broken_chunked_endpoint}/v1", declared_dim=4, transport=SafeTransport(client)
    )
    with pytest.raises(ModelUnavailable) as raised:
        model.embed(["hello"])
    assert_unchained(raised.value)

    from chalicelib.net.client import FetchError

    for call in (
        lambda: client.get(f"http://{broken_chunked_endpoint}/doc.pdf"),
        lambda: client.post(f"http://{broken_chunked_endpoint}/hook", b"{}", {}),
    ):
        with pytest.raises(FetchError) as fetched:
            call()
        assert_unchained(fetched.value)


@pytest.mark.parametrize(
    ("code", "status"), [("ServiceUnavailableException", 503), ("ValidationException", 400)]
)
def test_bedrocks_message_is_not_the_errors_cause(code: str, status: int) -> None:
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"total_max_attempts": 1}),
    )
    model = BedrockTitanEmbedding(client, dimensions=256, concurrency=1)
    with Stubber(client) as stub:
        stub.add_client_error(
            "invoke_model",
            service_error_code=code,
            service_message=f"{MARKER} model said",
            http_status_code=status,
        )
        with pytest.raises((ModelUnavailable, ModelRequestError)) as raised:
            model.embed(["hello"])
    assert_unchained(raised.value)


def test_bedrocks_answer_that_is_not_json_is_not_chained() -> None:
    from botocore.response import StreamingBody

    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    model = BedrockTitanEmbedding(client, dimensions=256, concurrency=1)
    raw = f"not json {MARKER}".encode()
    with Stubber(client) as stub:
        stub.add_response(
            "invoke_model",
            {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"},
        )
        with pytest.raises(ModelUnavailable) as raised:
            model.embed(["hello"])
    assert_unchained(raised.value)
