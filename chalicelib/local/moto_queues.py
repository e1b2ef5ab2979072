"""Every SQS queue's messages as moto holds them, read and put back inside the moto server's process, for
the snapshot (`snapshot.py`): private internals of moto, answered only on the moto version it pins.

Read without receiving: a receive would count against the message's redrive policy, change its receipt and
hide it from the pollers. Each message keeps what SQS reports of it (its id, body, message and system
attributes, sent and first-receive timestamps, receive count, FIFO group and deduplication ids) and when it
becomes visible or deliverable again (an in-flight message whose poller died with the stack comes back when
its visibility timeout ends, as on AWS). Putting them back sets all of it, which the API could not (a
send starts at receive count 0, sent now): a dead letter shows its original receive count and age, and a
message a stage has retried keeps counting towards its last try.

A queue's digest (its messages' ids, receive counts and timers) lets a save skip the queues that did not
change since the last one.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any
from urllib.parse import parse_qs

#: the moto server's path for the queues' messages (not an AWS API)
QUEUES_PATH = "/_weknora/sqs-messages"


def _attributes_out(attributes: dict[str, Any]) -> dict[str, Any]:
    """moto keeps a binary message attribute's value as bytes: base64 in the snapshot's JSON."""
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        value = dict(value)
        binary = value.get("BinaryValue")
        if isinstance(binary, bytes | bytearray):
            value["BinaryValue"] = base64.b64encode(binary).decode("ascii")
            value["BinaryValueBase64"] = True
        out[name] = value
    return out


def _attributes_in(attributes: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in attributes.items():
        value = dict(value)
        if value.pop("BinaryValueBase64", False):
            value["BinaryValue"] = base64.b64decode(value["BinaryValue"])
        out[name] = value
    return out


def digest(messages: list[Any]) -> str:
    state = hashlib.sha256()
    for m in messages:
        state.update(f"{m.id}/{m.approximate_receive_count}/{m.visible_at}/{m.delayed_until};".encode())
    return state.hexdigest()


def message_record(m: Any) -> dict[str, Any]:
    return {
        "id": m.id,
        "body": m.body,
        "attributes": _attributes_out(m.message_attributes),
        "system_attributes": _attributes_out(m.system_attributes or {}),
        "sent_ms": m.sent_timestamp,
        "first_receive_ms": m.approximate_first_receive_timestamp,
        "receive_count": m.approximate_receive_count,
        "group_id": m.group_id,
        "deduplication_id": m.deduplication_id,
        "sequence_number": m.sequence_number,
        "visible_at_ms": m.visible_at,
        "delayed_until_ms": m.delayed_until,
    }


def read(backend: Any, known: dict[str, str]) -> dict[str, Any]:
    """{"queues": {name: {"digest": d, "messages": [record] or None}}} for every queue; messages only where
    the digest differs from `known[name]` (None: unchanged since the snapshot that reported it)."""
    queues: dict[str, Any] = {}
    for name, queue in list(backend.queues.items()):
        messages = list(queue._messages)  # visible, delayed and in flight alike; a copy: others append
        now = digest(messages)
        records = None if known.get(name) == now else [message_record(m) for m in messages]
        queues[name] = {"digest": now, "messages": records}
    return {"queues": queues}


def restore(backend: Any, saved: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Puts each queue's saved messages back, in their order, as they were; {"restored": {name: n},
    "missing": [name]} (queues the server does not have)."""
    from moto.core.utils import unix_time_millis
    from moto.moto_api._internal import mock_random
    from moto.sqs.models import Message

    restored: dict[str, int] = {}
    missing: list[str] = []
    for name, records in saved.items():
        queue = backend.queues.get(name)
        if queue is None:
            missing.append(name)
            continue
        for r in records:
            # a letter saved by an older snapshot has its body and attributes only
            message = Message(
                r.get("id") or str(mock_random.uuid4()),
                r["body"],
                _attributes_in(r.get("system_attributes") or {}),
            )
            message.message_attributes = _attributes_in(r.get("attributes") or {})
            message.sent_timestamp = r.get("sent_ms") or int(unix_time_millis())  # type: ignore[assignment]
            message.approximate_first_receive_timestamp = r.get("first_receive_ms")
            message.approximate_receive_count = int(r.get("receive_count") or 0)
            message.group_id = r.get("group_id")
            message.deduplication_id = r.get("deduplication_id")
            message.sequence_number = r.get("sequence_number")
            message.visible_at = float(r.get("visible_at_ms") or 0.0)
            message.delayed_until = float(r.get("delayed_until_ms") or 0.0)
            message.receipt_handle = None
            queue.add_message(message)
        restored[name] = len(records)
    return {"restored": restored, "missing": missing}


def answer(query: str, body: bytes, account: str) -> bytes:
    """The body of the server's reply to QUEUES_PATH?<query> (`region=...`; `restore=1`), given the
    request's JSON: {"known": {queue: digest}} to read, {"queues": {queue: [record]}} to restore."""
    from moto.sqs.models import sqs_backends

    params = parse_qs(query)
    backend = sqs_backends[account][params.get("region", ["us-east-1"])[0]]
    request = json.loads(body or b"{}")
    if params.get("restore") == ["1"]:
        return json.dumps(restore(backend, request.get("queues", {}))).encode()
    return json.dumps(read(backend, request.get("known", {}))).encode()
