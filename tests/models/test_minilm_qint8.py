"""The int8-arithmetic MiniLM: quantised once with ONNX Runtime's quantizer, deterministic, its own model
space; and the pool of single-threaded worker processes the local runtime runs it in."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from chalicelib.adapters.models import local_onnx, minilm_qint8
from chalicelib.adapters.models.embed_pool import PooledMiniLm
from chalicelib.adapters.models.local_onnx import (
    MINILM_MODEL_ID,
    MINILM_QINT8_MODEL_ID,
    MINILM_QINT8_V2_MODEL_ID,
    MINILM_QINT8_V3_MODEL_ID,
    MiniLmEmbedding,
    ModelIntegrityError,
)
from chalicelib.adapters.models.registry import ModelRegistry
from chalicelib.ports import IndexSpace
from chalicelib.settings import load_settings


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def quantized() -> Path:
    """The default space's file (7-bit weights)."""
    return local_onnx.build_qint8_model(seven_bit=True)


def test_quantized_graph_does_integer_arithmetic(quantized: Path) -> None:
    import onnx

    ops = Counter(node.op_type for node in onnx.load(str(quantized)).graph.node)
    shipped = Counter(node.op_type for node in onnx.load(str(local_onnx._default_model()[0])).graph.node)
    assert shipped["MatMulInteger"] == 0 and shipped["MatMul"] == 48  # int8 storage, fp32 arithmetic
    # Every projection (Q, K, V, attention output, the two feed-forward layers; 6 per layer x 6 layers) is
    # an integer MatMul on dynamically quantised activations; only attention's activation x activation
    # products (Q.K^T and scores.V, 2 per layer) stay fp32.
    assert ops["MatMulInteger"] == 36
    assert ops["DynamicQuantizeLinear"] > 0
    assert ops["MatMul"] == 12
    assert ops["IsNaN"] == 0  # the softmax NaN guards are gone (minilm_qint8.drop_nan_guards)


def test_the_default_file_has_7_bit_weights_and_the_older_8_bit(quantized: Path) -> None:
    """7-bit weights (symmetric, within ±64) keep each uint8 x int8 product pair inside int16, so CPUs without VNNI sum them
    exactly (test_local_onnx checks the sums themselves)."""
    import onnx
    from onnx import numpy_helper

    def weight_range(path: Path) -> tuple[int, int]:
        model = onnx.load(str(path))
        weights = {node.input[1] for node in model.graph.node if node.op_type == "MatMulInteger"}
        values = [numpy_helper.to_array(i) for i in model.graph.initializer if i.name in weights]
        assert len(values) == 36 and all(v.dtype == np.int8 for v in values)
        return min(int(v.min()) for v in values), max(int(v.max()) for v in values)

    low, high = weight_range(quantized)
    assert low >= -64 and high <= 64  # 255 x 64 x 2 = 32,640: a pair's sum fits int16
    low, high = weight_range(local_onnx.build_qint8_model())
    assert low < -64 or high > 64


def test_dropping_the_nan_guards_keeps_every_bit(
    quantized: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard only fires for a query row with every key masked; [CLS] is never masked, so the graph
    without guards gives the very same vectors as the one with them, short text or 256 tokens."""
    source, _ = local_onnx._default_model()
    monkeypatch.setattr(minilm_qint8, "drop_nan_guards", lambda model: 0)
    guarded = minilm_qint8.quantize(source, tmp_path / "guarded.onnx", seven_bit=True)
    texts = ["a", "How do I reset my password?", "the harbour ferry timetable " * 80, "表格 数据 " * 30]
    lean = MiniLmEmbedding(model_path=quantized).embed(texts)
    assert np.array_equal(lean, MiniLmEmbedding(model_path=guarded).embed(texts))


def test_quantisation_is_deterministic(quantized: Path, tmp_path: Path) -> None:
    """A fresh build from the same file with the same toolchain gives the very same bytes as the cached one
    (built earlier, maybe by another process): every machine and every worker runs one model."""
    source, _ = local_onnx._default_model()
    again = minilm_qint8.quantize(source, tmp_path / "again.onnx", seven_bit=True)
    assert _sha256(again) == _sha256(quantized)


def test_cached_build_is_reused(quantized: Path) -> None:
    before = quantized.stat().st_mtime_ns
    assert local_onnx.build_qint8_model(seven_bit=True) == quantized
    assert quantized.stat().st_mtime_ns == before
    assert quantized.name.startswith("all-MiniLM-L6-v2-qint8-8199be6f699a395f-")


def test_cache_file_names_the_source_recipe_and_toolchain() -> None:
    name = minilm_qint8.quantized_file_name("ab" * 32)
    assert "abababababababab" in name and minilm_qint8.RECIPE in name and "-ort" in name and "-onnx" in name
    assert name != minilm_qint8.quantized_file_name("cd" * 32)
    seven = minilm_qint8.quantized_file_name("ab" * 32, seven_bit=True)
    assert minilm_qint8.RECIPE_7BIT in seven and seven != name


def test_a_tampered_source_is_never_quantised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bogus = tmp_path / "model.onnx"
    bogus.write_bytes(b"not the model")
    monkeypatch.setattr(local_onnx, "_default_model", lambda: (bogus, "0" * 64))
    with pytest.raises(ModelIntegrityError):
        local_onnx.build_qint8_model(str(tmp_path / "cache"))
    assert not any((tmp_path / "cache").rglob("*.onnx"))


def test_model_space_differs_from_the_shipped_file() -> None:
    qint8 = MiniLmEmbedding()
    shipped = MiniLmEmbedding(model_id=MINILM_MODEL_ID)
    fused = MiniLmEmbedding(model_id=MINILM_QINT8_MODEL_ID)
    unfused = MiniLmEmbedding(model_id=MINILM_QINT8_V2_MODEL_ID)
    assert qint8.model_id == MINILM_QINT8_V3_MODEL_ID != shipped.model_id
    assert IndexSpace.of(qint8).name == "weknora-local-all-minilm-l6-v2-qint8-v3-384"
    assert IndexSpace.of(unfused).name == "weknora-local-all-minilm-l6-v2-qint8-v2-384"
    assert IndexSpace.of(fused).name == "weknora-local-all-minilm-l6-v2-qint8-384"
    assert len({IndexSpace.of(m).name for m in (qint8, unfused, fused, shipped)}) == 4
    # The default knowledge base ("") gets the new space; a knowledge base naming an old id keeps it.
    registry = ModelRegistry()
    assert registry.embedding("").model_id == MINILM_QINT8_V3_MODEL_ID
    for old in (MINILM_QINT8_V2_MODEL_ID, MINILM_QINT8_MODEL_ID, MINILM_MODEL_ID):
        assert registry.embedding(old).model_id == old
    assert load_settings({}).default_embedding_model == MINILM_QINT8_V3_MODEL_ID
    offered = load_settings({}).models.catalog
    assert {
        MINILM_QINT8_V3_MODEL_ID,
        MINILM_QINT8_V2_MODEL_ID,
        MINILM_QINT8_MODEL_ID,
        MINILM_MODEL_ID,
    } <= set(offered.entries["embedding"])


def test_close_to_the_shipped_vectors() -> None:
    texts = [
        "The invoice is due on Friday.",
        "How do I reset my password?",
        "Alpine lakes freeze in winter and thaw in spring.",
        "pip install the package, then run the tests with pytest -x.",
    ]
    new = MiniLmEmbedding().embed(texts)
    old = MiniLmEmbedding(model_id=MINILM_MODEL_ID).embed(texts)
    assert (new * old).sum(axis=1).min() > 0.98


def test_registry_builds_a_pool_when_workers_are_configured() -> None:
    settings = load_settings({"WEKNORA_EMBED_WORKERS": "2"}).models
    pooled = ModelRegistry(settings).embedding("")
    assert isinstance(pooled, PooledMiniLm)
    assert pooled.workers == 2 and pooled.model_id == MINILM_QINT8_V3_MODEL_ID
    assert isinstance(ModelRegistry(load_settings({}).models).embedding(""), MiniLmEmbedding)


def test_worker_processes_give_the_in_process_vectors_in_order() -> None:
    texts = [f"text {i} about subject {i % 5}" + " more words" * (i % 7) for i in range(23)]
    expected = MiniLmEmbedding().embed(texts)
    pool = PooledMiniLm(MINILM_QINT8_V3_MODEL_ID, workers=2)
    try:
        pool.warm_up()
        vectors = pool.embed(texts)
        assert vectors.shape == (23, 384) and vectors.dtype == np.float32
        assert (vectors * expected).sum(axis=1).min() > 0.9999
        assert pool.embed([]).shape == (0, 384)
        assert pool.embed(texts[:1]).shape == (1, 384)  # too few to split: one worker
        assert pool.token_count("Hello world") == 4
        long_text = "the harbour ferry timetable " * 200
        assert pool.windows(long_text) == MiniLmEmbedding().windows(long_text)  # the stage pools these
        assert len(pool.windows(long_text)) > 1
        with pytest.raises(TypeError):
            pool.embed("a string")  # type: ignore[arg-type]
    finally:
        pool.close()


def test_local_runtime_runs_one_embedding_worker_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    from chalicelib.local import runtime

    monkeypatch.delenv("WEKNORA_EMBED_WORKERS", raising=False)
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 8)
    assert runtime.default_embed_workers() == 2
    monkeypatch.setattr(runtime.os, "cpu_count", lambda: 1)
    assert runtime.default_embed_workers() == 1
    monkeypatch.setenv("WEKNORA_EMBED_WORKERS", "3")
    assert runtime.default_embed_workers() == 3
    with pytest.raises(ValueError):
        runtime.LocalRuntime(lambda: None, "infra/template.json", embed_workers=0)
