"""Errors name the model, never its endpoint (the operator's business): a DNS failure or a refusal of the
model host put its name into the model error, the stage error and so the tenant's document failure, as the
SSRF-safe client's refusal text names the URL's host (a reviewer's proof)."""

from __future__ import annotations

import socket

import pytest

from chalicelib.adapters.models.openai_compat import OpenAIEmbedding, SafeTransport
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import StageError
from chalicelib.net import AllowList, SafeHttpClient
from chalicelib.ports import ModelRequestError, ModelUnavailable
from chalicelib.services.embedding_runs import embed_texts

HOST = "gpu-7.models.corp-secret.example"


def dns_down(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")


def no_such_host(host: str, port: int) -> list[str]:
    raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")


def internal(host: str, port: int) -> list[str]:
    return ["10.1.2.3"]


def _model(resolver, allow: str = f"{HOST}:8000") -> OpenAIEmbedding:  # type: ignore[no-untyped-def]
    client = SafeHttpClient(AllowList.parse(allow), resolver=resolver)
    return OpenAIEmbedding(
        "bge-m3", base_url=f"http://{HOST}:8000/v1", dimensions=4, transport=SafeTransport(client)
    )


@pytest.mark.parametrize(
    ("resolver", "allow", "error"),
    [
        (dns_down, f"{HOST}:8000", ModelUnavailable),
        (no_such_host, f"{HOST}:8000", ModelRequestError),
        (internal, "127.0.0.1:8000", ModelRequestError),  # not on the allow-list: an internal address
    ],
)
def test_the_model_error_does_not_name_the_endpoints_host(
    resolver, allow: str, error: type[Exception]
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as caught:
        _model(resolver, allow).embed(["x"])
    assert HOST not in str(caught.value) and "10.1.2.3" not in str(caught.value)
    assert "the model endpoint" in str(caught.value)


def test_the_stage_error_does_not_name_the_model_host(deps: Services) -> None:
    deps.settings = deps.settings.__class__(**{**deps.settings.__dict__, "embed_max_attempts": 1})
    with pytest.raises(StageError) as caught:
        embed_texts(deps, "t1", _model(dns_down), ["some text"])
    assert HOST not in caught.value.message
