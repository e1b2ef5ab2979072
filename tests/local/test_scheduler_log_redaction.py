"""A scheduled handler's error is logged by the local scheduler redacted, as the app's own logger does: frames
and classes, not what a server answered. Before, `log.exception` printed the whole chain: the app logger's
redacting filter applies only to the records logged on that logger, not to the local stack's."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from chalicelib.local.scheduler import Scheduler

MARKER = "SECRET-MARKER"


def test_a_failing_scheduled_handler_is_logged_without_the_servers_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sched = Scheduler(clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))

    def handler(event: Any, context: Any) -> None:
        try:
            raise ClientError({"Error": {"Code": "InternalError", "Message": MARKER}}, "GetObject")
        except ClientError as error:
            raise RuntimeError(f"{MARKER} a builtin's message") from error

    sched.add("nightly", "rate(1 minute)", handler, "app-dev-nightly")
    with caplog.at_level(logging.ERROR, logger="chalicelib.local.scheduler"):
        (invocation,) = sched.tick(datetime(2026, 1, 1, 0, 1, tzinfo=UTC))
    assert isinstance(invocation.error, RuntimeError)
    assert "scheduled app-dev-nightly failed" in caplog.text and "in handler" in caplog.text
    assert "ClientError: InternalError (GetObject)" in caplog.text
    assert MARKER not in caplog.text
