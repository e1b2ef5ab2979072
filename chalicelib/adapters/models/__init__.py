"""Model adapters behind the ports' EmbeddingModel / ChatModel / VisionModel.

- local_onnx.MiniLmEmbedding: in-process all-MiniLM-L6-v2 int8 (the default embedding model).
- hashing.HashingEmbedding: deterministic test double.
- bedrock: Titan v2 / Cohere embeddings, Converse chat and vision (boto3 client injected).
- openai_compat: OpenAI-compatible HTTP (vLLM, Ollama /v1, hosted APIs).
- registry: build_embedding_model / build_chat_model / build_vision_model from a model id string.
- retry.call_with_backoff: full-jitter backoff honouring ModelThrottled.retry_after.

Importing the package is cheap: numpy, onnxruntime, tokenizers, boto3 and requests load only when
an adapter module is used (HashingEmbedding / MiniLmEmbedding are resolved lazily below).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import ModelAuthError, ModelEmptyResponse, ModelRequestError
from .registry import (
    MINILM_MODEL_ID,
    build_chat_model,
    build_embedding_model,
    build_vision_model,
    parse_model_id,
)
from .retry import call_with_backoff

if TYPE_CHECKING:
    from .hashing import HashingEmbedding
    from .local_onnx import MiniLmEmbedding

_LAZY = {"HashingEmbedding": ".hashing", "MiniLmEmbedding": ".local_onnx"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MINILM_MODEL_ID",
    "HashingEmbedding",
    "MiniLmEmbedding",
    "ModelAuthError",
    "ModelEmptyResponse",
    "ModelRequestError",
    "build_chat_model",
    "build_embedding_model",
    "build_vision_model",
    "call_with_backoff",
    "parse_model_id",
]
