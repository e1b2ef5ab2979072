"""Named storage backends: the providers' preset table, the operator's configuration checked at startup, the
`storage://<backend>/<key>` scheme, the routing store and the dummy backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, DummyFileStore, LocalFileStore, RoutingFileStore
from chalicelib.domain.storage_backends import PRESETS, backend_of, default_endpoint, storage_url
from chalicelib.ports import CrossBackendOperation, ObjectNotRetained, UnknownStorageBackend
from chalicelib.settings import load_settings


def backends(config: dict[str, Any]) -> Any:
    return load_settings({"WEKNORA_STORAGE_BACKENDS": json.dumps(config)}).storage_backends


@pytest.mark.parametrize(
    ("provider", "region", "endpoint", "path_style"),
    [
        ("cos", "ap-guangzhou", "https://cos.ap-guangzhou.myqcloud.com", False),
        ("oss", "cn-hangzhou", "https://oss-cn-hangzhou.aliyuncs.com", False),
        ("tos", "cn-beijing", "https://tos-s3-cn-beijing.volces.com", False),
        ("obs", "cn-north-4", "https://obs.cn-north-4.myhuaweicloud.com", False),
        ("ks3", "cn-beijing", "https://ks3-cn-beijing.ksyuncs.com", False),
        ("s3", "eu-west-1", "", False),  # the SDK resolves AWS's own endpoint
    ],
)
def test_each_preset_makes_its_endpoint_from_the_region(
    provider: str, region: str, endpoint: str, path_style: bool
) -> None:
    assert default_endpoint(provider, region) == endpoint
    (config,) = backends(
        {"b1": {"provider": provider, "bucket": "docs", "region": region, "credentials": "ssm:/weknora/b1"}}
    )
    assert config.resolved_endpoint() == endpoint
    assert config.resolved_path_style() is path_style


def test_minio_is_path_style_on_the_endpoint_the_operator_names() -> None:
    assert PRESETS["minio"].path_style and PRESETS["minio"].needs_endpoint
    (config,) = backends(
        {
            "lab": {
                "provider": "minio",
                "bucket": "docs",
                "endpoint": "http://minio.internal:9000/",
                "credentials": "secretsmanager:weknora/minio",
            }
        }
    )
    assert (config.resolved_endpoint(), config.resolved_path_style()) == ("http://minio.internal:9000", True)


def test_an_endpoint_and_addressing_style_override_the_preset() -> None:
    (config,) = backends(
        {
            "b1": {
                "provider": "cos",
                "bucket": "docs",
                "region": "ap-guangzhou",
                "endpoint": "https://cos.internal.example",
                "path_style": True,
                "credentials": "ssm:/p",
            }
        }
    )
    assert (config.resolved_endpoint(), config.resolved_path_style()) == (
        "https://cos.internal.example",
        True,
    )


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        ({"b1": {"provider": "gcs", "bucket": "d"}}, "provider: Input should be"),
        ({"b1": {"provider": "cos", "region": "ap-guangzhou", "credentials": "ssm:/p"}}, "needs a bucket"),
        ({"b1": {"provider": "cos", "bucket": "d", "credentials": "ssm:/p"}}, "needs a region"),
        ({"b1": {"provider": "minio", "bucket": "d", "credentials": "ssm:/p"}}, "needs an endpoint"),
        ({"b1": {"provider": "oss", "bucket": "d", "region": "cn-hangzhou"}}, "needs credentials"),
        (
            {"b1": {"provider": "oss", "bucket": "d", "region": "cn-hangzhou", "credentials": "env:KEY"}},
            "credentials must be",
        ),
        (
            {"b1": {"provider": "oss", "bucket": "d", "region": "cn-hangzhou", "secret_key": "plain"}},
            "secret_key: Extra inputs are not permitted",  # keys never sit in the configuration
        ),
        (
            {
                "b1": {
                    "provider": "minio",
                    "bucket": "d",
                    "endpoint": "http://u:p@h/x",
                    "credentials": "ssm:/p",
                }
            },
            "must be http(s)://host[:port]",
        ),
        ({"B 1": {"provider": "dummy"}}, "a backend id is"),
        ({"b1": {"provider": "dummy", "bucket": "d"}}, "keeps nothing"),
        ({"b1": "cos"}, "must be an object"),
    ],
)
def test_a_bad_backend_configuration_stops_the_start_with_a_clear_error(config: Any, problem: str) -> None:
    with pytest.raises(ValueError) as raised:
        backends(config)
    assert problem in str(raised.value)
    assert "WEKNORA_STORAGE_BACKENDS" in str(raised.value)


def test_invalid_json_is_named() -> None:
    with pytest.raises(ValueError, match="WEKNORA_STORAGE_BACKENDS is not valid JSON"):
        load_settings({"WEKNORA_STORAGE_BACKENDS": "{"})


def test_an_s3_backend_may_use_the_functions_own_role_and_the_dummy_needs_nothing() -> None:
    configs = backends(
        {"aws": {"provider": "s3", "bucket": "d", "region": "eu-west-1"}, "void": {"provider": "dummy"}}
    )
    assert [(c.id, c.credentials, c.keeps_nothing) for c in configs] == [
        ("aws", "", False),
        ("void", "", True),
    ]


def test_the_storage_url_names_its_backend() -> None:
    assert storage_url("tc", "t/k/a.pdf") == "storage://tc/t/k/a.pdf"
    assert backend_of("storage://tc/t/k/a.pdf") == "tc"
    assert backend_of("s3://bucket/t/k/a.pdf") == backend_of("local://t/k/a.pdf") == ""
    with pytest.raises(ValueError):
        backend_of("storage://no-key")


@pytest.fixture
def routed(tmp_path: Path) -> tuple[RoutingFileStore, MemoryFileStore, MemoryFileStore]:
    cos, oss = MemoryFileStore("cos-bucket"), MemoryFileStore("oss-bucket")
    store = RoutingFileStore(
        LocalFileStore(tmp_path / "files"),
        {
            "tc": BackendFileStore("tc", lambda: cos),
            "ali": BackendFileStore("ali", lambda: oss),
            "void": BackendFileStore("void", lambda: DummyFileStore("void")),
        },
    )
    return store, cos, oss


def test_urls_route_to_their_backend_and_old_urls_keep_working(
    routed: tuple[RoutingFileStore, MemoryFileStore, MemoryFileStore],
) -> None:
    store, cos, oss = routed
    on_cos = store.backend("tc").save("t/k/a.md", b"cos bytes", "text/markdown")
    assert on_cos == "storage://tc/t/k/a.md"
    assert cos.keys() == ["t/k/a.md"] and oss.keys() == []  # in that backend's bucket, not another's
    assert store.read(on_cos) == b"cos bytes" and store.size(on_cos) == 9 and store.exists(on_cos)
    assert store.key_of(on_cos) == "t/k/a.md"
    copied = store.copy(on_cos, "t/k2/a.md")  # within the backend
    assert copied == "storage://tc/t/k2/a.md" and cos.keys() == ["t/k/a.md", "t/k2/a.md"]
    assert store.presign_get(on_cos, 60).startswith("https://cos-bucket.mem.invalid/t/k/a.md")
    store.delete(on_cos)
    assert not store.exists(on_cos)
    local = store.save("t/k/b.md", b"default")  # the default backend, as before
    assert local == "local://t/k/b.md" and store.read(local) == b"default"
    assert store.backend("") is store.default and store.backend_ids() == ["ali", "tc", "void"]


def test_unknown_backends_and_cross_backend_operations_are_refused(
    routed: tuple[RoutingFileStore, MemoryFileStore, MemoryFileStore],
) -> None:
    store, _cos, _oss = routed
    on_cos = store.backend("tc").save("t/k/a.md", b"x")
    with pytest.raises(UnknownStorageBackend, match="'gone' is not configured"):
        store.read("storage://gone/t/k/a.md")
    with pytest.raises(UnknownStorageBackend):
        store.backend("gone")
    with pytest.raises(CrossBackendOperation):
        store.backend("ali").copy(on_cos, "t/k/a.md")  # one backend's store never copies another's object
    with pytest.raises(CrossBackendOperation):
        store.backend("ali").read(on_cos)
    with pytest.raises(ValueError):
        store.backend("").read(on_cos)  # the default store does not read a named backend's URL


def test_the_dummy_backend_accepts_writes_and_keeps_nothing(
    routed: tuple[RoutingFileStore, MemoryFileStore, MemoryFileStore],
) -> None:
    store, cos, oss = routed
    url = store.backend("void").save("t/k/a.pdf", b"%PDF")
    assert url == "storage://void/t/k/a.pdf"
    assert not store.exists(url)
    with pytest.raises(ObjectNotRetained) as raised:
        store.read(url)
    assert isinstance(raised.value, FileNotFoundError)  # permanent, as any missing object
    with pytest.raises(FileNotFoundError):
        store.copy(url, "t/k2/a.pdf")
    store.delete(url)  # nothing to delete: no error
    assert cos.keys() == oss.keys() == []


def test_a_backends_store_is_built_once_on_first_use() -> None:
    built: list[str] = []

    def build() -> MemoryFileStore:
        built.append("x")
        return MemoryFileStore("lazy")

    backend = BackendFileStore("lazy", build)
    assert built == [] and backend.url_for("a/b") == "storage://lazy/a/b"  # no client for a URL
    backend.save("a/b", b"1")
    backend.read("storage://lazy/a/b")
    assert built == ["x"]
