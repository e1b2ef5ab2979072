"""HashingEmbedding (test double) and the model-id registry."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chalicelib.adapters.models import registry
from chalicelib.adapters.models.bedrock import (
    BedrockChatModel,
    BedrockCohereEmbedding,
    BedrockTitanEmbedding,
    BedrockVisionModel,
)
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.adapters.models.local_onnx import MiniLmEmbedding
from chalicelib.adapters.models.openai_compat import OpenAIChatModel, OpenAIEmbedding, OpenAIVisionModel
from chalicelib.adapters.models.registry import (
    ModelRegistry,
    parse_model_id,
)
from chalicelib.settings import load_settings

AWS_ENV = {"AWS_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}


def test_hashing_shape_norm_determinism() -> None:
    model = HashingEmbedding(64)
    vectors = model.embed(["alpha beta gamma", "", "alpha beta gamma", "!!!"])
    assert vectors.shape == (4, 64)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    np.testing.assert_array_equal(HashingEmbedding(64).embed(["alpha beta gamma"])[0], vectors[0])
    assert model.calls == [4]
    assert model.model_id == "hashing/64"


def test_hashing_shared_words_score_higher() -> None:
    a, b, c = HashingEmbedding(384).embed(
        ["the invoice total is due friday", "invoice total due on friday", "volcano eruption ash cloud"]
    )
    assert float(a @ b) > float(a @ c) + 0.3


def test_parse_model_id() -> None:
    spec = parse_model_id("openai/BAAI/bge-m3@http://vllm:8000/v1/#dim=1024&batch=32")
    assert (spec.provider, spec.model, spec.base_url) == ("openai", "BAAI/bge-m3", "http://vllm:8000/v1")
    assert dict(spec.params) == {"dim": "1024", "batch": "32"}
    spec = parse_model_id("openai/llama3.2:3b@https://user@host.example/v1")
    assert (spec.model, spec.base_url) == ("llama3.2:3b", "https://user@host.example/v1")
    spec = parse_model_id("bedrock/us.anthropic.claude-3-5-haiku-20241022-v1:0#region=us-west-2")
    assert (spec.provider, spec.model, spec.base_url) == (
        "bedrock",
        "us.anthropic.claude-3-5-haiku-20241022-v1:0",
        "",
    )
    assert spec.params["region"] == "us-west-2"
    assert parse_model_id("").provider == "local"
    for bad in ("nomodel", "/x", "openai/", "openai/m#novalue"):
        with pytest.raises(ValueError):
            parse_model_id(bad)


def _registry(env: dict[str, str]) -> ModelRegistry:
    return ModelRegistry(load_settings(env).models)


def test_build_local_and_hashing() -> None:
    default = ModelRegistry().embedding("")
    assert isinstance(default, MiniLmEmbedding)
    assert default.model_id == "local/all-MiniLM-L6-v2-qint8-v3"
    fused = ModelRegistry().embedding("local/all-MiniLM-L6-v2-qint8")
    assert isinstance(fused, MiniLmEmbedding) and fused.model_id == "local/all-MiniLM-L6-v2-qint8"
    shipped = ModelRegistry().embedding("local/all-MiniLM-L6-v2-int8")
    assert isinstance(shipped, MiniLmEmbedding)
    assert shipped.model_id == "local/all-MiniLM-L6-v2-int8"
    hashing = ModelRegistry().embedding("hashing/128")
    assert isinstance(hashing, HashingEmbedding)
    assert hashing.dimensions == 128
    for bad in ("local/other-model", "hashing/abc", "nope/x"):
        with pytest.raises(ValueError):
            ModelRegistry().embedding(bad)


def test_a_registry_caches_its_builds() -> None:
    models = ModelRegistry()
    assert models.embedding("hashing/32") is models.embedding("hashing/32")
    assert ModelRegistry().embedding("hashing/32") is not ModelRegistry().embedding("hashing/32")


def test_build_bedrock() -> None:
    titan = _registry(AWS_ENV).embedding("bedrock/amazon.titan-embed-text-v2:0#dimensions=512")
    assert isinstance(titan, BedrockTitanEmbedding)
    assert (titan.dimensions, titan.model_id) == (512, "bedrock/amazon.titan-embed-text-v2:0#dimensions=512")
    assert titan.client.meta.region_name == "eu-west-1"
    cohere = _registry(AWS_ENV).embedding("bedrock/cohere.embed-multilingual-v3#region=us-east-2")
    assert isinstance(cohere, BedrockCohereEmbedding)
    assert cohere.dimensions == 1024
    assert cohere.client.meta.region_name == "us-east-2"
    with pytest.raises(ValueError):
        _registry(AWS_ENV).embedding("bedrock/anthropic.claude-v2")
    with pytest.raises(ValueError):
        _registry(AWS_ENV).embedding("bedrock/amazon.titan-embed-text-v2:0#dimensions=300")
    assert isinstance(_registry(AWS_ENV).chat("bedrock/amazon.nova-lite-v1:0"), BedrockChatModel)
    assert isinstance(_registry(AWS_ENV).vision("bedrock/amazon.nova-lite-v1:0"), BedrockVisionModel)


def test_build_openai_and_key_resolution() -> None:
    env = {
        "OPENAI_API_KEY": "sk-default",
        "OPENAI_BASE_URL": "https://gateway.example/v1",
        "WEKNORA_MODEL_API_KEYS": json.dumps({"http://vllm:8000/v1/": "vllm-key"}),
    }
    default = _registry(env).embedding("openai/text-embedding-3-small")
    assert isinstance(default, OpenAIEmbedding)
    assert default._client.base_url == "https://gateway.example/v1"
    assert default._client.api_key == "sk-default"
    assert default.dimensions == 1536  # from the table, no probe call
    vllm = _registry(env).embedding("openai/BAAI/bge-m3@http://vllm:8000/v1#batch=8")
    assert isinstance(vllm, OpenAIEmbedding)
    assert (vllm._client.api_key, vllm.batch_size, vllm.dimensions) == ("vllm-key", 8, 1024)
    # The default key is never sent to an explicit, different endpoint.
    other = _registry(env).embedding("openai/nomic-embed-text@http://localhost:11434/v1")
    assert isinstance(other, OpenAIEmbedding)
    assert other._client.api_key is None
    assert other.model_id == "openai/nomic-embed-text@http://localhost:11434/v1"
    chat = _registry(env).chat("openai/gpt-5-mini#max_tokens_field=max_completion_tokens&timeout=30")
    assert isinstance(chat, OpenAIChatModel)
    assert chat.max_tokens_field == "max_completion_tokens"
    assert chat._client.timeout == 30.0
    assert isinstance(_registry(env).vision("openai/qwen2.5-vl@http://vllm:8000/v1"), OpenAIVisionModel)
    assert ModelRegistry().embedding("openai/x@http://h/v1").model_id == "openai/x@http://h/v1"


def test_empty_chat_and_vision_ids_mean_not_configured() -> None:
    assert ModelRegistry().chat("") is None
    assert ModelRegistry().vision("  ") is None
    with pytest.raises(ValueError):
        ModelRegistry().chat("local/all-MiniLM-L6-v2-int8")
    with pytest.raises(ValueError):
        ModelRegistry().vision("hashing/3")


def test_registry_constant_matches_adapter() -> None:
    from chalicelib.adapters.models import local_onnx

    assert registry.MINILM_MODEL_ID == local_onnx.MINILM_MODEL_ID
    assert registry.MINILM_QINT8_MODEL_ID == local_onnx.MINILM_QINT8_MODEL_ID


def test_package_import_is_light() -> None:
    # The API function may import the registry (e.g. to validate ids): keep heavy modules off that path.
    import subprocess
    import sys

    code = (
        "import sys, chalicelib.adapters.models as m; m.parse_model_id('openai/x@http://h/v1');"
        "print(sorted(k for k in ('numpy','boto3','botocore','requests','onnxruntime','tokenizers')"
        " if k in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
