"""One Powertools Logger for every module, EMF metrics per stage outcome, and tracing on the handlers.

On Lambda, logs are JSON lines and each stage outcome is a CloudWatch EMF metric (`StageSucceeded`,
`StageRetried`, `StageFailed`, `StageDeferred`, `StageContinued`) with the stage as dimension, so an
operator can alarm on failures; each metered stage try also emits what it cost (`StageCostUSD`), so the
dashboard can show the cost per document (`infra/monitoring.py`). Locally (`make run`), logs are one
readable line per event and metrics are a debug line, not raw EMF JSON. Tracing (X-Ray through
Powertools' Tracer) is built on first use and only on Lambda: importing the X-Ray SDK costs ~0.4 s, which
the API's cold start must not pay.

An exception is logged redacted (`redacted_traceback`), in both formats: its frames and every chained
exception's class are kept, but only our own errors keep their message. A library's message (botocore,
urllib3, a search cluster, a model) may quote what a remote server answered, and nothing a server answers
goes into a log.
"""

from __future__ import annotations

import functools
import logging
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import BasePowertoolsFormatter, LambdaPowertoolsFormatter

from chalicelib.domain.errors import AppError, StageError
from chalicelib.settings import get_settings

F = TypeVar("F", bound=Callable[..., Any])
SERVICE = "weknora-ingest"
#: the EMF metric of a stage try's cost (the dashboard divides its sum by the documents finished)
STAGE_COST_METRIC = "StageCostUSD"
_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
WITHHELD = "<message withheld>"
#: errors whose messages we write: the domain's, and the ports' (any class defined in chalicelib.ports)
_OWN_BASES: tuple[type[BaseException], ...] = (AppError, StageError)
_OWN_MODULE_PREFIX = "chalicelib.ports."
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def message_is_ours(error: BaseException) -> bool:
    """True when the project wrote the error's message (a domain or port error, or a subclass of one)."""
    if isinstance(error, _OWN_BASES):
        return True
    return any(cls.__module__.startswith(_OWN_MODULE_PREFIX) for cls in type(error).__mro__)


def _headline(error: BaseException) -> str:
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    if not message_is_ours(error):
        return f"{name}: {WITHHELD}"
    try:
        text = str(error)
    except Exception:  # a broken __str__ must not break the log line
        text = "<unprintable>"
    return f"{name}: {text}" if text else name


def _one(error: BaseException) -> list[str]:
    """One exception: its frames (file, line, function, statement) and its headline, with its notes and,
    for a group, its members."""
    lines = ["Traceback (most recent call last):\n"] if error.__traceback__ is not None else []
    lines += traceback.format_list(traceback.extract_tb(error.__traceback__))
    lines.append(_headline(error) + "\n")
    if message_is_ours(error):
        lines += [f"{note}\n" for note in getattr(error, "__notes__", None) or ()]
    for number, member in enumerate(getattr(error, "exceptions", None) or (), start=1):
        if isinstance(member, BaseException):
            lines.append(f"+---- {number} ----\n")
            lines += [f"| {line}" for line in "".join(redacted_lines(member)).splitlines(keepends=True)]
    return lines


def redacted_lines(error: BaseException) -> list[str]:
    """What `traceback.format_exception` prints for `error` and its chain, with every message that is not
    ours replaced by WITHHELD."""
    chain: list[tuple[BaseException, str]] = []  # newest first, each with how the next newer one follows it
    seen: set[int] = set()
    current: BaseException | None = error
    link = ""
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        if current.__cause__ is not None:
            current, link = current.__cause__, _CAUSE
        elif current.__context__ is not None and not current.__suppress_context__:
            current, link = current.__context__, _CONTEXT
        else:
            current = None
    lines: list[str] = []
    for index in range(len(chain) - 1, -1, -1):
        lines += _one(chain[index][0])
        if index:
            lines.append(chain[index - 1][1])
    return lines


def redacted_traceback(error: BaseException) -> str:
    return "".join(redacted_lines(error)).rstrip("\n")


def _format_exc_info(exc_info: ExcInfo) -> str:
    error = exc_info[1]
    return redacted_traceback(error) if error is not None else ""


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

    def formatException(self, ei: Any) -> str:
        return _format_exc_info(ei)


class RedactingJsonFormatter(LambdaPowertoolsFormatter):
    """Powertools' JSON lines, with the exception redacted in each field that carries it: `exception` (the
    traceback, through formatException), `stack_trace.value` (the exception itself, until serialized) and
    `exception_notes`."""

    def formatException(self, ei: Any) -> str:
        return _format_exc_info(ei)

    def serialize(self, log: Any) -> str:
        trace = log.get("stack_trace")
        error = trace.get("value") if isinstance(trace, dict) else None
        if not (isinstance(error, BaseException) and message_is_ours(error)):
            log = {key: value for key, value in log.items() if key != "exception_notes"}
            if isinstance(trace, dict) and "value" in trace:
                log["stack_trace"] = {**trace, "value": WITHHELD}
        return super().serialize(log)


def _redact_exception_text(record: logging.LogRecord) -> bool:
    """A logger filter: any other handler's stdlib formatter prints `exc_text` when it is set, redacted."""
    if isinstance(record.exc_info, tuple) and record.exc_info[1] is not None:
        record.exc_text = redacted_traceback(record.exc_info[1])
    return True


def _build_logger() -> Logger:
    settings = get_settings()
    formatter: BasePowertoolsFormatter = (
        ReadableFormatter() if settings.log_format == "text" else RedactingJsonFormatter()
    )
    built = Logger(service=SERVICE, level=settings.log_level, logger_formatter=formatter)
    built.addFilter(_redact_exception_text)
    return built


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
