"""The input tokens Bedrock bills for embeddings reach the caller's meter: Titan's on every path (its pool
threads run in the caller's context) and Cohere's from the x-amzn-bedrock-input-token-count header."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from typing import Any

import boto3
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import Stubber

from chalicelib.adapters.models.bedrock import BedrockCohereEmbedding, BedrockTitanEmbedding
from chalicelib.domain import metering

TITAN = "amazon.titan-embed-text-v2:0"
COHERE = "cohere.embed-english-v3"


def streaming(payload: Any) -> StreamingBody:
    raw = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


class TitanClient:
    """Titan v2's answer: 7 tokens per text in the body (the Stubber is ordered, so threads get a fake)."""

    def invoke_model(self, **kwargs: Any) -> dict[str, Any]:
        return {"body": streaming({"embedding": [0.1] * 1024, "inputTextTokenCount": 7})}


def metered_embed(
    model: BedrockTitanEmbedding | BedrockCohereEmbedding, texts: Sequence[str]
) -> dict[str, float]:
    with metering.metering() as meter:
        model.embed(texts)
    return meter.snapshot()


def test_titan_records_the_tokens_of_one_text() -> None:
    assert metered_embed(BedrockTitanEmbedding(TitanClient(), TITAN), ["a"]) == {
        metering.token_counter("input", f"bedrock/{TITAN}"): 7.0
    }


def test_titan_records_the_tokens_of_every_text_embedded_on_its_pool() -> None:
    model = BedrockTitanEmbedding(TitanClient(), TITAN, concurrency=4)
    counts = metered_embed(model, ["a", "b", "c"])
    assert counts[metering.token_counter("input", f"bedrock/{TITAN}")] == 21.0


def test_titan_falls_back_to_the_header_when_the_body_has_no_count() -> None:
    class HeaderOnly:
        def invoke_model(self, **kwargs: Any) -> dict[str, Any]:
            headers = {"x-amzn-bedrock-input-token-count": "5"}
            return {
                "body": streaming({"embedding": [0.1] * 1024}),
                "ResponseMetadata": {"HTTPHeaders": headers},
            }

    counts = metered_embed(BedrockTitanEmbedding(HeaderOnly(), TITAN, concurrency=1), ["a", "b"])
    assert counts == {metering.token_counter("input", f"bedrock/{TITAN}"): 10.0}


def test_cohere_records_the_tokens_bedrock_reports_in_its_header() -> None:
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"total_max_attempts": 1}),
    )
    texts = [f"text {i}" for i in range(100)]  # two calls: 96 and 4 texts
    with Stubber(client) as stub:
        for batch, tokens in ((texts[:96], "192"), (texts[96:], "8")):
            stub.add_response(
                "invoke_model",
                {
                    "body": streaming(
                        {"id": "x", "embeddings": [[0.5] * 1024 for _ in batch], "texts": batch}
                    ),
                    "contentType": "application/json",
                    "ResponseMetadata": {"HTTPHeaders": {"x-amzn-bedrock-input-token-count": tokens}},
                },
            )
        counts = metered_embed(BedrockCohereEmbedding(client, COHERE), texts)
        stub.assert_no_pending_responses()
    assert counts == {metering.token_counter("input", f"bedrock/{COHERE}"): 200.0}
