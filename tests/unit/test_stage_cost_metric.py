"""Each metered stage try emits its price as an EMF metric (`StageCostUSD`, stage and service dimensions),
priced like the cost API from the usage entry it stores; locally no metric JSON; a bad price file never
fails the work."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib import observability
from chalicelib.adapters.memory import MemoryUsageRepo
from chalicelib.domain import metering
from chalicelib.domain.pricing import PRICES, cost_lines
from chalicelib.services.usage import metered_invocation
from chalicelib.settings import Settings, load_settings

ON_LAMBDA = {"AWS_LAMBDA_FUNCTION_NAME": "weknora-chunking", "POWERTOOLS_METRICS_NAMESPACE": "WeknoraIngest"}


def _record() -> SQSRecord:
    return SQSRecord({"messageId": "m-1", "body": "{}", "attributes": {"ApproximateReceiveCount": "2"}})


def _run(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> MemoryUsageRepo:
    monkeypatch.setattr(observability, "get_settings", lambda: settings)
    deps: Any = SimpleNamespace(settings=settings, usage=MemoryUsageRepo())
    record = _record()
    event = {"Records": [record.raw_event, record.raw_event]}  # the try pays half the batch's requests
    context = SimpleNamespace(memory_limit_in_mb=1024)
    with metered_invocation(deps, "chunking", "k1", 1, record, event, context):
        metering.record(metering.DYNAMODB_WRITE_UNITS, 40)
        metering.record(metering.S3_TIER2_REQUESTS, 3)
    usage: MemoryUsageRepo = deps.usage
    return usage


def _emf(out: str) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [line for line in lines if "_aws" in line]


def test_on_lambda_a_metered_try_emits_its_price_with_the_stage_and_service_dimensions(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", observability.SERVICE)  # as the template's Globals set
    usage = _run(load_settings(ON_LAMBDA), monkeypatch)

    (entry,) = usage.for_knowledge("k1")
    priced = sum(line.dollars for line in cost_lines(entry.counts, PRICES))
    assert priced > 0
    (emf,) = [m for m in _emf(capsys.readouterr().out) if observability.STAGE_COST_METRIC in m]
    value = emf[observability.STAGE_COST_METRIC]
    assert (value[0] if isinstance(value, list) else value) == pytest.approx(priced)
    directive = emf["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "WeknoraIngest"
    assert directive["Dimensions"] == [["stage", "service"]]
    assert emf["stage"] == "chunking" and emf["service"] == observability.SERVICE


def test_locally_the_price_is_no_metric_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    usage = _run(load_settings({}), monkeypatch)
    assert usage.for_knowledge("k1")
    assert not _emf(capsys.readouterr().out)


def test_a_bad_price_file_costs_the_metric_not_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text("not json", encoding="utf-8")
    usage = _run(load_settings({**ON_LAMBDA, "WEKNORA_PRICES_FILE": str(prices)}), monkeypatch)
    assert usage.for_knowledge("k1")  # the usage entry is still stored
    assert not [m for m in _emf(capsys.readouterr().out) if observability.STAGE_COST_METRIC in m]
