"""The operator key on AWS: an SSM SecureString the API reads on the first admin request and caches. A
parameter that does not exist yet (a fresh stack before `make deploy` creates it) answers 403
operator_key_missing, never a 500; a request without a key never reaches the parameter store; locally the
plain WEKNORA_OPERATOR_KEY wins."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.adapters.secrets import CachedSecret, StaticSecret
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError
from chalicelib.operations import admin

PARAMETER = "/weknora/operator-key"


class CountingSecret:
    """A parameter store that counts its reads; `value` None: the parameter does not exist."""

    def __init__(self, value: str | None) -> None:
        self.value = value
        self.reads = 0

    def read(self) -> str | None:
        self.reads += 1
        return self.value


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def code_of(deps: Services, presented: str) -> tuple[int, str]:
    with pytest.raises(AppError) as caught:
        admin.authorize_operator(deps, presented)
    return caught.value.status, caught.value.code


@pytest.fixture
def on_aws(deps: Services) -> Services:
    """The API function as deployed: no plain key, the parameter's name."""
    deps.settings = replace(deps.settings, operator_key="", operator_key_parameter=PARAMETER)
    return deps


def test_a_missing_parameter_disables_the_admin_api_with_a_stable_code(on_aws: Services) -> None:
    store = CountingSecret(None)
    on_aws.replace_operator_key(store)
    assert code_of(on_aws, "") == (401, "missing_operator_key")
    assert store.reads == 0  # no key presented: the parameter store is not asked
    assert code_of(on_aws, "anything") == (403, "operator_key_missing")


def test_the_parameters_key_guards_the_admin_api(on_aws: Services) -> None:
    on_aws.replace_operator_key(StaticSecret("op-from-ssm"))
    admin.authorize_operator(on_aws, "op-from-ssm")
    assert code_of(on_aws, "op-wrong") == (403, "invalid_operator_key")
    assert code_of(on_aws, "") == (401, "missing_operator_key")


def test_the_in_memory_set_has_no_parameter_store(on_aws: Services) -> None:
    assert on_aws.operator_key() is None
    assert code_of(on_aws, "anything") == (403, "operator_key_missing")


def test_a_plain_key_wins_and_neither_disables_the_admin_api(deps: Services) -> None:
    store = CountingSecret("op-from-ssm")
    deps.replace_operator_key(store)
    deps.settings = replace(deps.settings, operator_key="op-plain", operator_key_parameter=PARAMETER)
    admin.authorize_operator(deps, "op-plain")
    assert code_of(deps, "op-from-ssm") == (403, "invalid_operator_key")
    assert store.reads == 0
    deps.settings = replace(deps.settings, operator_key="", operator_key_parameter="")
    assert code_of(deps, "anything") == (403, "admin_disabled")
    assert deps.operator_key() == ""


def test_the_source_is_built_on_the_first_admin_request_only(on_aws: Services) -> None:
    built: list[str] = []

    def build(settings: object) -> StaticSecret:
        built.append(PARAMETER)
        return StaticSecret("op-from-ssm")

    on_aws.build_operator_key = build
    assert built == []
    for _ in range(3):
        admin.authorize_operator(on_aws, "op-from-ssm")
    assert built == [PARAMETER]


def test_the_key_is_read_once_per_ttl_and_a_rotation_is_seen_after_it() -> None:
    store, clock = CountingSecret("first"), Clock()
    cached = CachedSecret(store, ttl=300, missing_ttl=30, clock=clock)
    assert [cached.read() for _ in range(5)] == ["first"] * 5 and store.reads == 1
    store.value = "second"
    clock.now += 299
    assert cached.read() == "first" and store.reads == 1
    clock.now += 1
    assert cached.read() == "second" and store.reads == 2


def test_a_missing_key_is_asked_again_after_the_short_ttl_and_no_sooner() -> None:
    store, clock = CountingSecret(None), Clock()
    cached = CachedSecret(store, ttl=300, missing_ttl=30, clock=clock)
    assert [cached.read() for _ in range(10)] == [None] * 10 and store.reads == 1
    store.value = "created-by-make-deploy"
    clock.now += 29
    assert cached.read() is None
    clock.now += 1
    assert cached.read() == "created-by-make-deploy" and store.reads == 2
