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
    assert "botocore.exceptions.ClientError: InternalError (GetObject)" in text  # code, operation
    assert f"urllib3.exceptions.ProtocolError: {WITHHELD}" in text
    assert "The above exception was the direct cause of the following exception" in text


def test_the_json_formatter_keeps_frames_and_classes_and_withholds_the_servers_words() -> None:
    line = RedactingJsonFormatter().format(_record(_caught(RuntimeError, "a bug")))
    assert MARKER not in line
    logged = json.loads(line)
    assert logged["exception_name"] == "RuntimeError"
    assert f"RuntimeError: {WITHHELD}" in logged["exception"]  # builtins: ours or not, withheld
    assert "botocore.exceptions.ClientError: InternalError (GetObject)" in logged["exception"]
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


# Review mends: logging never fails on the redactor; every class of ours keeps its message; a ClientError its
# code and operation; one redaction per record; the chain's links say how each exception follows the last.


def _log_through_the_apps_logger(error: BaseException) -> str:
    """`logger.exception` on the app's logger (its filter runs), as a plain handler added to it prints it."""
    sink = io.StringIO()
    plain = logging.StreamHandler(sink)
    app_logger = logging.getLogger(observability.SERVICE)
    app_logger.addHandler(plain)
    try:
        try:
            raise error
        except BaseException:
            observability.logger.exception("stage failed")  # must not raise
    finally:
        app_logger.removeHandler(plain)
    return sink.getvalue()


def _member_raised_from_its_group() -> BaseException:
    """What `except ExceptionGroup as g: raise g.exceptions[0]` makes: a member whose context is its group."""
    try:
        raise ExceptionGroup("g", [ValueError(MARKER)])
    except ExceptionGroup as group:
        try:
            raise group.exceptions[0]
        except ValueError as member:
            return member
    raise AssertionError("nothing raised")


def test_a_member_whose_context_is_its_group_is_logged_without_raising() -> None:
    text = _log_through_the_apps_logger(_member_raised_from_its_group())
    assert "ExceptionGroup: <message withheld>" in text and "+---- 1 ----" in text
    assert "During handling of the above exception" in text and MARKER not in text
    assert "traceback unavailable" not in text  # rendered, not the fallback


def test_an_error_with_an_exceptions_attribute_that_is_no_group_is_logged_without_raising() -> None:
    class Odd(Exception):
        exceptions = 5

    text = _log_through_the_apps_logger(Odd(MARKER))
    assert f"Odd: {WITHHELD}" in text and MARKER not in text


def test_a_redactor_that_fails_leaves_the_class_alone_and_never_the_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(error: BaseException) -> list[str]:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(observability, "redacted_lines", broken)
    error = RuntimeError(MARKER)
    text = _log_through_the_apps_logger(error)
    assert "RuntimeError: <traceback unavailable>" in text and MARKER not in text
    for formatter in (ReadableFormatter(), RedactingJsonFormatter()):
        line = formatter.format(_record(error))
        assert "RuntimeError: <traceback unavailable>" in line and MARKER not in line


def test_every_class_of_ours_keeps_its_message_and_a_builtin_we_raise_does_not() -> None:
    from chalicelib.adapters.storage_backends import StorageCredentialsMissing
    from chalicelib.net.ssrf import BlockKind, URLBlocked

    blocked = observability.redacted_traceback(
        URLBlocked("http://10.0.0.1", "resolves to a private address", BlockKind.INTERNAL_ADDRESS)
    )
    assert blocked == "chalicelib.net.ssrf.URLBlocked: URL not allowed: resolves to a private address"
    missing = observability.redacted_traceback(
        StorageCredentialsMissing("WEKNORA_STORAGE_MINIO_SECRET is not set")
    )
    assert missing.endswith("StorageCredentialsMissing: WEKNORA_STORAGE_MINIO_SECRET is not set")
    assert observability.redacted_traceback(KeyError(MARKER)) == f"KeyError: {WITHHELD}"


@pytest.mark.parametrize(
    ("code", "operation", "shown"),
    [
        ("ThrottlingException", "PutItem", "ThrottlingException (PutItem)"),
        (f"{MARKER} the server wrote this", "PutItem", f"{WITHHELD} (PutItem)"),  # not an identifier
        ("x" * 65, "GetObject", f"{WITHHELD} (GetObject)"),
    ],
)
def test_a_client_error_shows_its_code_and_operation_only(code: str, operation: str, shown: str) -> None:
    error = ClientError({"Error": {"Code": code, "Message": f"{MARKER} the body"}}, operation)
    assert observability.redacted_traceback(error) == f"botocore.exceptions.ClientError: {shown}"
    assert json.loads(RedactingJsonFormatter().format(_record(error)))["stack_trace"]["value"] == shown


def test_a_record_is_redacted_once_however_many_handlers_print_it(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[BaseException] = []
    real = observability.redacted_lines

    def counted(error: BaseException) -> list[str]:
        calls.append(error)
        return real(error)

    monkeypatch.setattr(observability, "redacted_lines", counted)
    sinks = [io.StringIO() for _ in range(3)]
    handlers = [logging.StreamHandler(sink) for sink in sinks]
    handlers[0].setFormatter(ReadableFormatter())
    handlers[1].setFormatter(RedactingJsonFormatter())  # handlers[2]: the stdlib formatter
    app_logger = logging.getLogger(observability.SERVICE)
    for handler in handlers:
        app_logger.addHandler(handler)
    try:
        try:
            _adapter_call(RuntimeError, "a bug")
        except RuntimeError:
            observability.logger.exception("stage failed")
    finally:
        for handler in handlers:
            app_logger.removeHandler(handler)
    assert len(calls) == 1  # the filter's; the app's own handler and these three reuse it
    for sink in sinks:
        assert "_provider_call" in sink.getvalue() and MARKER not in sink.getvalue()


def test_a_formatter_redacts_an_exception_text_it_did_not_get_from_the_filter() -> None:
    """A record from another logger may carry the full traceback a stdlib formatter cached in exc_text."""
    record = _record(_caught(RuntimeError, "a bug"))
    logging.Formatter().format(record)  # caches the unredacted traceback
    assert record.exc_text and MARKER in record.exc_text
    assert MARKER not in ReadableFormatter().format(record)
    assert MARKER not in RedactingJsonFormatter().format(record)


def test_each_link_of_a_chain_says_how_the_next_exception_follows() -> None:
    def chained() -> None:
        try:
            try:
                raise KeyError("a")
            except KeyError as error:
                raise ValueError("b") from error
        except ValueError:
            raise TypeError("c")  # noqa: B904 (the context link, not a cause)

    try:
        chained()
    except TypeError as error:
        text = observability.redacted_traceback(error)
    cause = text.index("The above exception was the direct cause")
    context = text.index("During handling of the above exception")
    assert text.index("KeyError") < cause < text.index("ValueError") < context < text.index("TypeError")


def test_a_transient_aws_error_becomes_service_unreachable_without_the_botocore_error() -> None:
    from chalicelib.adapters.aws_errors import unanswered_is_unreachable

    with pytest.raises(ServiceUnreachable) as caught, unanswered_is_unreachable("SQS"):
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": MARKER}}, "SendMessage")
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert MARKER not in observability.redacted_traceback(caught.value)
