"""Settings for the in-memory set."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chalicelib.settings import Settings

if TYPE_CHECKING:
    pass


def memory_settings(**changes: Any) -> Settings:
    """Settings for in-memory runs: small size limits and embedding batches so limit and checkpoint tests
    stay cheap, no OCR or ASR probing, the hashing test model. The retry semantics (receives, backoff tries,
    deferrals, index write tries) are the production ones; waits are recorded, not slept."""
    base = Settings(
        prefix="mem",
        files_bucket="inbox",
        retrieval_engine="embedded",
        default_embedding_model="hashing/64",
        max_file_size=1024 * 1024,
        api_max_body=512 * 1024,
        manual_max_runes=20_000,
        embed_batch_size=4,
        ocr_provider="none",
        asr_provider="none",
    )
    return replace(base, **changes)


# ---------------------------------------------------------------- tags
