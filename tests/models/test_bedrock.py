"""Bedrock adapters against botocore's Stubber: real request validation against the bedrock-runtime
service model, canned responses. (Bedrock itself cannot run here; the Stubber is the fake.)"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from chalicelib.adapters.models.bedrock import (
    BedrockChatModel,
    BedrockCohereEmbedding,
    BedrockTitanEmbedding,
    BedrockVisionModel,
    map_bedrock_error,
)
from chalicelib.ports import (
    ModelAuthError,
    ModelEmptyResponse,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
)
from chalicelib.services.backoff import call_with_backoff

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"total_max_attempts": 1}),
    )


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def body(payload: Any) -> dict[str, Any]:
    raw = json.dumps(payload).encode()
    return {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"}


def invoke_params(model: str, payload: Any) -> dict[str, Any]:
    return {
        "modelId": model,
        "body": json.dumps(payload).encode(),
        "contentType": "application/json",
        "accept": "application/json",
    }


def test_titan_v2_one_call_per_text_with_dimensions_and_normalize(client: Any, stub: Stubber) -> None:
    model = BedrockTitanEmbedding(client, dimensions=256, concurrency=1)
    for i, text in enumerate(["first", "second"]):
        vec = [0.0] * 256
        vec[i] = 3.0  # deliberately not unit length: the adapter normalises
        stub.add_response(
            "invoke_model",
            body({"embedding": vec, "inputTextTokenCount": 1}),
            invoke_params(
                "amazon.titan-embed-text-v2:0", {"inputText": text, "dimensions": 256, "normalize": True}
            ),
        )
    vectors = model.embed(["first", "second"])
    assert vectors.shape == (2, 256)
    assert vectors.dtype == np.float32
    assert vectors[0, 0] == pytest.approx(1.0) and vectors[1, 1] == pytest.approx(1.0)
    assert model.model_id == "bedrock/amazon.titan-embed-text-v2:0"


def test_titan_clips_input_to_max_chars(client: Any, stub: Stubber) -> None:
    model = BedrockTitanEmbedding(client, dimensions=256, concurrency=1)
    stub.add_response(
        "invoke_model",
        body({"embedding": [1.0] * 256}),
        invoke_params(
            "amazon.titan-embed-text-v2:0", {"inputText": "y" * 20_000, "dimensions": 256, "normalize": True}
        ),
    )
    assert model.embed(["y" * 25_000]).shape == (1, 256)


def test_titan_concurrent_calls_keep_order(client: Any) -> None:
    # Stubber is strictly ordered, so the threaded path is checked with a fake client instead.
    class FakeClient:
        def invoke_model(self, **kwargs: Any) -> dict[str, Any]:
            text = json.loads(kwargs["body"])["inputText"]
            vec = [0.0] * 1024
            vec[int(text)] = 1.0
            return body({"embedding": vec})

    model = BedrockTitanEmbedding(FakeClient(), concurrency=4)
    vectors = model.embed([str(i) for i in range(10)])
    assert [int(np.argmax(v)) for v in vectors] == list(range(10))
    assert model.embed([]).shape == (0, 1024)


def test_titan_wrong_dimension_is_permanent(client: Any, stub: Stubber) -> None:
    stub.add_response(
        "invoke_model",
        body({"embedding": [1.0] * 10}),
        invoke_params(
            "amazon.titan-embed-text-v2:0", {"inputText": "x", "dimensions": 1024, "normalize": True}
        ),
    )
    with pytest.raises(ModelRequestError, match="10 dimensions"):
        BedrockTitanEmbedding(client, concurrency=1).embed(["x"])


def test_cohere_batches_of_96_search_document(client: Any, stub: Stubber) -> None:
    texts = [f"text {i}" for i in range(100)]
    model = BedrockCohereEmbedding(client, "cohere.embed-english-v3")
    for batch in (texts[:96], texts[96:]):
        payload = {"texts": batch, "input_type": "search_document", "truncate": "END"}
        rows = [[float(int(t.split()[1]) + 1)] + [0.5] * 1023 for t in batch]
        stub.add_response(
            "invoke_model",
            body({"id": "x", "embeddings": rows, "texts": batch, "response_type": "embeddings_floats"}),
            invoke_params("cohere.embed-english-v3", payload),
        )
    vectors = model.embed(texts)
    assert vectors.shape == (100, 1024)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    # Row order preserved: first component grows with the text number.
    assert np.all(np.diff(vectors[:, 0]) > 0)


def test_cohere_v3_clips_to_2048_chars_and_reads_typed_response(client: Any, stub: Stubber) -> None:
    model = BedrockCohereEmbedding(client, "cohere.embed-multilingual-v3")
    assert model.max_input_chars == 2048
    payload = {"texts": ["z" * 2048], "input_type": "search_document", "truncate": "END"}
    stub.add_response(
        "invoke_model",
        body({"embeddings": {"float": [[1.0] * 1024]}, "response_type": "embeddings_by_type"}),
        invoke_params("cohere.embed-multilingual-v3", payload),
    )
    assert model.embed(["z" * 5000]).shape == (1, 1024)


def test_cohere_count_mismatch_is_an_error(client: Any, stub: Stubber) -> None:
    stub.add_response(
        "invoke_model",
        body({"embeddings": [[1.0] * 1024]}),
        {"modelId": ANY, "body": ANY, "contentType": ANY, "accept": ANY},
    )
    with pytest.raises(ModelRequestError):
        BedrockCohereEmbedding(client).embed(["a", "b"])


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ThrottlingException", 429, ModelThrottled),
        ("ServiceQuotaExceededException", 400, ModelThrottled),
        ("TooManyRequestsException", 429, ModelThrottled),
        ("ModelNotReadyException", 429, ModelUnavailable),
        ("InternalServerException", 500, ModelUnavailable),
        ("ServiceUnavailableException", 503, ModelUnavailable),
        ("ModelTimeoutException", 408, ModelUnavailable),
        ("AccessDeniedException", 403, ModelAuthError),
        ("ValidationException", 400, ModelRequestError),
        ("ResourceNotFoundException", 404, ModelRequestError),
    ],
)
def test_error_mapping(client: Any, stub: Stubber, code: str, status: int, expected: type[Exception]) -> None:
    stub.add_client_error(
        "invoke_model", service_error_code=code, service_message="boom", http_status_code=status
    )
    with pytest.raises(expected) as info:
        BedrockTitanEmbedding(client, concurrency=1).embed(["x"])
    assert code in str(info.value)
    if expected is ModelRequestError:
        assert not isinstance(info.value, ModelAuthError)
        assert isinstance(info.value, ValueError)


def test_throttle_retry_after_header_is_read(client: Any, stub: Stubber) -> None:
    stub.add_client_error(
        "invoke_model",
        service_error_code="ThrottlingException",
        http_status_code=429,
        response_meta={"HTTPHeaders": {"Retry-After": "3"}},
    )
    with pytest.raises(ModelThrottled) as info:
        BedrockTitanEmbedding(client, concurrency=1).embed(["x"])
    assert info.value.retry_after == 3.0


def test_connection_errors_are_unavailable() -> None:
    conn = map_bedrock_error(EndpointConnectionError(endpoint_url="https://bedrock"), "m")
    timeout = map_bedrock_error(ReadTimeoutError(endpoint_url="https://bedrock"), "m")
    assert isinstance(conn, ModelUnavailable) and isinstance(timeout, ModelUnavailable)


def test_throttled_then_success_through_backoff(client: Any, stub: Stubber) -> None:
    stub.add_client_error("invoke_model", service_error_code="ThrottlingException", http_status_code=429)
    stub.add_response(
        "invoke_model",
        body({"embedding": [1.0] * 1024}),
        invoke_params(
            "amazon.titan-embed-text-v2:0", {"inputText": "x", "dimensions": 1024, "normalize": True}
        ),
    )
    sleeps: list[float] = []
    model = BedrockTitanEmbedding(client, concurrency=1)
    vectors = call_with_backoff(lambda: model.embed(["x"]), sleep=sleeps.append, rng=lambda: 0.5)
    assert vectors.shape == (1, 1024)
    assert len(sleeps) == 1


def converse_response(text: str, stop: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop,
        "usage": {"inputTokens": 5, "outputTokens": 3, "totalTokens": 8},
        "metrics": {"latencyMs": 12},
    }


def test_chat_converse_request_shape(client: Any, stub: Stubber) -> None:
    expected = {
        "modelId": "amazon.nova-lite-v1:0",
        "system": [{"text": "You summarise."}],
        "messages": [
            {"role": "user", "content": [{"text": "Part one.\n\nPart two."}]},
            {"role": "assistant", "content": [{"text": "Ok."}]},
            {"role": "user", "content": [{"text": "Summarise."}]},
        ],
        "inferenceConfig": {"maxTokens": 100, "temperature": 0.1},
    }
    stub.add_response("converse", converse_response("A summary."), expected)
    model = BedrockChatModel(client, "amazon.nova-lite-v1:0")
    answer = model.chat(
        [
            {"role": "system", "content": "You summarise."},
            {"role": "user", "content": "Part one."},
            {"role": "user", "content": "Part two."},
            {"role": "assistant", "content": "Ok."},
            {"role": "user", "content": "Summarise."},
        ],
        temperature=0.1,
        max_tokens=100,
    )
    assert answer == "A summary."


def test_chat_empty_answer_is_reported(client: Any, stub: Stubber) -> None:
    stub.add_response("converse", converse_response("", stop="max_tokens"))
    with pytest.raises(ModelEmptyResponse, match="max_tokens"):
        BedrockChatModel(client, "m").chat([{"role": "user", "content": "hi"}])


def test_chat_throttled(client: Any, stub: Stubber) -> None:
    stub.add_client_error("converse", service_error_code="ThrottlingException", http_status_code=429)
    with pytest.raises(ModelThrottled):
        BedrockChatModel(client, "m").chat([{"role": "user", "content": "hi"}])


def test_vision_sends_image_block(client: Any, stub: Stubber) -> None:
    expected = {
        "modelId": "anthropic.claude-3-haiku-20240307-v1:0",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"image": {"format": "png", "source": {"bytes": PNG}}},
                    {"text": "Describe the image."},
                ],
            }
        ],
        "inferenceConfig": {"maxTokens": 256, "temperature": 0.2},
    }
    stub.add_response("converse", converse_response("A chart."), expected)
    model = BedrockVisionModel(client, "anthropic.claude-3-haiku-20240307-v1:0")
    assert model.describe(PNG, "Describe the image.", max_tokens=256) == "A chart."


def test_vision_rejects_unknown_image_format(client: Any) -> None:
    with pytest.raises(ModelRequestError):
        BedrockVisionModel(client, "m").describe(b"BM\x00\x00bitmap", "x")


def test_cohere_v4_sends_embedding_types_and_output_dimension(client: Any, stub: Stubber) -> None:
    model = BedrockCohereEmbedding(client, "cohere.embed-v4:0", dimensions=256)
    payload = {
        "texts": ["a"],
        "input_type": "search_document",
        "truncate": "END",
        "embedding_types": ["float"],
        "output_dimension": 256,
    }
    stub.add_response(
        "invoke_model",
        body({"embeddings": {"float": [[0.1] * 256]}}),
        invoke_params("cohere.embed-v4:0", payload),
    )
    assert model.embed(["a"]).shape == (1, 256)
    assert model.max_input_chars == 20_000


def test_titan_v1_has_no_dimension_params(client: Any, stub: Stubber) -> None:
    model = BedrockTitanEmbedding(client, "amazon.titan-embed-text-v1", concurrency=1)
    stub.add_response(
        "invoke_model",
        body({"embedding": [0.2] * 1536}),
        invoke_params("amazon.titan-embed-text-v1", {"inputText": "a"}),
    )
    assert model.embed(["a"]).shape == (1, 1536)


@pytest.mark.parametrize(
    ("status", "expected"), [(400, ModelRequestError), (429, ModelThrottled), (503, ModelUnavailable)]
)
def test_an_error_code_that_is_free_text_never_reaches_the_message(
    client: Any, stub: Stubber, status: int, expected: type[Exception]
) -> None:
    """botocore takes `Code` from whatever the endpoint sent (`__type`, `x-amzn-ErrorType`): it is kept only
    when it looks like a code, since the message reaches rows, spans and logs (found by an audit)."""
    stub.add_client_error(
        "invoke_model",
        service_error_code="Account 123456789012 key sk-live-SECRET rejected, pay at evil.example",
        http_status_code=status,
    )
    with pytest.raises(expected) as info:
        BedrockTitanEmbedding(client, concurrency=1).embed(["x"])
    assert "SECRET" not in str(info.value) and "evil" not in str(info.value)
    assert "SECRET" not in str(getattr(info.value, "provider_code", ""))


def test_a_stop_reason_that_is_free_text_never_reaches_the_message() -> None:
    from chalicelib.adapters.models.bedrock import _converse_text

    response = converse_response("", stop="key sk-live-SECRET rejected")
    with pytest.raises(ModelEmptyResponse) as info:
        _converse_text(response, "amazon.nova-lite-v1:0", "m")
    assert "SECRET" not in str(info.value) and info.value.provider_code == ""
