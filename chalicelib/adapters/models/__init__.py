"""Model adapters behind the ports' EmbeddingModel / ChatModel / VisionModel.

- local_onnx.MiniLmEmbedding: in-process all-MiniLM-L6-v2, int8 arithmetic (the default embedding model)
  or the shipped int8 file as it is; embed_pool.PooledMiniLm: the same in N single-threaded processes.
- hashing.HashingEmbedding: deterministic test double.
- bedrock: Titan v2 / Cohere embeddings, Converse chat and vision (boto3 client injected).
- openai_compat: OpenAI-compatible HTTP (vLLM, Ollama /v1, hosted APIs).
- registry.ModelRegistry: builds (and caches) adapters from a model id string.

Importing the package is cheap: numpy, onnxruntime, tokenizers, boto3 and requests load only when
an adapter module is used (HashingEmbedding / MiniLmEmbedding are resolved lazily below).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from chalicelib.adapters.models.registry import (
    MINILM_MODEL_ID,
    MINILM_QINT8_MODEL_ID,
    MINILM_QINT8_V2_MODEL_ID,
    MINILM_QINT8_V3_MODEL_ID,
    ModelRegistry,
    parse_model_id,
)

if TYPE_CHECKING:
    from chalicelib.adapters.models.hashing import HashingEmbedding
    from chalicelib.adapters.models.local_onnx import MiniLmEmbedding

_LAZY = {"HashingEmbedding": ".hashing", "MiniLmEmbedding": ".local_onnx"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MINILM_MODEL_ID",
    "MINILM_QINT8_MODEL_ID",
    "MINILM_QINT8_V2_MODEL_ID",
    "MINILM_QINT8_V3_MODEL_ID",
    "HashingEmbedding",
    "MiniLmEmbedding",
    "ModelRegistry",
    "parse_model_id",
]
