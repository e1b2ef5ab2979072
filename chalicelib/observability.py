"""One Powertools Logger for every module, EMF metrics per stage outcome, and tracing on the handlers.

On Lambda, logs are JSON lines and each stage outcome is a CloudWatch EMF metric (`StageSucceeded`,
`StageRetried`, `StageFailed`, `StageDeferred`, `StageContinued`) with the stage as dimension, so an
operator can alarm on failures; each metered stage try also emits what it cost (`StageCostUSD`), so the
dashboard can show the cost per document (`infra/monitoring.py`). Locally (`make run`), logs are one
readable line per event and metrics are a debug line, not raw EMF JSON. Tracing (X-Ray through
Powertools' Tracer) is built on first use and only on Lambda: importing the X-Ray SDK costs ~0.4 s, which
the API's cold start must not pay.

An exception is logged redacted (`redacted_traceback`), in both formats: its frames and every chained
exception's class are kept, but only our own errors (any class defined under `chalicelib.`) keep their
message; a botocore ClientError keeps its error code and operation. A library's message (botocore, urllib3,
a search cluster, a model) may quote what a remote server answered, and nothing a server answers goes into
a log. Logging never fails on the redactor: an exception it cannot render is logged by its class alone.
The local stack's stdlib loggers carry no redacting filter: they log a failure through `log_failure`.
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
from botocore.exceptions import ClientError

from chalicelib.domain.errors import provider_code
from chalicelib.settings import get_settings

F = TypeVar("F", bound=Callable[..., Any])
SERVICE = "weknora-ingest"
#: the EMF metric of a stage try's cost (the dashboard divides its sum by the documents finished)
STAGE_COST_METRIC = "StageCostUSD"
_RESERVED = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}
ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
WITHHELD = "<message withheld>"
#: errors whose messages we write: any class defined in the project (a builtin our code raises is not:
#: KeyError's key, OSError's text may be a server's word)
_OWN_MODULE_PREFIX = "chalicelib."
#: as the traceback module: a group's members past this depth, or past this many, are not printed
_MAX_GROUP_DEPTH = 10
_MAX_GROUP_WIDTH = 15
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def message_is_ours(error: BaseException) -> bool:
    """True when the project wrote the error's message (its class, or a base of it, is defined under
    chalicelib)."""
    return any(cls.__module__.startswith(_OWN_MODULE_PREFIX) for cls in type(error).__mro__)


def _aws_name(value: object) -> str:
    """A ClientError's code or operation, logged when AWS wrote it as an identifier (`provider_code`)."""
    return provider_code(value) or WITHHELD


def shown_message(error: BaseException) -> str:
    """What the log shows of the error's message: ours in full; a ClientError's code and operation
    (`ThrottlingException (PutItem)`), which an operator needs and AWS writes as identifiers; else WITHHELD."""
    if message_is_ours(error):
        try:
            return str(error)
        except Exception:  # a broken __str__ must not break the log line
            return "<unprintable>"
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code") if isinstance(error.response, dict) else None
        return f"{_aws_name(code)} ({_aws_name(error.operation_name)})"
    return WITHHELD


def _headline(error: BaseException) -> str:
    cls = type(error)
    name = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
    text = shown_message(error)
    return f"{name}: {text}" if text else name


def _group_lines(group: BaseExceptionGroup[BaseException], seen: set[int], depth: int) -> list[str]:
    """A group's members, each with its own chain (what `seen` already holds is not printed again)."""
    if depth >= _MAX_GROUP_DEPTH:
        return [f"+---------------- ... ----------------\n| (max group depth is {_MAX_GROUP_DEPTH})\n"]
    members = group.exceptions
    lines: list[str] = []
    for number, member in enumerate(members[:_MAX_GROUP_WIDTH], start=1):
        lines.append(f"+---- {number} ----\n")
        member_lines = _chain_lines(member, seen, depth + 1)
        lines += [f"| {line}" for line in "".join(member_lines).splitlines(keepends=True)]
    if len(members) > _MAX_GROUP_WIDTH:
        lines.append(f"+---- and {len(members) - _MAX_GROUP_WIDTH} more exceptions ----\n")
    return lines


def _one(error: BaseException, seen: set[int], depth: int) -> list[str]:
    """One exception: its frames (file, line, function, statement) and its headline, with its notes and,
    for a group, its members."""
    lines = ["Traceback (most recent call last):\n"] if error.__traceback__ is not None else []
    lines += traceback.format_list(traceback.extract_tb(error.__traceback__))
    lines.append(_headline(error) + "\n")
    if message_is_ours(error):
        lines += [f"{note}\n" for note in getattr(error, "__notes__", None) or ()]
    if isinstance(error, BaseExceptionGroup):
        lines += _group_lines(error, seen, depth)
    return lines


def _next_link(error: BaseException) -> tuple[BaseException | None, str]:
    if error.__cause__ is not None:
        return error.__cause__, _CAUSE
    if error.__context__ is not None and not error.__suppress_context__:
        return error.__context__, _CONTEXT
    return None, ""


def _chain_lines(error: BaseException, seen: set[int], depth: int) -> list[str]:
    """`error` and the exceptions it follows, oldest first; one `seen` through the whole recursion (as the
    traceback module keeps), so a cycle through a group's members ends."""
    chain: list[tuple[BaseException, str]] = [(error, "")]  # newest first, each with how the next follows
    seen.add(id(error))
    current, link = _next_link(error)
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append((current, link))
        current, link = _next_link(current)
    lines: list[str] = []
    for index in range(len(chain) - 1, -1, -1):
        lines += _one(chain[index][0], seen, depth)
        if index:
            lines.append(chain[index][1])
    return lines


def redacted_lines(error: BaseException) -> list[str]:
    """What `traceback.format_exception` prints for `error` and its chain, with every message that is not
    ours replaced by WITHHELD (a ClientError's by its code and operation)."""
    return _chain_lines(error, set(), 0)


def redacted_traceback(error: BaseException) -> str:
    """The redacted traceback; never raises (logging must not fail the code that logs): an exception it
    cannot render is its class alone."""
    try:
        return "".join(redacted_lines(error)).rstrip("\n")
    except Exception:  # whatever breaks the redactor (a cycle, a broken attribute) must not reach the caller
        return f"{type(error).__name__}: <traceback unavailable>"


def log_failure(log: logging.Logger, error: BaseException, message: str, *args: object) -> None:
    """`log.exception` for a stdlib logger without the app's redacting filter (the local stack's): the
    message, then the error's redacted traceback."""
    log.error(f"{message}\n%s", *args, redacted_traceback(error))


class _RedactedText(str):
    """An exception text the app logger's filter redacted: a formatter prints it instead of redacting again
    (any other exc_text, set by a stdlib formatter, may be the full traceback)."""


def _exception_text(record: logging.LogRecord) -> str:
    if isinstance(record.exc_text, _RedactedText):
        return record.exc_text
    return _format_exc_info(record.exc_info) if isinstance(record.exc_info, tuple) else ""


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
            line = f"{line}\n{_exception_text(record)}"
        return line

    def formatException(self, ei: Any) -> str:
        return _format_exc_info(ei)


class RedactingJsonFormatter(LambdaPowertoolsFormatter):
    """Powertools' JSON lines, with the exception redacted in each field that carries it: `exception` (the
    traceback, through formatException), `stack_trace.value` (the exception itself, until serialized) and
    `exception_notes`."""

    def formatException(self, ei: Any) -> str:
        return _format_exc_info(ei)

    def _extract_log_exception(self, log_record: logging.LogRecord) -> Any:
        # Powertools' (3.37) one call of formatException, here given the record: the filter's text is reused
        error = log_record.exc_info[1] if isinstance(log_record.exc_info, tuple) else None
        if error is None:
            return None, None, None
        return _exception_text(log_record), type(error).__name__, getattr(error, "__notes__", None)

    def serialize(self, log: Any) -> str:
        trace = log.get("stack_trace")
        error = trace.get("value") if isinstance(trace, dict) else None
        if not (isinstance(error, BaseException) and message_is_ours(error)):
            log = {key: value for key, value in log.items() if key != "exception_notes"}
        if isinstance(trace, dict) and "value" in trace:
            shown = shown_message(error) if isinstance(error, BaseException) else WITHHELD
            log["stack_trace"] = {**trace, "value": shown}
        return super().serialize(log)


def _redact_exception_text(record: logging.LogRecord) -> bool:
    """The app logger's filter: the record's exception redacted once, into `exc_text`, which a stdlib
    formatter on another handler of this logger prints as it is and ours reuse. A logger's filter sees only
    the records logged on that logger: the local stack's loggers use `log_failure`. Never raises."""
    if isinstance(record.exc_info, tuple) and record.exc_info[1] is not None:
        record.exc_text = _RedactedText(redacted_traceback(record.exc_info[1]))
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
