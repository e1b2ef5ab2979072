"""Each S3-compatible preset against an endpoint of its own: one moto server per backend (a child process
each, so no two share a bucket), the backend's keys served from Secrets Manager or SSM on the stack's moto.

What is proved per preset: the object saved through a backend is in that server's bucket and in no other's
(every server has a bucket of the same name), the client signs with that backend's keys and region, and it
addresses the bucket as the preset says (virtual host for COS, OSS, TOS, OBS, KS3 and S3; path for MinIO).
Virtual-host requests go to `<bucket>.localhost:<port>`: the test resolves `*.localhost` to 127.0.0.1."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, S3FileStore
from chalicelib.adapters.storage_backends import StorageCredentialsMissing
from chalicelib.bootstrap import build_storage
from chalicelib.domain.storage_backends import PRESETS
from chalicelib.local.moto_server import MotoServer, shared_moto_server
from chalicelib.settings import load_settings

BUCKET = "docs"
#: preset -> (region, where its keys are kept)
CASES = {
    "cos": ("ap-guangzhou", "secretsmanager"),
    "oss": ("cn-hangzhou", "ssm"),
    "tos": ("cn-beijing", "secretsmanager"),
    "obs": ("cn-north-4", "ssm"),
    "ks3": ("cn-beijing", "secretsmanager"),
    "minio": ("us-east-1", "ssm"),
    "s3": ("eu-west-1", "secretsmanager"),
}


@pytest.fixture(scope="module")
def endpoints() -> Iterator[dict[str, MotoServer]]:
    """A moto server per preset, started side by side (each imports moto: seconds of CPU)."""
    shared_moto_server()  # the stack's (its secrets), and the test keys every client here signs with
    servers = {name: MotoServer(port=0, separate_process=True) for name in CASES}
    with ThreadPoolExecutor(max_workers=len(servers)) as pool:
        list(pool.map(lambda server: server.start(point_sdk=False), servers.values()))
    try:
        for name, server in servers.items():
            region = CASES[name][0]
            s3 = boto3.client("s3", endpoint_url=server.url, region_name=region)
            if region == "us-east-1":
                s3.create_bucket(Bucket=BUCKET)
            else:
                s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": region})
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture
def subdomains_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    """`<bucket>.localhost` is 127.0.0.1 (as a virtual-host endpoint's DNS name would be the provider's)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".localhost"):
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def configured(endpoints: dict[str, MotoServer]) -> Iterator[tuple[Any, dict[str, dict[str, str]]]]:
    """The stack's moto holds each backend's keys; the settings name where, never the keys themselves."""
    stack = shared_moto_server()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    secrets, ssm = boto3.client("secretsmanager"), boto3.client("ssm")
    config: dict[str, Any] = {}
    keys: dict[str, dict[str, str]] = {}
    for name, (region, kept_in) in CASES.items():
        keys[name] = {"access_key_id": f"AK{name.upper()}{prefix}", "secret_access_key": f"secret-{name}"}
        where = f"{prefix}/storage/{name}"
        if kept_in == "secretsmanager":
            secrets.create_secret(Name=where, SecretString=json.dumps(keys[name]))
            credentials = f"secretsmanager:{where}"
        else:
            ssm.put_parameter(Name=f"/{where}", Value=json.dumps(keys[name]), Type="SecureString")
            credentials = f"ssm:/{where}"
        config[f"b-{name}"] = {
            "provider": name,
            "bucket": BUCKET,
            "region": region,
            # the providers' real endpoints are not reachable here: the operator's override points at moto
            "endpoint": f"http://localhost:{endpoints[name].port}",
            "credentials": credentials,
        }
    settings = load_settings(
        {
            "WEKNORA_STORAGE_BACKENDS": json.dumps(config),
            "AWS_ENDPOINT_URL": stack.url,
            "AWS_DEFAULT_REGION": "us-east-1",
        }
    )
    yield settings, keys


def _bucket_keys(server: MotoServer, region: str) -> list[str]:
    s3 = boto3.client("s3", endpoint_url=server.url, region_name=region)
    return sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", []))


@pytest.mark.usefixtures("subdomains_resolve")
def test_each_preset_writes_through_its_own_client_to_its_own_endpoint(
    endpoints: dict[str, MotoServer], configured: tuple[Any, dict[str, dict[str, str]]]
) -> None:
    settings, keys = configured
    storage = build_storage(settings, MemoryFileStore("files"))
    assert storage.backend_ids() == sorted(f"b-{name}" for name in CASES)
    clients = set()
    for name, (region, _kept_in) in CASES.items():
        backend = storage.backend(f"b-{name}")
        assert isinstance(backend, BackendFileStore)
        key = f"tenant/{name}/source.md"
        url = backend.save(key, f"kept on {name}".encode(), "text/markdown")
        assert url == f"storage://b-{name}/{key}"
        inner = backend.inner
        assert isinstance(inner, S3FileStore)
        client = inner.client
        clients.add(id(client))
        sent: list[Any] = []
        client.meta.events.register("before-send.s3", lambda request, sent=sent, **_: sent.append(request))
        assert storage.read(url) == f"kept on {name}".encode()  # routed by the URL alone
        assert storage.exists(url) and storage.size(url) == len(f"kept on {name}")
        assert len(sent) == 3  # GetObject, HeadObject twice
        port = endpoints[name].port
        for request in sent:
            if PRESETS[name].path_style:
                assert request.url == f"http://localhost:{port}/{BUCKET}/{key}"
            else:
                assert request.url == f"http://{BUCKET}.localhost:{port}/{key}"
            authorization = request.headers["Authorization"].decode()
            assert f"Credential={keys[name]['access_key_id']}/" in authorization
            assert f"/{region}/s3/aws4_request" in authorization
        assert client.meta.config.s3["addressing_style"] == (
            "path" if PRESETS[name].path_style else "virtual"
        )
    assert len(clients) == len(CASES)  # a client per backend
    for name, server in endpoints.items():  # each object in its own server's bucket, none in another's
        assert _bucket_keys(server, CASES[name][0]) == [f"tenant/{name}/source.md"]


@pytest.mark.usefixtures("subdomains_resolve")
def test_a_copy_stays_in_its_backend_and_a_delete_goes_to_it(
    endpoints: dict[str, MotoServer], configured: tuple[Any, dict[str, dict[str, str]]]
) -> None:
    settings, _keys = configured
    storage = build_storage(settings, MemoryFileStore("files"))
    url = storage.backend("b-cos").save("tenant/copy/a.md", b"a")
    copied = storage.copy(url, "tenant/copy/b.md")
    assert copied == "storage://b-cos/tenant/copy/b.md" and storage.read(copied) == b"a"
    assert "tenant/copy/b.md" in _bucket_keys(endpoints["cos"], "ap-guangzhou")
    assert "tenant/copy/b.md" not in _bucket_keys(endpoints["oss"], "cn-hangzhou")
    link = storage.presign_get(copied, 60, file_name="b.md")
    assert link.startswith(f"http://{BUCKET}.localhost:{endpoints['cos'].port}/tenant/copy/b.md?")
    storage.delete(url)
    storage.delete(copied)
    assert not storage.exists(url) and not storage.exists(copied)


def test_missing_credentials_are_named_when_the_backend_is_first_used(
    endpoints: dict[str, MotoServer],
) -> None:
    stack = shared_moto_server()
    config = {
        "lost": {
            "provider": "minio",
            "bucket": BUCKET,
            "endpoint": endpoints["minio"].url,
            "credentials": f"ssm:/nowhere-{uuid.uuid4().hex}/storage/lost",
        }
    }
    settings = load_settings({"WEKNORA_STORAGE_BACKENDS": json.dumps(config), "AWS_ENDPOINT_URL": stack.url})
    storage = build_storage(settings, MemoryFileStore("files"))
    url = storage.backend("lost").url_for("a/b")  # no client, no secret read, for a URL
    with pytest.raises(StorageCredentialsMissing, match="do not exist"):
        storage.read(url)
