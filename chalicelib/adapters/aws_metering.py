"""Counts every AWS call a client makes into the current meter, through botocore's own events.

One handler per client sees each call after it returns: the request count by service (S3 split into its
two price tiers), the bytes S3 moved, DynamoDB's consumed capacity as the service reports it (requested on
every call that can return it), Textract's page count. Nothing is estimated from document sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.domain import metering

#: (service endpoint prefix, operation, request parameters): told of every call a metered client makes
CallObserver = Callable[[str, str, Mapping[str, Any]], None]
_observers: list[CallObserver] = []

#: DynamoDB operations that can return ConsumedCapacity, and which kind of unit they spend
_DYNAMODB_READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
_DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}
_S3_TIER1 = {
    "PutObject",
    "CopyObject",
    "CreateMultipartUpload",
    "UploadPart",
    "UploadPartCopy",
    "CompleteMultipartUpload",
    "ListObjects",
    "ListObjectsV2",
    "ListObjectVersions",
    "ListBuckets",
    "DeleteObjects",  # a POST
}
_S3_FREE = {"DeleteObject", "AbortMultipartUpload"}  # deletes cost nothing
_REQUEST_COUNTERS = {"sqs": metering.SQS_REQUESTS, "states": metering.SFN_REQUESTS}


def meter_client(client: Any) -> Any:
    """Registers the metering handlers on a boto3/botocore client (idempotent) and returns it."""
    events = client.meta.events
    if getattr(client, "_weknora_metered", False):
        return client
    events.register("before-parameter-build.dynamodb", _ask_for_capacity)
    events.register("before-parameter-build.s3", _count_upload_bytes)
    events.register("after-call", _count_call)
    events.register("before-parameter-build", _tell_observers)
    client._weknora_metered = True
    return client


def observe_calls(observer: CallObserver) -> None:
    """Tells `observer` of every call (and every presigned URL) a metered client makes from now on; the local
    runtime records them to prove each function's IAM role (tests/infra). Nothing observes on Lambda."""
    if observer not in _observers:
        _observers.append(observer)


def stop_observing(observer: CallObserver) -> None:
    if observer in _observers:
        _observers.remove(observer)


def _tell_observers(params: dict[str, Any], model: Any, **_: Any) -> None:
    for observer in _observers:
        observer(model.service_model.endpoint_prefix, model.name, params)


def _ask_for_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
    if model.name in _DYNAMODB_READS | _DYNAMODB_WRITES and "ReturnConsumedCapacity" not in params:
        params["ReturnConsumedCapacity"] = "TOTAL"


def _count_upload_bytes(params: dict[str, Any], model: Any, **_: Any) -> None:
    if model.name not in {"PutObject", "UploadPart"}:
        return
    body = params.get("Body")
    if isinstance(body, bytes | bytearray | memoryview):
        metering.record(metering.S3_BYTES_IN, len(body))
    elif isinstance(body, str):
        metering.record(metering.S3_BYTES_IN, len(body.encode()))
    elif body is not None and hasattr(body, "seek") and hasattr(body, "tell"):
        start = body.tell()
        body.seek(0, 2)
        metering.record(metering.S3_BYTES_IN, body.tell() - start)
        body.seek(start)


def _count_call(model: Any, parsed: dict[str, Any] | None = None, **_: Any) -> None:
    if metering.current_meter() is None:
        return
    service = model.service_model.endpoint_prefix
    operation = model.name
    parsed = parsed or {}
    if service == "s3":
        if operation in _S3_FREE:
            return
        tier = metering.S3_TIER1_REQUESTS if operation in _S3_TIER1 else metering.S3_TIER2_REQUESTS
        metering.record(tier, 1)
        if operation == "GetObject":
            metering.record(metering.S3_BYTES_OUT, float(parsed.get("ContentLength") or 0))
    elif service == "dynamodb":
        _count_capacity(operation, parsed.get("ConsumedCapacity"))
    elif service == "textract":
        metering.record(metering.OTHER_AWS_REQUESTS, 1)
        metering.record(
            metering.TEXTRACT_PAGES, float((parsed.get("DocumentMetadata") or {}).get("Pages") or 0)
        )
    elif service in _REQUEST_COUNTERS:
        metering.record(_REQUEST_COUNTERS[service], 1)
    else:
        metering.record(metering.OTHER_AWS_REQUESTS, 1)


def _count_capacity(operation: str, capacity: Any) -> None:
    """ConsumedCapacity is one dict, or a list (batch and transaction calls), of CapacityUnits."""
    entries = capacity if isinstance(capacity, list) else [capacity] if isinstance(capacity, dict) else []
    units = sum(float(entry.get("CapacityUnits") or 0) for entry in entries)
    if operation in _DYNAMODB_READS:
        metering.record(metering.DYNAMODB_READ_UNITS, units)
    elif operation in _DYNAMODB_WRITES:
        metering.record(metering.DYNAMODB_WRITE_UNITS, units)


def meter_pynamodb() -> None:
    """PynamoDB builds its own botocore clients (one per model, lazily): meter each one at its first call,
    through PynamoDB's pre-send signal (blinker), so building the models stays free at cold start."""
    from pynamodb.signals import pre_dynamodb_send

    pre_dynamodb_send.connect(_meter_connection)


def _meter_connection(sender: Any, **_: Any) -> None:
    meter_client(sender.client)
