"""A tenant's request limit: one tenant's script at the API's whole stage throttle took every other tenant's
calls down with 429s. Each tenant's API keys may make `WEKNORA_TENANT_REQUESTS_PER_SECOND` (or the
operator's `requests_per_second`) requests a second, counted in fixed 10 s windows where the key is
authenticated; past it, 429 `tenant_rate_limited` with `Retry-After`. Operator routes, the console's
files, download redemptions and unauthenticated routes are not counted, and a counter that does not answer
lets the request through."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any
from unittest.mock import patch

import pytest
from chalice.test import Client

from chalicelib.adapters.memory.request_counts import MemoryRequestCounter
from chalicelib.bootstrap import Services
from chalicelib.domain.request_limits import WINDOW_SECONDS, RequestWindow
from chalicelib.operations import tenants as tenant_operations
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"
OPERATOR = {"X-Operator-Key": "op-secret"}
#: 3.5 s into a window: 6.5 s (Retry-After 7) to its end
NOW = 1_800_000_003.5


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    moment = [NOW]
    monkeypatch.setattr(tenant_operations, "clock", lambda: moment[0])
    return moment


def counter(deps: Services) -> MemoryRequestCounter:
    assert isinstance(deps.requests, MemoryRequestCounter)
    return deps.requests


def models(client: Client, key: str) -> int:
    return int(client.http.get(f"{V1}/models", headers={"X-API-Key": key}).status_code)


def test_the_201st_request_of_a_window_is_429_with_retry_after_and_other_tenants_go_on(
    deps: Services, client: Client, clock: list[float]
) -> None:
    assert deps.settings.tenant_requests_per_second == 20  # the default: 200 a window
    noisy_tenant, noisy = create_tenant_with_key(deps, "noisy")
    _, quiet = create_tenant_with_key(deps, "quiet")
    assert [models(client, noisy) for _ in range(200)] == [200] * 200
    refused = client.http.get(f"{V1}/models", headers={"X-API-Key": noisy})
    assert refused.status_code == 429, refused.body
    assert refused.json_body["error"]["code"] == "tenant_rate_limited"
    assert "20 requests a second" in refused.json_body["error"]["message"]
    assert refused.headers["Retry-After"] == "7"
    # another tenant's keys have their own count
    assert models(client, quiet) == 200
    # a refused request counts nothing: the window holds its 200
    assert counter(deps).counts[(noisy_tenant.id, RequestWindow.at(NOW, 20).start)] == 200
    # the next window admits again
    clock[0] = NOW + WINDOW_SECONDS
    assert models(client, noisy) == 200


def test_every_key_of_the_tenant_shares_its_count_and_a_bad_key_counts_nothing(
    deps: Services, client: Client, clock: list[float]
) -> None:
    deps.settings = replace(deps.settings, tenant_requests_per_second=1, operator_key="op-secret")
    tenant, primary = create_tenant_with_key(deps, "acme")
    issued = client.http.post(
        f"{V1}/admin/tenants/{tenant.id}/api-keys",
        headers={**OPERATOR, "Content-Type": "application/json"},
        body=json.dumps({"name": "second", "scope": "read"}),
    )
    assert issued.status_code == 201, issued.body
    second = issued.json_body["data"]["api_key"]
    assert [models(client, primary) for _ in range(5)] == [200] * 5
    assert [models(client, second) for _ in range(5)] == [200] * 5
    assert models(client, "wk-not-a-key") == 401
    assert models(client, primary) == 429 and models(client, second) == 429
    assert counter(deps).counts == {(tenant.id, RequestWindow.at(NOW, 1).start): 10}


def test_operator_routes_console_files_downloads_and_open_routes_are_not_counted(
    deps: Services, client: Client, clock: list[float]
) -> None:
    deps.settings = replace(deps.settings, tenant_requests_per_second=1, operator_key="op-secret")
    tenant, key = create_tenant_with_key(deps, "acme")
    for _ in range(15):
        both = {**OPERATOR, "X-API-Key": key}
        assert client.http.get(f"{V1}/admin/tenants/{tenant.id}/api-keys", headers=both).status_code == 200
        assert client.http.get(f"{V1}/health", headers={"X-API-Key": key}).status_code in (200, 503)
        assert client.http.get("/console/app.js", headers={"X-API-Key": key}).status_code == 200
        assert client.http.get("/r/not-a-token", headers={"X-API-Key": key}).status_code in (404, 410)
    assert counter(deps).counts == {}
    assert [models(client, key) for _ in range(10)] == [200] * 10  # the tenant's own 10 are whole
    assert models(client, key) == 429


def test_a_counter_that_does_not_answer_lets_the_request_through_with_a_warning(
    deps: Services, client: Client, clock: list[float]
) -> None:
    deps.settings = replace(deps.settings, tenant_requests_per_second=1)
    tenant, key = create_tenant_with_key(deps, "acme")
    counter(deps).unreachable = True
    with patch.object(tenant_operations.logger, "warning") as warning:
        assert [models(client, key) for _ in range(12)] == [200] * 12
    assert warning.call_count == 12
    extra = warning.call_args.kwargs["extra"]
    assert extra["tenant_id"] == tenant.id and extra["error"] == "ServiceUnreachable"
    counter(deps).unreachable = False
    assert [models(client, key) for _ in range(10)] == [200] * 10
    assert models(client, key) == 429


def test_the_operators_rate_for_a_tenant_replaces_the_default(
    deps: Services, client: Client, clock: list[float]
) -> None:
    deps.settings = replace(deps.settings, operator_key="op-secret")
    slow, slow_key = create_tenant_with_key(deps, "slow")
    fast, fast_key = create_tenant_with_key(deps, "fast")
    headers = {**OPERATOR, "Content-Type": "application/json"}
    answer = client.http.put(
        f"{V1}/admin/tenants/{slow.id}/quotas", headers=headers, body=json.dumps({"requests_per_second": 2})
    )
    assert answer.status_code == 200, answer.body
    assert answer.json_body["data"]["requests_per_second"] == 2
    client.http.put(
        f"{V1}/admin/tenants/{fast.id}/quotas", headers=headers, body=json.dumps({"requests_per_second": 30})
    )
    assert [models(client, slow_key) for _ in range(20)] == [200] * 20
    refused = client.http.get(f"{V1}/models", headers={"X-API-Key": slow_key})
    assert refused.status_code == 429 and refused.json_body["error"]["code"] == "tenant_rate_limited"
    assert [models(client, fast_key) for _ in range(300)] == [200] * 300  # past the default's 200
    assert models(client, fast_key) == 429
    # a PUT of the two quotas alone (an older client, the CLI without the flag) keeps the rate
    kept = client.http.put(
        f"{V1}/admin/tenants/{slow.id}/quotas", headers=headers, body=json.dumps({"storage_quota": 10**9})
    )
    assert kept.json_body["data"]["requests_per_second"] == 2
    assert kept.json_body["data"]["storage_quota"] == 10**9
    # 0 puts the tenant back on the deployment's rate; a negative or huge rate is refused
    back = client.http.put(
        f"{V1}/admin/tenants/{slow.id}/quotas", headers=headers, body=json.dumps({"requests_per_second": 0})
    )
    assert back.json_body["data"]["requests_per_second"] == 0
    assert models(client, slow_key) == 200  # 21 of the default's 200
    for wrong in (-1, 10_001):
        bad = client.http.put(
            f"{V1}/admin/tenants/{slow.id}/quotas",
            headers=headers,
            body=json.dumps({"requests_per_second": wrong}),
        )
        assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_quota"
    assert deps.tenants.get(slow.id).requests_per_second == 0  # type: ignore[union-attr]


def test_a_rate_of_0_counts_nothing(deps: Services, client: Client, clock: list[float]) -> None:
    deps.settings = replace(deps.settings, tenant_requests_per_second=0)
    _, key = create_tenant_with_key(deps, "acme")
    assert [models(client, key) for _ in range(250)] == [200] * 250
    assert counter(deps).counts == {}


def test_retry_after_counts_whole_seconds_to_the_windows_end() -> None:
    window = RequestWindow.at(1_000_000_009.2, 3)
    assert (window.start, window.limit) == (1_000_000_000, 30)
    assert window.retry_after(1_000_000_009.2) == 1
    assert window.retry_after(1_000_000_000.0) == 10
    assert window.expires_at > window.start + WINDOW_SECONDS


def test_the_dynamodb_counter_says_unreachable_only_for_a_throttle_or_an_outage() -> None:
    from botocore.exceptions import ClientError
    from pynamodb.exceptions import UpdateError

    from chalicelib.adapters.dynamo.request_counts import DynamoRequestCounter, build_request_count_model
    from chalicelib.adapters.memory import memory_settings
    from chalicelib.ports import ServiceUnreachable

    def failing(code: str, status: int) -> UpdateError:
        answer = {
            "Error": {"Code": code, "Message": "from the server"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }
        return UpdateError("Failed to update item", ClientError(answer, "UpdateItem"))  # type: ignore[arg-type]

    model = build_request_count_model(memory_settings())
    dynamo = DynamoRequestCounter(model)
    with patch.object(model, "update", side_effect=failing("ConditionalCheckFailedException", 400)):
        assert dynamo.count("t", 0, 10, 70) is False  # the window is full
    raised: list[tuple[str, int, type[Exception]]] = [
        ("ProvisionedThroughputExceededException", 400, ServiceUnreachable),
        ("InternalServerError", 500, ServiceUnreachable),
        ("AccessDeniedException", 400, UpdateError),  # a deployment's bug: not let through in silence
    ]
    for code, status, expected in raised:
        with (
            patch.object(model, "update", side_effect=failing(code, status)),
            pytest.raises(expected) as error,
        ):
            dynamo.count("t", 0, 10, 70)
        if expected is ServiceUnreachable:
            assert code in str(error.value) and "from the server" not in str(error.value)


@pytest.mark.parametrize("flag", [None, 5])
def test_the_clis_quotas_keep_the_operators_rate_unless_it_is_given(
    deps: Services, client: Client, flag: int | None
) -> None:
    """`tenant quotas` without `--requests-per-second` sends no rate, and the route keeps the one set before
    (a reviewer's proof: it sent the two quotas, and the route set the rate to 0)."""
    import argparse

    from rich.console import Console

    from chalicelib.local.cli import operator

    deps.settings = replace(deps.settings, operator_key="op-secret")
    tenant, _ = create_tenant_with_key(deps, "slow")
    headers = {**OPERATOR, "Content-Type": "application/json"}
    client.http.put(
        f"{V1}/admin/tenants/{tenant.id}/quotas", headers=headers, body=json.dumps({"requests_per_second": 2})
    )

    class Recorder:
        def call(self, method: str, path: str, **kw: Any) -> Any:
            answer = client.http.put(f"{V1}{path}", headers=headers, body=json.dumps(kw["json"]))
            return answer.json_body["data"]

    args = argparse.Namespace(
        action="quotas", tenant_id=tenant.id, storage=10**9, documents=0, requests_per_second=flag, json=True
    )
    with patch.object(operator, "_operator", lambda _args: Recorder()):
        operator.cmd_tenant(args, Console(record=True))
    row = deps.tenants.get(tenant.id)
    assert row is not None and row.storage_quota == 10**9
    assert row.requests_per_second == (2 if flag is None else flag)
