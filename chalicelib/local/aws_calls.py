"""Which function made which AWS call, as the local runtime runs them.

The runtime names the function (its logical id in the packaged template) around every invocation: each SQS
batch, each scheduled run, each HTTP request. Every metered client (`adapters/aws_metering.py`) tells the
`CallLog` of each call it makes, and the log keeps the call with the function named at that moment, so the
tests can check each call against that function's own IAM role (tests/infra/iam_policy.py). Work a handler
hands to a thread pool carries the name along (`contextvars.copy_context()` at each submit).

An SQS call names its queue by URL. On AWS each function is given the URLs of the queues it uses
(infra/stack.py); for any other queue its adapter would look the URL up first (`GetQueueUrl`). Locally one
process serves every function with every URL, so what a cold start of a function would look up depends on
that function's environment in the packaged template: tests/infra/iam_policy.py (`RoleBook.requests`) adds
the lookup there, where the template is known, not here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from chalice.utils import to_cfn_resource_name

from chalicelib.adapters import aws_metering

F = TypeVar("F", bound=Callable[..., Any])
#: the logical id of the API function in `chalice package` output
API_FUNCTION = "APIHandler"
#: the request parameters that name what a call acts on (enough to derive its IAM action and resource)
_NAMING_PARAMETERS = (
    "TableName",
    "IndexName",
    "Bucket",
    "Key",
    "Prefix",
    "CopySource",
    "QueueUrl",
    "QueueName",
    "stateMachineArn",
    "executionArn",
    "TranscriptionJobName",
    "OutputBucketName",
    "OutputKey",
    "modelId",
    "Name",
)

_function: ContextVar[str | None] = ContextVar("weknora_local_function", default=None)


def logical_id(handler_name: str) -> str:
    """A Chalice handler's logical id in the packaged template (`chunking_stage` -> `ChunkingStage`)."""
    return API_FUNCTION if handler_name == "api_handler" else to_cfn_resource_name(handler_name)


@contextmanager
def invoking(function: str) -> Iterator[None]:
    token = _function.set(function)
    try:
        yield
    finally:
        _function.reset(token)


def attributed(function: str, handler: F) -> F:
    """`handler` with every AWS call it makes attributed to `function`."""

    @functools.wraps(handler)
    def invoke(*args: Any, **kwargs: Any) -> Any:
        with invoking(function):
            return handler(*args, **kwargs)

    return invoke  # type: ignore[return-value]


@dataclass(frozen=True)
class AwsCall:
    function: str
    service: str  # the endpoint prefix: s3, dynamodb, sqs, states, ...
    operation: str  # the API name: GetObject, Query, SendMessage, ...
    parameters: tuple[tuple[str, str], ...]  # the naming parameters, as text

    def parameter(self, name: str) -> str:
        return dict(self.parameters).get(name, "")


def _naming(params: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    named: list[tuple[str, str]] = []
    for name in _NAMING_PARAMETERS:
        value = params.get(name)
        if value is None:
            continue
        if name == "CopySource" and isinstance(value, Mapping):
            value = f"{value.get('Bucket')}/{value.get('Key')}"
        named.append((name, str(value)))
    # batch and transaction calls name their tables inside the request
    if isinstance(params.get("RequestItems"), Mapping):
        named += [("TableName", str(table)) for table in params["RequestItems"]]
    delete = params.get("Delete")
    if isinstance(delete, Mapping):  # S3 DeleteObjects names its keys inside the request
        named += [("Key", str(entry.get("Key"))) for entry in delete.get("Objects") or []]
    for entry in params.get("Entries") or []:  # EventBridge PutEvents names its bus in each entry
        if isinstance(entry, Mapping) and entry.get("EventBusName"):
            named.append(("EventBusName", str(entry["EventBusName"])))
    for item in params.get("TransactItems") or []:
        for operation, request in item.items():
            named.append((f"Transact{operation}", str(request.get("TableName", ""))))
    return tuple(named)


class CallLog:
    """The distinct calls made inside named functions since `start()` (calls outside any are the tests' own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: set[AwsCall] = set()

    def start(self) -> CallLog:
        aws_metering.observe_calls(self._observe)
        return self

    def stop(self) -> None:
        aws_metering.stop_observing(self._observe)

    def _observe(self, service: str, operation: str, params: Mapping[str, Any]) -> None:
        function = _function.get()
        if function is None:
            return
        call = AwsCall(function, service, operation, _naming(params))
        with self._lock:
            self._calls.add(call)

    def take(self) -> list[AwsCall]:
        """The calls recorded since the last take."""
        with self._lock:
            calls, self._calls = self._calls, set()
        return sorted(calls, key=lambda c: (c.function, c.service, c.operation, c.parameters))
