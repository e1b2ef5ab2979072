"""Named storage backends: the S3-compatible providers' presets and the multi-backend URL scheme.

A knowledge base may be bound to a backend the operator configured (WEKNORA_STORAGE_BACKENDS); its
documents' objects then live there, addressed `storage://<backend id>/<key>` (the specification's
backend-scoped path, with the object key as the inner part: the bucket is the backend's configuration).
URLs without that prefix (`local://`, `s3://`) belong to the default backend, as they always did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

STORAGE_SCHEME = "storage://"
#: a backend id: short, URL- and key-safe (it is the first path segment of every URL on the backend)
BACKEND_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
#: a region as the providers spell them (`ap-guangzhou`, `cn-hangzhou`, `cn-north-4`, `us-east-1`)
REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


@dataclass(frozen=True)
class ProviderPreset:
    """What one provider's S3-compatible API needs: the endpoint a region maps to (`{region}` in the
    pattern; "" = the SDK's own resolution, AWS only) and whether buckets go in the path or the host."""

    name: str
    endpoint_pattern: str
    path_style: bool
    #: MinIO has no public endpoint: the operator must name one
    needs_endpoint: bool = False
    #: a test backend that keeps nothing (no bucket, no credentials)
    keeps_nothing: bool = False


#: the specification's providers (WeKnora internal/application/service/file): the public S3-compatible
#: endpoints as each provider documents them. Tencent COS, Alibaba OSS, Volcano TOS, Huawei OBS and
#: Kingsoft KS3 address buckets virtual-host style (OSS and TOS refuse path style); MinIO path style.
PRESETS: dict[str, ProviderPreset] = {
    preset.name: preset
    for preset in (
        ProviderPreset("cos", "https://cos.{region}.myqcloud.com", path_style=False),
        ProviderPreset("oss", "https://oss-{region}.aliyuncs.com", path_style=False),
        ProviderPreset("tos", "https://tos-s3-{region}.volces.com", path_style=False),
        ProviderPreset("obs", "https://obs.{region}.myhuaweicloud.com", path_style=False),
        ProviderPreset("ks3", "https://ks3-{region}.ksyuncs.com", path_style=False),
        ProviderPreset("minio", "", path_style=True, needs_endpoint=True),
        ProviderPreset("s3", "", path_style=False),
        ProviderPreset("dummy", "", path_style=False, keeps_nothing=True),
    )
}


def default_endpoint(provider: str, region: str) -> str:
    """The provider's public endpoint for `region` ("" where the SDK resolves it, or none exists)."""
    preset = PRESETS[provider]
    return preset.endpoint_pattern.format(region=region) if preset.endpoint_pattern else ""


def storage_url(backend_id: str, key: str) -> str:
    return f"{STORAGE_SCHEME}{backend_id}/{key}"


def backend_of(url: str) -> str:
    """The backend id a URL names; "" for the default backend's URLs (`local://`, `s3://`, …)."""
    if not url.startswith(STORAGE_SCHEME):
        return ""
    backend_id, slash, _ = url[len(STORAGE_SCHEME) :].partition("/")
    if not slash or not backend_id:
        raise ValueError(f"not a storage://<backend>/<key> URL: {url!r}")
    return backend_id


def key_in_backend(url: str, backend_id: str) -> str:
    """The object key of a `storage://<backend_id>/…` URL; another backend's URL is refused."""
    prefix = storage_url(backend_id, "")
    if not url.startswith(prefix):
        raise ValueError(f"not an object of storage backend {backend_id!r}: {url!r}")
    return url[len(prefix) :]
