"""Exceptions are logged redacted: the frames and every chained exception's class, but a message only when we
wrote it (a domain or port error). A library's message (botocore, urllib3) may quote what a remote server
answered, and nothing a server answers goes into a log.

Regression: adapters raise clean errors `from` the provider's, and the formatters printed the whole chain
with its messages; a batch whose every record failed raised Powertools' BatchProcessingError, whose text
holds each record's full traceback, into the Lambda's log."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest
from botocore.exceptions import ClientError
from urllib3.exceptions import ProtocolError

from chalicelib import observability
from chalicelib.domain.errors import ServiceUnavailable, TransientStageError
from chalicelib.observability import WITHHELD, ReadableFormatter, RedactingJsonFormatter
from chalicelib.ports import ServiceUnreachable
from chalicelib.settings import load_settings

MARKER = "SECRET-MARKER"


def _provider_call() -> None:
    raise ClientError(
        {"Error": {"Code": "InternalError", "Message": f"{MARKER} the server's body"}}, "GetObject"
    )


def _adapter_call(outer: type[Exception], message: str) -> None:
    try:
        try:
            _provider_call()
        except ClientError as error:
            raise ProtocolError(f"{MARKER} connection reset", error) from error
    except ProtocolError as error:
        raise outer(message) from error


def _caught(outer: type[Exception], message: str) -> BaseException:
    try:
        _adapter_call(outer, message)
    except Exception as error:
        return error
    raise AssertionError("nothing raised")


def _record(error: BaseException) -> logging.LogRecord:
    return logging.LogRecord(
        "weknora-ingest",
        logging.ERROR,
        __file__,
        1,
        "stage failed",
        None,
        (type(error), error, error.__traceback__),
    )


def _json(error: BaseException) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(RedactingJsonFormatter().format(_record(error)))
    return parsed


@pytest.mark.parametrize("outer", [RuntimeError, ServiceUnreachable])
def test_the_text_formatter_keeps_frames_and_classes_and_withholds_the_servers_words(
    outer: type[Exception],
) -> None:
    text = ReadableFormatter().format(_record(_caught(outer, "the backend did not answer")))
    assert MARKER not in text
    for frame in ("_provider_call", "_adapter_call", "_caught", "test_log_redaction.py"):
        assert frame in text
    assert f"botocore.exceptions.ClientError: {WITHHELD}" in text
    assert f"urllib3.exceptions.ProtocolError: {WITHHELD}" in text
    assert "The above exception was the direct cause of the following exception" in text


def test_the_json_formatter_keeps_frames_and_classes_and_withholds_the_servers_words() -> None:
    line = RedactingJsonFormatter().format(_record(_caught(RuntimeError, "a bug")))
    assert MARKER not in line
    logged = json.loads(line)
    assert logged["exception_name"] == "RuntimeError"
    assert f"RuntimeError: {WITHHELD}" in logged["exception"]  # builtins: ours or not, withheld
    assert f"botocore.exceptions.ClientError: {WITHHELD}" in logged["exception"]
    assert "_provider_call" in logged["exception"]
    trace = logged["stack_trace"]
    assert trace["type"] == "RuntimeError" and trace["value"] == WITHHELD
    assert any(frame["function"] == "_adapter_call" for frame in trace["frames"])


def test_a_foreign_exceptions_notes_are_withheld_too() -> None:
    error = _caught(RuntimeError, "a bug")
    error.add_note(f"{MARKER} a note")
    assert MARKER not in RedactingJsonFormatter().format(_record(error))
    assert MARKER not in ReadableFormatter().format(_record(error))


@pytest.mark.parametrize("outer", [ServiceUnavailable, TransientStageError, ServiceUnreachable])
def test_our_own_errors_keep_their_message(outer: type[Exception]) -> None:
    error = _caught(outer, "the search index is not answering; try again")
    logged = _json(error)
    assert f"{type(error).__name__}: the search index is not answering; try again" in logged["exception"]
    assert logged["stack_trace"]["value"] == "the search index is not answering; try again"
    text = ReadableFormatter().format(_record(error))
    assert "the search index is not answering; try again" in text and MARKER not in text


def test_on_lambda_the_app_logs_through_the_redacting_json_formatter(monkeypatch: pytest.MonkeyPatch) -> None:
    on_lambda = load_settings({"AWS_LAMBDA_FUNCTION_NAME": "weknora-embedding"})
    monkeypatch.setattr(observability, "get_settings", lambda: on_lambda)
    built: dict[str, Any] = {}

    def logger(**kwargs: Any) -> logging.Logger:
        built.update(kwargs)
        return logging.getLogger("test-log-redaction")

    monkeypatch.setattr(observability, "Logger", logger)
    observability._build_logger()
    assert isinstance(built["logger_formatter"], RedactingJsonFormatter)


def test_a_plain_handler_added_to_the_apps_logger_prints_the_redacted_traceback_too() -> None:
    """The logger's filter sets the record's exception text, which any stdlib formatter prints as it is."""
    sink = io.StringIO()
    plain = logging.StreamHandler(sink)
    app_logger = logging.getLogger(observability.SERVICE)  # the stdlib logger under Powertools'
    app_logger.addHandler(plain)
    try:
        try:
            _adapter_call(RuntimeError, "a bug")
        except RuntimeError:
            observability.logger.exception("stage failed")
    finally:
        app_logger.removeHandler(plain)
    assert "_provider_call" in sink.getvalue() and MARKER not in sink.getvalue()
