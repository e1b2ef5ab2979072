"""The console's connect-src names where every configured storage backend's presigned links point (the page
reads a document's parsed Markdown there): each link botocore signs for a backend, virtual-host or path
style, custom endpoint or AWS, is allowed; an origin that could break out of the directive never is."""

from __future__ import annotations

from dataclasses import replace
from urllib.parse import urlsplit

import pytest

from chalicelib import console
from chalicelib.adapters.storage_backends import s3_compatible_client
from chalicelib.api.console_routes import _connect_origins
from chalicelib.settings import Settings, StorageBackendConfig, get_settings

KEYS = {"access_key_id": "AKEXAMPLE", "secret_access_key": "secret"}
BACKENDS = (
    StorageBackendConfig(
        id="tc", provider="cos", bucket="docs-1250000000", region="ap-guangzhou", credentials="ssm:/p/tc"
    ),
    StorageBackendConfig(
        id="ali", provider="oss", bucket="kb-docs", region="cn-hangzhou", credentials="ssm:/p/ali"
    ),
    StorageBackendConfig(
        id="lab",
        provider="minio",
        bucket="docs",
        endpoint="http://minio.internal:9000",
        credentials="ssm:/p/lab",
    ),
    StorageBackendConfig(id="aws", provider="s3", bucket="other-bucket", region="eu-west-1"),
    StorageBackendConfig(id="void", provider="dummy"),
)


def _connect_src(settings: Settings) -> list[str]:
    policy = console.security_headers(_connect_origins(settings))["Content-Security-Policy"]
    directive = next(p.strip() for p in policy.split(";") if p.strip().startswith("connect-src"))
    return directive.split()[1:]


@pytest.mark.parametrize("endpoint_url", ["", "http://127.0.0.1:5001"])
def test_every_backends_signed_links_are_allowed(endpoint_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):  # a local moto server's, when one ran before
        monkeypatch.delenv(variable, raising=False)
    settings = replace(get_settings(), storage_backends=BACKENDS, aws_endpoint_url=endpoint_url)
    allowed = _connect_src(settings)
    for backend in BACKENDS[:-1]:
        client = s3_compatible_client(backend, settings.region, KEYS)
        link = urlsplit(
            client.generate_presigned_url(
                "get_object", Params={"Bucket": backend.bucket, "Key": "t/k/parsed.md"}
            )
        )
        assert f"{link.scheme}://{link.netloc}" in allowed, (backend.id, link.netloc, allowed)
    assert len(allowed) == len(set(allowed))


def test_an_origin_that_could_end_the_directive_is_left_out() -> None:
    policy = console.security_headers(
        [
            "https://ok.example.com",
            "https://x.example.com; script-src *",
            "*",
            "https://a b",
            "http://[::1]:9000",
        ]
    )["Content-Security-Policy"]
    assert "connect-src 'self' https://ok.example.com http://[::1]:9000; frame-ancestors" in policy
