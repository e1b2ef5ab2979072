"""Named storage backends (WEKNORA_STORAGE_BACKENDS): one S3 client per backend, with the backend's own
endpoint, region, addressing style and credentials, the credentials read from Secrets Manager or SSM.

The endpoints are the operator's configuration (checked at startup by settings.StorageBackendConfig),
never a tenant's input: a tenant only picks a backend id the operator configured.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from chalicelib.adapters.storage import BackendFileStore, DummyFileStore, S3FileStore
from chalicelib.ports import FileStore, SecretSource
from chalicelib.settings import StorageBackendConfig


class StorageCredentialsMissing(RuntimeError):
    """A backend's credentials are not where its configuration says (the operator's to fix; a stage that
    meets it is retried and ends in the dead-letter queue, as for any unavailable dependency)."""


class SecretsManagerSecret:
    """One Secrets Manager secret's string value."""

    def __init__(self, secretsmanager: Any, secret_id: str) -> None:
        self.client = secretsmanager
        self.secret_id = secret_id

    def read(self) -> str | None:
        try:
            answer = self.client.get_secret_value(SecretId=self.secret_id)
        except self.client.exceptions.ResourceNotFoundException:
            return None
        value = answer.get("SecretString")
        return str(value) if value is not None else None


def credentials_from(source: SecretSource, where: str) -> dict[str, str]:
    """`{"access_key_id", "secret_access_key"[, "session_token"]}` from a secret's JSON value."""
    raw = source.read()
    if raw is None:
        raise StorageCredentialsMissing(f"the storage credentials {where!r} do not exist")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise StorageCredentialsMissing(f"the storage credentials {where!r} are not a JSON object") from error
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) and value[k] for k in ("access_key_id", "secret_access_key")
    ):
        raise StorageCredentialsMissing(
            f"the storage credentials {where!r} must hold access_key_id and secret_access_key"
        )
    keys = {"access_key_id": value["access_key_id"], "secret_access_key": value["secret_access_key"]}
    if isinstance(value.get("session_token"), str) and value["session_token"]:
        keys["session_token"] = value["session_token"]
    return keys


#: how long a storage client waits for a connection, and then for an answer's next bytes (botocore waits 60 s
#: for each by default): with STORAGE_MAX_ATTEMPTS tries, a backend endpoint that is down fails a call in
#: under 20 s and one that takes the connection and never answers in under a minute, instead of holding the
#: function for minutes (a body's bytes keep flowing: a large object is not cut off)
STORAGE_CONNECT_TIMEOUT_SECONDS = 5
STORAGE_READ_TIMEOUT_SECONDS = 15
#: tries of one call, the first included (throttling, a 5xx, a timeout), in botocore's standard retry mode;
#: a stage's own retries (the queue) come on top
STORAGE_MAX_ATTEMPTS = 3


def storage_client_config(**more: Any) -> Any:
    """The one rule for the storage clients' timeouts, retries and signatures (a botocore Config), with
    `more` options (the addressing style, a pool size) merged in. Signature V4 always: botocore presigns S3
    links with V2 in most regions otherwise, which buckets made since June 2020 refuse, and which signs the
    Content-Type a browser adds to an upload (403 SignatureDoesNotMatch)."""
    from botocore.config import Config

    return Config(
        signature_version="s3v4",
        connect_timeout=STORAGE_CONNECT_TIMEOUT_SECONDS,
        read_timeout=STORAGE_READ_TIMEOUT_SECONDS,
        retries={"mode": "standard", "total_max_attempts": STORAGE_MAX_ATTEMPTS},
        **more,
    )


def s3_compatible_client(
    config: StorageBackendConfig, region: str, credentials: dict[str, str] | None
) -> Any:
    """A client of its own for one backend: endpoint, region, addressing style and keys are the
    backend's (None: the function's own credentials, an `s3` backend without a secret); its timeouts and
    retries are `storage_client_config`'s."""
    import boto3

    style: Literal["path", "virtual"] = "path" if config.resolved_path_style() else "virtual"
    keys: dict[str, Any] = {}
    if credentials is not None:
        keys = {
            "aws_access_key_id": credentials["access_key_id"],
            "aws_secret_access_key": credentials["secret_access_key"],
            "aws_session_token": credentials.get("session_token"),
        }
    return boto3.session.Session().client(
        "s3",
        region_name=config.region_or(region),
        endpoint_url=config.resolved_endpoint() or None,
        config=storage_client_config(s3={"addressing_style": style}),
        **keys,
    )


def backend_store(
    config: StorageBackendConfig, region: str, secret_source: Callable[[str, str], SecretSource]
) -> BackendFileStore:
    """A named backend's store, its client built on first use. `secret_source(kind, name)` gives the
    secret `credentials` names (kind "secretsmanager" or "ssm")."""

    def build() -> FileStore:
        if config.keeps_nothing:
            return DummyFileStore(config.id)
        credentials = None
        if config.credentials:
            kind, _, name = config.credentials.partition(":")
            credentials = credentials_from(secret_source(kind, name), config.credentials)
        return S3FileStore(s3_compatible_client(config, region, credentials), config.bucket)

    return BackendFileStore(config.id, build)
