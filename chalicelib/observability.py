"""Structured logs and CloudWatch EMF metrics (Powertools) for the stage workers.

One metric per stage outcome (`StageSucceeded`, `StageRetried`, `StageFailed`, `StageDeferred`,
`StageContinued`, `StageDropped`) with the stage as dimension, so an operator can alarm on failures and
see throttling; every log line carries the knowledge id and attempt.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

logger = Logger(service="weknora-ingest")


def stage_outcome(
    stage: str, outcome: str, *, knowledge_id: str = "", attempt: int = 0, **fields: Any
) -> None:
    logger.info(
        f"{stage} {outcome}",
        extra={
            "stage": stage,
            "outcome": outcome,
            "knowledge_id": knowledge_id,
            "attempt": attempt,
            **fields,
        },
    )
    namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE")
    if not namespace:
        return
    name = f"Stage{outcome.capitalize()}"
    with single_metric(name=name, unit=MetricUnit.Count, value=1, namespace=namespace) as metric:
        metric.add_dimension(name="stage", value=stage)
