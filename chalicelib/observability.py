"""One Powertools Logger for every module, EMF metrics per stage outcome, and tracing on the handlers.

On Lambda, logs are JSON lines and each stage outcome is a CloudWatch EMF metric (`StageSucceeded`,
`StageRetried`, `StageFailed`, `StageDeferred`, `StageContinued`) with the stage as dimension, so an
operator can alarm on failures; each metered stage try also emits what it cost (`StageCostUSD`), so the
dashboard can show the cost per document (`infra/monitoring.py`). Locally (`make run`), logs are one
readable line per event and metrics are a debug line, not raw EMF JSON. Tracing (X-Ray through
Powertools' Tracer) is built on first use and only on Lambda: importing the X-Ray SDK costs ~0.4 s, which
the API's cold start must not pay.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import BasePowertoolsFormatter

from chalicelib.settings import get_settings

F = TypeVar("F", bound=Callable[..., Any])
SERVICE = "weknora-ingest"
#: the EMF metric of a stage try's cost (the dashboard divides its sum by the documents finished)
STAGE_COST_METRIC = "StageCostUSD"
_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class ReadableFormatter(BasePowertoolsFormatter):
    """`12:00:01 INFO  chunking succeeded  knowledge_id=… attempt=1`: one line a person can read."""

    def __init__(self) -> None:
        super().__init__(datefmt="%H:%M:%S")
        self._keys: dict[str, Any] = {}

    def append_keys(self, **additional_keys: Any) -> None:
        self._keys.update(additional_keys)

    def get_current_keys(self) -> dict[str, Any]:
        return dict(self._keys)

    def remove_keys(self, keys: Any) -> None:
        for key in keys:
            self._keys.pop(key, None)

    def clear_state(self) -> None:
        self._keys.clear()

    def format(self, record: logging.LogRecord) -> str:
        extras = {k: v for k, v in vars(record).items() if k not in _RESERVED and not k.startswith("_")}
        fields = " ".join(f"{k}={v}" for k, v in extras.items() if v not in (None, "", {}))
        line = f"{self.formatTime(record, self.datefmt)} {record.levelname:<5} {record.getMessage()}"
        if fields:
            line = f"{line}  {fields}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def _build_logger() -> Logger:
    settings = get_settings()
    formatter = ReadableFormatter() if settings.log_format == "text" else None
    return Logger(service=SERVICE, level=settings.log_level, logger_formatter=formatter)


logger = _build_logger()


def stage_outcome(
    stage: str, outcome: str, *, knowledge_id: str = "", attempt: int = 0, **fields: Any
) -> None:
    """One log line per stage outcome, and on Lambda one EMF metric."""
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
    _stage_metric(f"Stage{outcome.capitalize()}", stage, 1, "Count")


def stage_cost(stage: str, dollars: float) -> None:
    """What one metered stage try cost, in US dollars (priced from its usage entry): on Lambda one EMF
    metric, locally a debug line (the usage table keeps the detail either way)."""
    logger.debug(f"{stage} cost", extra={"stage": stage, "dollars": dollars})
    _stage_metric(STAGE_COST_METRIC, stage, dollars, "None")


def _stage_metric(name: str, stage: str, value: float, unit: str) -> None:
    """One EMF metric with the stage as dimension (Powertools adds `service`); only where metrics are on."""
    settings = get_settings()
    if not settings.emit_metrics:
        return
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with single_metric(
        name=name, unit=MetricUnit(unit), value=value, namespace=settings.metrics_namespace
    ) as metric:
        metric.add_dimension(name="stage", value=stage)


def traced(fn: F) -> F:
    """Powertools Tracer's `capture_method` on a handler, built on the first call and only when tracing
    is on (Lambda with X-Ray active); a plain call otherwise."""
    wrapped: list[Callable[..., Any]] = []

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        if not wrapped:
            if get_settings().tracing:
                from aws_lambda_powertools import Tracer

                wrapped.append(Tracer(service=SERVICE).capture_method(fn))
            else:
                wrapped.append(fn)
        return wrapped[0](*args, **kwargs)

    return call  # type: ignore[return-value]
