"""Settings from the environment: one frozen object built once per process."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return value if value not in (None, "") else default


def _int(name: str, default: int) -> int:
    return int(_env(name, str(default)))


@dataclass(frozen=True)
class Settings:
    prefix: str = "weknora"
    region: str = "us-east-1"
    #: "local" (a directory, the local default) or "s3"
    storage: str = "local"
    state_dir: str = ".weknora"
    files_bucket: str = "weknora-files"
    #: where presigned uploads land; the bucket notification sends these keys to the uploads queue
    upload_prefix: str = "uploads/"
    state_machine_arn: str = ""
    #: "embedded" (SQLite FTS5 + numpy, the local default) or "opensearch"
    retrieval_engine: str = "embedded"
    opensearch_url: str = ""
    default_embedding_model: str = "local/all-MiniLM-L6-v2-int8"
    #: SQS maxReceiveCount of every stage queue: a stage is tried at most this many times
    stage_max_receives: int = 4
    max_file_size: int = 50 * 1024 * 1024
    #: Lambda's 6 MB sync payload, less base64's third and the multipart framing
    api_max_body: int = 4_500_000
    presign_expires_seconds: int = 3600
    manual_max_runes: int = 200_000
    #: housekeeping: max(1 h, document timeout 2 h) + 10 min, as the specification sets it
    stale_after_seconds: int = 2 * 3600 + 600
    summary_stale_after_seconds: int = 3600
    embed_batch_size: int = 16
    #: in-Lambda tries of one embedding batch (backoff with full jitter, honouring Retry-After)
    embed_max_attempts: int = 6
    embed_backoff_base: float = 0.5
    embed_backoff_max: float = 20.0
    #: how often a throttled stage may be put back on its queue (with a delay) before tries count
    max_throttle_deferrals: int = 12
    #: longest delay of one deferral (SQS DelaySeconds caps at 900)
    max_defer_seconds: int = 900
    index_write_attempts: int = 5
    #: "auto" (Debian tesseract, else RapidOCR, when installed), "textract" (AWS) or "none"
    ocr_provider: str = "auto"
    #: "auto" (Whisper from PyPI wheels, when installed), "transcribe" (AWS) or "none"
    asr_provider: str = "auto"
    local_api_key: str = "local-dev-key"
    table_names: dict[str, str] = field(default_factory=dict)
    queue_names: dict[str, str] = field(default_factory=dict)

    def table(self, name: str) -> str:
        return self.table_names.get(name) or f"{self.prefix}-{name}"

    def queue(self, name: str) -> str:
        return self.queue_names.get(name) or f"{self.prefix}-{name}"


TABLES = ("tenants", "knowledge-bases", "knowledge", "dedupe", "chunks", "spans", "embedding-cache")
QUEUES = ("uploads", "docreader", "chunking", "embedding", "multimodal", "postprocess", "enrichment")


def load_settings() -> Settings:
    prefix = _env("WEKNORA_PREFIX", "weknora")
    return Settings(
        prefix=prefix,
        region=_env("AWS_DEFAULT_REGION", _env("AWS_REGION", "us-east-1")),
        storage=_env("WEKNORA_STORAGE", "local"),
        state_dir=_env("WEKNORA_STATE_DIR", ".weknora"),
        files_bucket=_env("WEKNORA_FILES_BUCKET", f"{prefix}-files"),
        state_machine_arn=_env("WEKNORA_STATE_MACHINE_ARN", ""),
        retrieval_engine=_env("WEKNORA_RETRIEVAL_ENGINE", "embedded"),
        opensearch_url=_env("OPENSEARCH_URL", ""),
        default_embedding_model=_env("WEKNORA_EMBEDDING_MODEL", "local/all-MiniLM-L6-v2-int8"),
        stage_max_receives=_int("WEKNORA_STAGE_MAX_RECEIVES", 4),
        max_file_size=_int("WEKNORA_MAX_FILE_SIZE", 50 * 1024 * 1024),
        api_max_body=_int("WEKNORA_API_MAX_BODY", 4_500_000),
        stale_after_seconds=_int("WEKNORA_STALE_AFTER_SECONDS", 2 * 3600 + 600),
        summary_stale_after_seconds=_int("WEKNORA_SUMMARY_STALE_AFTER_SECONDS", 3600),
        embed_batch_size=_int("WEKNORA_EMBED_BATCH_SIZE", 16),
        embed_max_attempts=_int("WEKNORA_EMBED_MAX_ATTEMPTS", 6),
        embed_backoff_base=float(_env("WEKNORA_EMBED_BACKOFF_BASE", "0.5")),
        embed_backoff_max=float(_env("WEKNORA_EMBED_BACKOFF_MAX", "20")),
        max_throttle_deferrals=_int("WEKNORA_MAX_THROTTLE_DEFERRALS", 12),
        max_defer_seconds=_int("WEKNORA_MAX_DEFER_SECONDS", 900),
        local_api_key=_env("WEKNORA_API_KEY", "local-dev-key"),
        ocr_provider=_env("WEKNORA_OCR_PROVIDER", "auto"),
        asr_provider=_env("WEKNORA_ASR_PROVIDER", "auto"),
        table_names={
            name: os.environ[f"WEKNORA_TABLE_{name.upper().replace('-', '_')}"]
            for name in TABLES
            if os.environ.get(f"WEKNORA_TABLE_{name.upper().replace('-', '_')}")
        },
        queue_names={
            name: os.environ[f"WEKNORA_QUEUE_{name.upper()}"]
            for name in QUEUES
            if os.environ.get(f"WEKNORA_QUEUE_{name.upper()}")
        },
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
