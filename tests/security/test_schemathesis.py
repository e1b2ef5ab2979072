"""Schemathesis against the served OpenAPI document: no generated request may get a 5xx.

The local runtime serves the app over real HTTP (what `make run` serves); the schema is read from its
`/api/v1/openapi.json`, so every documented route is fuzzed with valid and invalid (negative) inputs. Half
of the requests aim at objects that exist (a knowledge base and a knowledge of the caller), so bodies are
also fuzzed past the 404. Bounded by `WEKNORA_FUZZ_EXAMPLES` examples per operation (default 25); run with
`make test-fuzz` (CI runs it after `make test`). The examples are the same on every run; set
`WEKNORA_FUZZ_SEED` to an integer to draw other ones (a failure prints the seed that reproduces it)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import schemathesis
from e2e.conftest import API_KEY
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import not_a_server_error

from .conftest import FUZZ_SEED, MAX_EXAMPLES, OPERATOR_KEY, Served

pytestmark = pytest.mark.schemathesis


def _strategy(operation: Any, ids: dict[str, str]) -> st.SearchStrategy[Case]:
    """Valid and invalid inputs; for routes with path parameters, half aimed at objects that exist."""
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    strategies = [operation.as_strategy(mode) for mode in modes]
    names = {p.name for p in operation.path_parameters}
    if names:
        real = {name: ids[name] for name in names if name in ids}
        strategies += [operation.as_strategy(mode, path_parameters=real) for mode in modes]
    return st.one_of(strategies)


@pytest.mark.timeout(max(300, 12 * MAX_EXAMPLES))  # the suite's 300 s fits the default 25 examples
def test_no_request_gets_a_server_error(served: Served) -> None:
    schema = schemathesis.openapi.from_url(f"{served.base}/api/v1/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 25
    failures: dict[str, str] = {}
    statuses: dict[str, Counter[int]] = {}
    for operation in operations:
        statuses[operation.label] = Counter()

        @settings(
            max_examples=MAX_EXAMPLES,
            deadline=None,
            derandomize=FUZZ_SEED is None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=_strategy(operation, served.fresh_ids()))
        def fuzz(case: Case) -> None:
            response = case.call_and_validate(
                base_url=served.base,
                headers={"X-API-Key": API_KEY, "X-Operator-Key": OPERATOR_KEY},
                checks=[not_a_server_error],
                timeout=60,
            )
            statuses[case.operation.label][response.status_code] += 1

        try:
            (seed(int(FUZZ_SEED))(fuzz) if FUZZ_SEED else fuzz)()
        except Exception as error:  # every operation is fuzzed; all failures are reported together
            failures[operation.label] = str(error)[:3000]
    print("\n".join(f"{label}: {dict(counts)}" for label, counts in statuses.items()))
    assert not failures, f"WEKNORA_FUZZ_SEED={FUZZ_SEED}\n\n" + "\n\n".join(
        f"{label}:\n{text}" for label, text in failures.items()
    )
    # The fuzzing got past authentication everywhere: every operation answered something but a 401.
    assert all(set(counts) - {401} for counts in statuses.values()), statuses
