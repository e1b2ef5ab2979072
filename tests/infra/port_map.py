"""Which IAM requests each port call makes, for the static reach check (tests/infra/reach.py).

- DynamoDB ports are derived, not declared: the composition root (`bootstrap.build_services`) says which
  adapter serves each port, the adapter's PynamoDB model attributes say its tables, and each method's source
  says what it does to which model (`get` -> GetItem, `batch_write` -> BatchWriteItem, a transaction's
  `save` -> PutItem, ...), through the `self.<helper>` calls it makes.
- The queue, workflow, file and event ports are declared here, one line per method; the queue's, the
  workflow's and the files' declarations are checked against the boto3 operations their adapters' methods
  make (test_iam_reach.py), so they cannot drift.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from typing import Any

from pynamodb.models import Model

from chalicelib.settings import TABLES, Settings

from .reach import Need, PortCall, PortMap

#: SQS: what each TaskQueue method asks of the queue its first argument names ("queue") and of that queue's
#: dead-letter queue ("dead-letter-queue"); every method needs the queue's URL, which a function is given in
#: its environment (infra/stack.py) or else looks up (GetQueueUrl, once per process): the reach check asks
#: for that lookup only where the URL is not given (test_iam_reach.allowed). A dead-letter queue's URL not
#: given is found through its queue's RedrivePolicy ("redrive-policy": GetQueueAttributes on the queue).
QUEUE_METHODS: dict[str, tuple[tuple[str, str], ...]] = {
    "send": (("sqs:GetQueueUrl", "queue"), ("sqs:SendMessage", "queue")),
    "send_raw": (("sqs:GetQueueUrl", "queue"), ("sqs:SendMessage", "queue")),
    "backlog": (("sqs:GetQueueUrl", "queue"), ("sqs:GetQueueAttributes", "queue")),
    "retry_later": (("sqs:GetQueueUrl", "queue"), ("sqs:ChangeMessageVisibility", "queue")),
    "dead_letter": (
        ("sqs:GetQueueUrl", "queue"),
        ("sqs:GetQueueAttributes", "redrive-policy"),
        ("sqs:GetQueueUrl", "dead-letter-queue"),
        ("sqs:SendMessage", "dead-letter-queue"),
    ),
    "receive_dead_letters": (
        ("sqs:GetQueueUrl", "queue"),
        ("sqs:GetQueueAttributes", "redrive-policy"),
        ("sqs:GetQueueUrl", "dead-letter-queue"),
        ("sqs:ReceiveMessage", "dead-letter-queue"),
    ),
    "delete_dead_letter": (
        ("sqs:GetQueueUrl", "queue"),
        ("sqs:GetQueueAttributes", "redrive-policy"),
        ("sqs:GetQueueUrl", "dead-letter-queue"),
        ("sqs:DeleteMessage", "dead-letter-queue"),
    ),
    "release_dead_letter": (
        ("sqs:GetQueueUrl", "queue"),
        ("sqs:GetQueueAttributes", "redrive-policy"),
        ("sqs:GetQueueUrl", "dead-letter-queue"),
        ("sqs:ChangeMessageVisibility", "dead-letter-queue"),
    ),
}
#: a queue whose name the walk could not resolve: the role must allow the request on every queue
ANY_QUEUE = "<any: name not resolved>"
#: Step Functions (adapters/workflow.py): executions are named per (knowledge, attempt); task tokens name
#: their task, so their callbacks have no resource
WORKFLOW_METHODS: dict[str, tuple[Need, ...]] = {
    "start": (Need("states:StartExecution", "state-machine"),),
    "is_running": (Need("states:DescribeExecution", "execution"),),
    "stop": (Need("states:StopExecution", "execution"),),
    "transitions": (
        Need("states:DescribeExecution", "execution"),
        Need("states:GetExecutionHistory", "execution"),
    ),
    "task_success": (Need("states:SendTaskSuccess", "task-token"),),
    "task_failure": (Need("states:SendTaskFailure", "task-token"),),
    "task_heartbeat": (Need("states:SendTaskHeartbeat", "task-token"),),
}
#: ports that make no AWS request from a Lambda: HTTP through the SSRF-safe client, and the health probe
#: (the API's /health; its requests are the API's, which may do all of them)
NO_AWS_PORTS = frozenset({"urls", "webhook_sender", "health"})
#: S3 (FileStore, adapters/storage.py): an object's key is built at run time from ids, and the grants go by
#: key prefix, so a request names "some object of the files bucket" and a role passes when it allows the
#: action under any prefix (test_iam_reach.OBJECT_PREFIXES); which prefix is the e2e check's to prove
FILE_STORE_METHODS: dict[str, tuple[str, ...]] = {
    "save": ("s3:PutObject",),
    "save_if_absent": ("s3:PutObject",),  # a conditional PutObject (If-None-Match) needs no other action
    "replace_if_unchanged": ("s3:GetObject", "s3:PutObject"),  # reads the ETag, then If-Match
    "read": ("s3:GetObject",),
    "read_chunks": ("s3:GetObject",),  # one GetObject whose body is read a piece at a time
    "delete": ("s3:DeleteObject",),
    "exists": ("s3:GetObject", "s3:ListBucket"),  # HeadObject; a missing key answers 404 only with ListBucket
    "size": ("s3:GetObject",),
    "list_keys": ("s3:ListBucket",),  # ListObjectsV2 (a tenant's pending FAQ uploads: faq/uploads.py)
    "url_for": (),
    "key_of": (),
    # a presigned URL carries the signer's permissions: the role must allow what the URL's holder does
    "presign_put": ("s3:PutObject",),
    "presign_post": ("s3:PutObject",),  # a form upload is a PutObject too
    "presign_get": ("s3:GetObject",),
    "copy": ("s3:GetObject", "s3:PutObject"),
    "backend": (),  # the store it returns is used through dynamic dispatch (not followed)
    "backend_ids": (),
}
FILE_PORTS = frozenset({"files", "inbox"})

_DYNAMO_READ = {
    "get": "GetItem",
    "refresh": "GetItem",
    "batch_get": "BatchGetItem",
    "query": "Query",
    "scan": "Scan",
    "count": "Query",
    "describe_table": "DescribeTable",
    "exists": "DescribeTable",
}
_DYNAMO_WRITE = {
    "save": "PutItem",
    "update": "UpdateItem",
    "delete": "DeleteItem",
    "delete_item": "DeleteItem",  # the table connection's own call (ReturnValues, which Model.delete lacks)
    "batch_write": "BatchWriteItem",
}
#: builtins that hand their argument's items on (an alias of what they wrap)
_PASS_THROUGH = frozenset({"list", "tuple", "sorted", "reversed", "iter", "next"})
_TRANSACTION = {
    "save": "PutItem",
    "update": "UpdateItem",
    "delete": "DeleteItem",
    "condition_check": "ConditionCheckItem",
    "get": "GetItem",
}


class DynamoAdapter:
    """One PynamoDB adapter class: each method's requests, derived from its source."""

    def __init__(self, adapter: Any, table_of: dict[str, str]) -> None:
        self.cls = type(adapter)
        #: attribute -> the table's name in the code ("tenants")
        self.models = {
            attribute: table_of[value.Meta.table_name]
            for attribute, value in vars(adapter).items()
            if isinstance(value, type) and issubclass(value, Model)
        }
        tree = ast.parse(textwrap.dedent(inspect.getsource(self.cls)))
        (definition,) = tree.body
        assert isinstance(definition, ast.ClassDef)
        self.methods = {m.name: m for m in definition.body if isinstance(m, ast.FunctionDef)}
        self.unresolved: list[str] = []
        self._needs: dict[str, frozenset[Need]] = {}

    def needs(self, method: str) -> frozenset[Need]:
        if method not in self._needs:
            self._needs[method] = frozenset(self._walk(method, set()))
        return self._needs[method]

    def _walk(self, method: str, seen: set[str]) -> Iterator[Need]:
        if method in seen or method not in self.methods:
            return
        seen.add(method)
        body = self.methods[method]
        aliases: dict[str, set[str]] = {}  # local name -> models it is (a model, an item of it, a batch)
        batches: set[str] = set()
        transactions: set[str] = set()
        for node in ast.walk(body):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                for name, value in _pairs(node.targets[0], node.value):
                    models = self._model_of(value, aliases, alias=True)
                    if models:
                        aliases[name] = models
            elif isinstance(node, ast.For) and isinstance(node.target, ast.Name):
                models = self._model_of(node.iter, aliases)
                if models:
                    aliases[node.target.id] = models
            elif isinstance(node, ast.With):
                for item in node.items:
                    if not isinstance(item.optional_vars, ast.Name):
                        continue
                    context = item.context_expr
                    opener = _name(context.func) if isinstance(context, ast.Call) else ""
                    if opener in ("TransactWrite", "TransactGet"):
                        transactions.add(item.optional_vars.id)
                    elif opener == "batch_write":
                        batches.add(item.optional_vars.id)
        for node in ast.walk(body):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver, verb = node.func.value, node.func.attr
            if isinstance(receiver, ast.Name) and receiver.id == "self" and verb in self.methods:
                yield from self._walk(verb, seen)
                continue
            if isinstance(receiver, ast.Name) and receiver.id in transactions and verb in _TRANSACTION:
                models = self._model_of(node.args[0], aliases) if node.args else set()
                if not models:
                    self.unresolved.append(f"{self.cls.__name__}.{method}: {ast.unparse(node)}")
                for model in models:
                    yield Need(f"dynamodb:{_TRANSACTION[verb]}", "table", self.models[model])
                continue
            if isinstance(receiver, ast.Name) and receiver.id in batches and verb in ("save", "delete"):
                continue  # the batch_write that opened it is the request
            models = self._model_of(receiver, aliases, index=verb in ("query", "scan", "count"))
            action = _DYNAMO_WRITE.get(verb) or _DYNAMO_READ.get(verb)
            if action and not models and not isinstance(receiver, ast.Attribute):
                # a request on something not known as a model (an item handed in as an argument?); an
                # attribute's `delete`/`exists` is an update action or a condition, not a request
                self.unresolved.append(f"{self.cls.__name__}.{method}: {ast.unparse(node)[:90]}")
            if models and action:
                if verb == "count" and not node.args and not node.keywords:
                    action = "DescribeTable"  # a count of the whole table reads its description
                for model in models:
                    yield Need(f"dynamodb:{action}", "table", self.models[model])

    def _model_of(
        self, expr: ast.expr, aliases: dict[str, set[str]], *, index: bool = False, alias: bool = False
    ) -> set[str]:
        """The models `expr` is: `self.model`, an alias, an item `self.model(...)`, what a read returns,
        an index of one (`self.model.kb_index` queried, or named by an alias), or what a
        `self.<helper>(...)` returns."""
        if isinstance(expr, ast.Name):
            return set(aliases.get(expr.id, ()))
        if isinstance(expr, ast.Attribute):
            if isinstance(expr.value, ast.Name) and expr.value.id == "self" and expr.attr in self.models:
                return {expr.attr}
            if index or (alias and expr.attr.endswith("_index")) or expr.attr == "_get_connection":
                return self._model_of(expr.value, aliases)
            return set()
        if isinstance(expr, ast.Call):
            func = expr.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.value.id == "self"
            ):
                if func.attr in self.models:
                    return {func.attr}
                if func.attr in self.methods:  # a helper that builds or reads items
                    returns = [
                        n.value
                        for n in ast.walk(self.methods[func.attr])
                        if isinstance(n, ast.Return | ast.Yield)
                    ]
                    return {m for r in returns if r is not None for m in self._model_of(r, {})}
                return set()
            if isinstance(func, ast.Attribute) and func.attr in _DYNAMO_READ:
                return self._model_of(func.value, aliases, index=True)
            if isinstance(func, ast.Name) and func.id in _PASS_THROUGH:  # list(self.model.query(...))
                return {m for arg in expr.args for m in self._model_of(arg, aliases)}
            return self._model_of(func, aliases)
        if isinstance(expr, ast.ListComp | ast.GeneratorExp):  # [i for i in self.model.query(...) if ...]
            return {m for g in expr.generators for m in self._model_of(g.iter, aliases)}
        if isinstance(expr, ast.Subscript | ast.Starred):
            return self._model_of(expr.value, aliases)
        return set()


def _pairs(target: ast.expr, value: ast.expr) -> list[tuple[str, ast.expr]]:
    """The names an assignment binds, each with its value (`a, b = x, y` too)."""
    if isinstance(target, ast.Name):
        return [(target.id, value)]
    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and len(target.elts) == len(value.elts):
        return [p for t, v in zip(target.elts, value.elts, strict=True) for p in _pairs(t, v)]
    return []


def _name(expr: ast.expr) -> str:
    return expr.id if isinstance(expr, ast.Name) else expr.attr if isinstance(expr, ast.Attribute) else ""


class ServicesPortMap(PortMap):
    """The port map of the AWS composition root (`bootstrap.build_services`)."""

    def __init__(self, services: Any, settings: Settings) -> None:
        table_of = {settings.table(name): name for name in TABLES}
        self.dynamo: dict[str, DynamoAdapter] = {}
        for port in vars(services):
            adapter = getattr(services, port)
            if (
                any(isinstance(v, type) and issubclass(v, Model) for v in vars(adapter).values())
                if hasattr(adapter, "__dict__")
                else False
            ):
                self.dynamo[port] = DynamoAdapter(adapter, table_of)
        self.embedding_cache = DynamoAdapter(services.embedding_cache(), table_of)
        self.unknown: set[tuple[str, str]] = set()

    def needs(self, call: PortCall) -> frozenset[Need]:
        port, method = call.port, call.method
        if port in self.dynamo:
            return (
                self.dynamo[port].needs(method)
                if method in self.dynamo[port].methods
                else self._unknown(call)
            )
        if port == "queue" and method in QUEUE_METHODS:
            named = call.args[0] if call.args else None
            queues = sorted(named) if named is not None else [ANY_QUEUE]
            return frozenset(Need(action, kind, q) for q in queues for action, kind in QUEUE_METHODS[method])
        if port == "workflow" and method in WORKFLOW_METHODS:
            return frozenset(WORKFLOW_METHODS[method])
        if port == "events" and method == "publish":
            return frozenset({Need("events:PutEvents", "event-bus")})
        if port == "deps" and method == "embedding_cache":
            # the cache is used through the object it returns: any of its methods may follow
            return frozenset(n for m in self.embedding_cache.methods for n in self.embedding_cache.needs(m))
        if port in FILE_PORTS and method in FILE_STORE_METHODS:
            return frozenset(
                Need(action, "bucket" if action == "s3:ListBucket" else "object")
                for action in FILE_STORE_METHODS[method]
            )
        if port in NO_AWS_PORTS or port == "settings":
            return frozenset()
        return self._unknown(call)

    def every_need(self, port: str) -> frozenset[Need]:
        methods: list[str] = []
        if port in self.dynamo:
            methods = list(self.dynamo[port].methods)
        elif port == "queue":
            methods = list(QUEUE_METHODS)
        elif port == "workflow":
            methods = list(WORKFLOW_METHODS)
        elif port == "events":
            methods = ["publish"]
        return frozenset(n for m in methods for n in self.needs(PortCall(port, m, (None,))))

    def _unknown(self, call: PortCall) -> frozenset[Need]:
        self.unknown.add((call.port, call.method))
        return frozenset()

    def unresolved(self) -> list[str]:
        """The adapters' requests whose model the derivation could not tell, in any of their methods."""
        adapters = [*self.dynamo.values(), self.embedding_cache]
        for adapter in adapters:
            for method in adapter.methods:
                adapter.needs(method)
        return sorted({line for a in adapters for line in a.unresolved})
