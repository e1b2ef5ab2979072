"""Readiness: does each backing service answer? Each probe is one cheap call; none raises."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from chalicelib.observability import logger


class AwsHealthProbe:
    def __init__(
        self,
        *,
        knowledge_table: Callable[[], Any],
        queue: Any,
        queues: Sequence[str],
        bucket: Callable[[], Any],
    ) -> None:
        self._checks: dict[str, Callable[[], Any]] = {
            "table": knowledge_table,
            "queues": lambda: [queue.ping(name) for name in queues],
            "bucket": bucket,
        }

    def probe(self) -> dict[str, bool]:
        results = {}
        for name, check in self._checks.items():
            try:
                check()
                results[name] = True
            except Exception as error:  # a probe reports; it never fails the health route itself
                # the class and AWS's code alone: its message can name accounts, roles and resources
                code = (
                    str(error.response.get("Error", {}).get("Code", ""))
                    if isinstance(error, ClientError)
                    else ""
                )
                logger.warning(
                    "health check failed", extra={"check": name, "error": type(error).__name__, "code": code}
                )
                results[name] = False
        return results
