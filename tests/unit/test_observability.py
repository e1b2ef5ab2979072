"""Stage outcomes: on Lambda an EMF metric an operator can alarm on; locally one readable line, no raw JSON."""

from __future__ import annotations

import json
import logging

import pytest

from chalicelib import observability
from chalicelib.settings import load_settings


def test_on_lambda_a_stage_outcome_is_one_emf_metric_with_the_stage_dimension(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_lambda = load_settings(
        {"AWS_LAMBDA_FUNCTION_NAME": "weknora-embedding", "POWERTOOLS_METRICS_NAMESPACE": "WeknoraIngest"}
    )
    assert on_lambda.emit_metrics and on_lambda.log_format == "json"
    monkeypatch.setattr(observability, "get_settings", lambda: on_lambda)
    observability.stage_outcome("embedding", "deferred", knowledge_id="k1", attempt=2, delay_seconds=30)

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    emf = next(line for line in lines if "_aws" in line)
    assert emf["stage"] == "embedding" and emf["StageDeferred"] in ([1.0], 1.0)
    directive = emf["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "WeknoraIngest"
    assert any("stage" in dimensions for dimensions in directive["Dimensions"])
    record = next(r for r in caplog.records if r.getMessage() == "embedding deferred")
    assert record.knowledge_id == "k1" and record.attempt == 2  # type: ignore[attr-defined]


def test_locally_a_stage_outcome_is_a_readable_line_and_no_metric_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local = load_settings({})
    assert not local.emit_metrics and local.log_format == "text"
    monkeypatch.setattr(observability, "get_settings", lambda: local)
    observability.stage_outcome("chunking", "succeeded", knowledge_id="k9", attempt=1)

    out = capsys.readouterr().out
    assert not any(line.startswith("{") for line in out.splitlines())  # the old flood of EMF JSON is gone


def test_the_readable_formatter_puts_the_fields_after_the_message() -> None:
    record = logging.makeLogRecord(
        {"msg": "docreader failed", "levelname": "ERROR", "knowledge_id": "k1", "attempt": 3}
    )
    line = observability.ReadableFormatter().format(record)
    assert "ERROR" in line and line.split("ERROR", 1)[1].strip().startswith("docreader failed")
    assert "knowledge_id=k1" in line and "attempt=3" in line
