"""Stage outcomes become EMF metrics an operator can alarm on, and structured log lines."""

from __future__ import annotations

import json

import pytest

from chalicelib import observability


def test_a_stage_outcome_is_one_emf_metric_with_the_stage_dimension(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POWERTOOLS_METRICS_DISABLED", raising=False)
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "WeknoraIngest")
    observability.stage_outcome("embedding", "deferred", knowledge_id="k1", attempt=2, delay_seconds=30)

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    emf = next(line for line in lines if "_aws" in line)
    assert emf["stage"] == "embedding" and emf["StageDeferred"] in ([1.0], 1.0)
    directive = emf["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == "WeknoraIngest"
    assert any("stage" in dimensions for dimensions in directive["Dimensions"])
    record = next(r for r in caplog.records if r.getMessage() == "embedding deferred")
    assert record.knowledge_id == "k1" and record.attempt == 2  # type: ignore[attr-defined]
