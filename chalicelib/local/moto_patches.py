"""Every use of moto's private internals, fenced to the moto version it was written for.

The local stack replaces moto's hot paths (DynamoDB's data-plane answers written by `json.dumps`, a
state machine's definition parsed once for all its executions, and in `moto_dynamodb` a Query that reads
only its partition and transactions that copy only what they touch), bounds what moto keeps for ever
(`moto_bounds`), lets a callback task take its callbacks as soon as its message is sent
(`moto_callbacks`), remembers which backend serves a host,
and empties the stack's tables, queues and buckets in place between tests. All of it reaches into moto's
private classes, so it applies only on `PATCHED_FOR` (the version pyproject.toml pins, where a test checks
each patch answers as moto does). On any other version none of it applies and one warning says so: moto
then runs as it ships, slower, never broken (`empty_in_place` answers False and callers reset through the
API instead).

Not fenced: the middleware that serialises DynamoDB requests (moto_server.py). It wraps moto's WSGI app
from outside, through public interfaces only, and it is a correctness fix (moto checks a condition and
writes in two unlocked steps), not a speed-up.
"""

from __future__ import annotations

import base64
import functools
import importlib.metadata
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

#: the moto release these patches were written and tested against (pyproject.toml pins it)
PATCHED_FOR = "5.2.5"


def installed_moto() -> str:
    return importlib.metadata.version("moto")


@functools.cache
def patches_apply() -> bool:
    """True on the pinned moto; otherwise False, with one warning per process."""
    installed = installed_moto()
    if installed == PATCHED_FOR:
        return True
    log.warning(
        "moto %s is installed; the local stack's patches of moto's internals were written for %s and are "
        "not applied: moto runs as it ships (slower, and each test resets the server through its API)",
        installed,
        PATCHED_FOR,
    )
    return False


# ---------------------------------------------------------------- DynamoDB answers by json.dumps

#: DynamoDB operations whose results moto builds as plain dicts already in the wire's shape (items as
#: AttributeValue maps): no timestamps, no model objects.
DATA_PLANE = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "Query",
        "Scan",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)


def _blob_as_base64(value: object) -> str:
    if isinstance(value, bytes | bytearray):  # moto keeps B/BS values raw for its serializer
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not in DynamoDB's data-plane results")


def serialized_as_json(handler: Any, action_result: Any) -> Any:
    """moto's DynamoDB results of the data plane written by `json.dumps`; everything else (errors, the
    control plane) through moto's serializer. The serializer walks botocore's shape model value by value
    and was half of moto's DynamoDB CPU under the local stack; for these results it writes the same JSON
    (what botocore parses is equal, a test compares the two on every attribute type)."""
    from moto.core.responses import BaseResponse

    result = action_result.result
    if isinstance(result, dict) and handler._get_action() in DATA_PLANE:
        headers = {"Content-Type": "application/x-amz-json-1.0", **handler.response_headers}
        return 200, headers, json.dumps(result, default=_blob_as_base64)
    return BaseResponse.serialized(handler, action_result)


# ---------------------------------------------------------------- Step Functions: parse a definition once


def parse_once(parse: Callable[[str], tuple[Any, Any]]) -> Callable[[str], tuple[Any, Any]]:
    """moto parses a state machine's ASL with ANTLR again for every execution (about 50 ms for ours, per
    document); the syntax tree depends on the definition alone and is only read, so it is parsed once. The
    evaluation components are built fresh each time: executions keep state in them."""
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    syntax_tree = functools.lru_cache(maxsize=16)(lambda definition: parse(definition)[1])

    def parse_with_cached_tree(definition: str) -> tuple[Any, Any]:
        tree = syntax_tree(definition)  # a bad definition raises, and nothing is cached
        return Preprocessor().visit(tree), tree

    return parse_with_cached_tree


_sped_up = False


def speed_up_moto() -> bool:
    """Once per process, before the first server starts; False (nothing replaced) on another moto. The
    Step Functions parser is imported here, not at the top: it takes 1.5 s, and the CLI's client commands
    import the server module."""
    global _sped_up
    if not patches_apply():
        return False
    if not _sped_up:
        from moto.dynamodb.responses import DynamoHandler
        from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

        from chalicelib.local import moto_bounds, moto_callbacks, moto_changes, moto_dynamodb

        DynamoHandler.serialized = serialized_as_json  # type: ignore[method-assign,assignment]
        AmazonStateLanguageParser.parse = staticmethod(parse_once(AmazonStateLanguageParser.parse))  # type: ignore[method-assign,assignment]
        moto_dynamodb.install()  # a Query reads its partition, a transaction saves only what it touches
        moto_changes.install()  # which items changed since the last snapshot
        moto_bounds.install()  # deleted receipts and finished executions kept within bounds
        moto_callbacks.install()  # a task's token answers from the moment its message is sent
        _sped_up = True
    return True


# ---------------------------------------------------------------- which backend serves a host


def wsgi_dispatcher() -> Any:
    """moto's dispatcher; on the pinned version one that remembers which backend serves a host (moto finds
    it on every request by listing its service packages on disk: 8% of the server's CPU locally)."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    if not patches_apply():
        return DomainDispatcherApplication(create_backend_app)

    class RememberingDispatcher(DomainDispatcherApplication):
        def __init__(self) -> None:
            super().__init__(create_backend_app)
            self._backend_of: dict[str | None, Any] = {}

        def get_backend_for_host(self, host: str | None) -> Any:  # called under moto's lock
            if host not in self._backend_of:
                self._backend_of[host] = super().get_backend_for_host(host)
            return self._backend_of[host]

    return RememberingDispatcher()


# ---------------------------------------------------------------- emptying a stack in place


@dataclass
class Footprint:
    """The moto objects behind a provisioned stack, by name: a reset that empties them in place is only
    sound while these very objects are all there is (a test that deleted or recreated one changed more
    than data)."""

    tables: dict[str, object] = field(default_factory=dict)
    queues: dict[str, object] = field(default_factory=dict)
    buckets: dict[str, object] = field(default_factory=dict)
    state_machines: dict[str, object] = field(default_factory=dict)


def _backends(account: str, region: str) -> tuple[Any, Any, Any, Any]:
    # moto's in-memory backends of this process (the server runs in a thread of it).
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends
    from moto.sqs.models import sqs_backends
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    return (
        dynamodb_backends[account][region],
        sqs_backends[account][region],
        s3_backends[account]["aws"],
        stepfunctions_parser_backends[account][region],
    )


def footprint(account: str, region: str) -> Footprint | None:
    """What exists now in this process's backends; None on another moto (nothing is read)."""
    if not patches_apply():
        return None
    dynamodb, sqs, s3, sfn = _backends(account, region)
    return Footprint(
        tables=dict(dynamodb.tables),
        queues=dict(sqs.queues),
        buckets=dict(s3.buckets),
        state_machines={sm.arn: sm for sm in sfn.state_machines},
    )


def _same_objects(now: Footprint, expected: Footprint) -> bool:
    def same(a: dict[str, object], b: dict[str, object]) -> bool:
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)

    return (
        same(now.tables, expected.tables)
        and same(now.queues, expected.queues)
        and same(now.buckets, expected.buckets)
        and same(now.state_machines, expected.state_machines)
    )


def empty_in_place(account: str, region: str, expected: Footprint) -> bool:
    """Drop every item, message, object and execution but keep the resources themselves: the same end
    state as a reset followed by provisioning again, in microseconds instead of ~40 API calls. False (and
    nothing changed) on another moto, or when the resources are not exactly `expected`."""
    now = footprint(account, region)
    if now is None or not _same_objects(now, expected):
        return False
    from moto.s3.models import FakeKey

    dynamodb, sqs, s3, sfn = _backends(account, region)
    for sm in sfn.state_machines:
        for execution in list(sm.executions):
            if execution.status == "RUNNING":
                sm.stop_execution(execution.execution_arn)
        sm.executions.clear()
    from chalicelib.local.moto_changes import change_log, object_log
    from chalicelib.local.moto_dynamodb import forget_index_maps

    for table in dynamodb.tables.values():
        table.items.clear()
        forget_index_maps(table)
        change_log.cleared(table)
    for queue in sqs.queues.values():
        with queue._messages_lock:
            queue._messages = []
            queue._pending_messages = set()
        queue.last_purged_at = None
    for name, bucket in s3.buckets.items():
        object_log.cleared(name)
        for key in bucket.keys.values():
            if isinstance(key, FakeKey):  # not a delete marker: it holds a temporary file
                key.dispose()
        for part in bucket.multiparts.values():
            part.dispose()
        bucket.keys.clear()
        bucket.multiparts.clear()
    return True
