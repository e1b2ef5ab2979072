"""A provider's token counts are the provider's: `Infinity` and `NaN` (json.loads reads them), a count past
any model's reach, are ignored with a warning instead of reaching the usage rows and their cost.

Regression (found by an audit): they passed `> 0` and were recorded as they came."""

from __future__ import annotations

import json
import logging

import pytest

from chalicelib.domain import metering

MODEL = "openai/m"


def _recorded(input_tokens: object, output_tokens: object = 0) -> dict[str, float]:
    with metering.metering() as meter:
        metering.record_tokens(f"{MODEL}@http://SECRET-HOST:9", input_tokens, output_tokens)
        return meter.snapshot()


@pytest.mark.parametrize(
    "implausible",
    [
        *json.loads("[Infinity, -Infinity, NaN]"),
        10**9 + 1,
        10**400,  # an int no float holds: compared, never converted
        1e300,
    ],
)
def test_an_implausible_count_is_ignored_with_a_warning(
    implausible: object, caplog: pytest.LogCaptureFixture
) -> None:
    from chalicelib.observability import SERVICE

    with caplog.at_level(logging.WARNING, logger=SERVICE):
        counts = _recorded(implausible, 7)
    assert metering.token_counter("input", MODEL) not in counts
    assert counts[metering.token_counter("output", MODEL)] == 7
    assert "provider token count ignored" in caplog.text
    assert "SECRET-HOST" not in caplog.text and str(implausible) not in caplog.text


def test_plausible_counts_are_recorded_and_non_numbers_ignored() -> None:
    counts = _recorded(10**9, 3.0)
    assert counts[metering.token_counter("input", MODEL)] == 10**9
    assert counts[metering.token_counter("output", MODEL)] == 3
    assert _recorded("12", True).get(metering.token_counter("input", MODEL)) is None
