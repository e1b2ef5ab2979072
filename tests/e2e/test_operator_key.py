"""The operator key as deployed: an SSM Parameter Store SecureString (moto), read by the adapter the
composition root builds, and the admin API's answers while it is missing and once it exists."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import boto3
import pytest
from chalice.test import Client
from infra.iam_policy import Request, RoleBook
from project_paths import ROOT

from chalicelib.adapters.secrets import CachedSecret, SsmParameter, StaticSecret
from chalicelib.bootstrap import Services, _build_operator_key
from chalicelib.local.moto_server import ACCOUNT_ID, MotoServer, shared_moto_server
from chalicelib.local.runtime import LocalRuntime
from chalicelib.settings import load_settings

from .conftest import V1


@pytest.fixture
def moto() -> MotoServer:
    return shared_moto_server()


def ssm(server: MotoServer) -> Any:
    return boto3.client("ssm", region_name=server.region, endpoint_url=server.url)


def test_the_adapter_reads_the_secure_string_decrypted_and_none_while_it_is_missing(moto: MotoServer) -> None:
    name = f"/weknora-test-{uuid.uuid4().hex[:8]}/operator-key"
    client = ssm(moto)
    parameter = SsmParameter(client, name)
    assert parameter.read() is None
    client.put_parameter(Name=name, Value="op-secret-value", Type="SecureString")
    assert client.get_parameter(Name=name)["Parameter"]["Value"] != "op-secret-value"  # stored encrypted
    assert parameter.read() == "op-secret-value"


def test_the_composition_root_reads_the_named_parameter_once(moto: MotoServer) -> None:
    name = f"/weknora-test-{uuid.uuid4().hex[:8]}/operator-key"
    settings = load_settings(
        {
            "AWS_ENDPOINT_URL": moto.url,
            "AWS_DEFAULT_REGION": moto.region,
            "WEKNORA_OPERATOR_KEY_PARAMETER": name,
        }
    )
    assert _build_operator_key(settings).read() is None
    ssm(moto).put_parameter(Name=name, Value="op-first", Type="SecureString")
    source = _build_operator_key(settings)  # a cold start
    assert isinstance(source, CachedSecret) and source.read() == "op-first"
    ssm(moto).put_parameter(Name=name, Value="op-rotated", Type="SecureString", Overwrite=True)
    assert source.read() == "op-first"  # cached: one GetParameter per cold start (then per TTL)


def admin_get(client: Client, key: str | None) -> Any:
    headers = {"X-Operator-Key": key} if key is not None else {}
    return client.http.get(f"{V1}/admin/tenants", headers=headers)


def test_the_admin_api_while_the_parameter_is_missing_and_once_it_exists(
    client: Client, services: Services
) -> None:
    services.settings = replace(
        services.settings, operator_key="", operator_key_parameter="/weknora/operator-key"
    )
    services.replace_operator_key(StaticSecret(None))
    missing = admin_get(client, "anything")
    assert missing.status_code == 403
    assert missing.json_body["error"]["code"] == "operator_key_missing"
    assert "/weknora/operator-key" not in json.dumps(missing.json_body)  # its name is for the log only
    assert admin_get(client, None).status_code == 401

    services.replace_operator_key(StaticSecret("op-from-ssm"))
    created = client.http.post(
        f"{V1}/admin/tenants",
        headers={"X-Operator-Key": "op-from-ssm", "Content-Type": "application/json"},
        body=json.dumps({"name": "first-tenant"}),
    )
    assert created.status_code == 201, created.json_body
    assert created.json_body["data"]["api_key"]
    wrong = admin_get(client, "op-wrong")
    assert wrong.status_code == 403 and wrong.json_body["error"]["code"] == "invalid_operator_key"


def operator_key_arn(runtime: LocalRuntime) -> str:
    """The parameter the API function's WEKNORA_OPERATOR_KEY_PARAMETER names, with the template's defaults."""
    defaults = {
        k: v.get("Default", "")
        for k, v in json.loads((ROOT / "infra/template.json").read_text())["Parameters"].items()
    }
    values = {**defaults, **runtime.parameters}
    name = f"/{values['Prefix']}/{values['OperatorKeyName']}"
    return f"arn:aws:ssm:{runtime.region}:{ACCOUNT_ID}:parameter{name}"


def test_only_the_api_function_may_read_the_operator_key(_runtime: LocalRuntime, _roles: RoleBook) -> None:
    request = Request("ssm:GetParameter", operator_key_arn(_runtime))
    may_read = {function for function in _roles.policies if _roles.allows(function, request)}
    assert may_read == {"APIHandler"}
