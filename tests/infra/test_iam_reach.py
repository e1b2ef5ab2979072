"""Every AWS request a Lambda function's code can reach, its role allows: a static check, over every path.

The e2e check (tests/e2e/conftest.py) proves the calls the tests' runs make; paths no test takes slipped
through it (f8a2e33: the chunking and embedding stages' wake of the next waiter on the docreader queue;
01d0c74: housekeeping's backlog of the chunking and embedding queues and its tenants' rows). This walks the
code instead (tests/infra/reach.py) from each function's entry in app.py and functions/, turns each port
call into IAM requests (tests/infra/port_map.py) and asks the packaged template's role, as the e2e check
does (tests/infra/iam_policy.py). S3 is checked by action only, on some object of the files bucket (an
object's key is built at run time): which prefix is the e2e check's to prove.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import textwrap
from typing import Any

import botocore.session
import pytest
from botocore import xform_name

from chalicelib.adapters.queues import SqsTaskQueue
from chalicelib.adapters.storage import S3FileStore
from chalicelib.adapters.workflow import StepFunctionsWorkflow
from chalicelib.bootstrap import build_services
from chalicelib.local.aws_calls import logical_id
from chalicelib.settings import QUEUES, Settings

from .iam_policy import ROOT, Request, RoleBook, package_stack, stack_module, statement_allows
from .port_map import ANY_QUEUE, FILE_STORE_METHODS, QUEUE_METHODS, WORKFLOW_METHODS, ServicesPortMap
from .reach import UNKNOWN_STAGE, Need, PortCall, Program

REGION = "us-east-1"
#: the container-image function (infra/template.json), which Chalice does not package from app.py
DOCREADER_ENTRY = "functions.docreader.handler:handler"


def entry_points() -> dict[str, list[str]]:
    """Each Lambda function's entries: app.py's queue and schedule handlers are a function each (their
    logical id), every other handler (routes, middleware, the preflight) is the API function's."""
    tree = ast.parse((ROOT / "app.py").read_text())
    entries: dict[str, list[str]] = {"DocreaderStage": [DOCREADER_ENTRY]}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        decorators = {
            d.func.attr
            for d in node.decorator_list
            if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
        }
        own = decorators & {"on_sqs_message", "schedule"}
        function = logical_id(node.name) if own else logical_id("api_handler")
        entries.setdefault(function, []).append(f"app:{node.name}")
    return entries


def queue_logical_id(need: Need) -> str:
    stack_module()  # puts infra/ on sys.path
    permissions = importlib.import_module("permissions")
    if need.kind == "queue":
        return str(permissions.QUEUES[need.name])
    return str(permissions.dead_letter_queue(need.name))


def arn_of(roles: RoleBook, need: Need) -> str:
    """The resource a request names, as the packaged template's roles resolve it."""
    stack_module()  # puts infra/ on sys.path
    permissions = importlib.import_module("permissions")
    if need.kind in ("queue", "dead-letter-queue"):
        expression: Any = {"Fn::GetAtt": [queue_logical_id(need), "Arn"]}
    elif need.kind == "table":
        expression = {"Fn::GetAtt": [permissions.TABLES[need.name], "Arn"]}
    elif need.kind == "state-machine":
        expression = {"Ref": "KnowledgeStateMachine"}
    elif need.kind == "execution":
        expression = {
            "Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}"
            ":execution:${Prefix}-knowledge:a-knowledge-1"
        }
    elif need.kind == "event-bus":
        expression = {"Fn::GetAtt": ["EventBus", "Arn"]}
    elif need.kind == "bucket":
        expression = {"Fn::GetAtt": ["FilesBucket", "Arn"]}
    elif need.kind == "task-token":
        expression = "*"
    else:
        raise ValueError(f"no resource for {need}")
    return str(roles.resolve(expression))


#: where the code keeps objects in the files bucket: tenants' files at the top level, the service prefixes
OBJECT_PREFIXES = (
    "a-tenant/",
    "uploads/",
    "intents/",
    "faq-imports/",
    "transcribe/",
    "image-texts/",
    "move-tags/",
    "move-across/",
)


def arns_of(roles: RoleBook, need: Need) -> list[str]:
    """The resources a request may name: one; every queue for a queue not resolved; for "some object of the
    bucket" one under each prefix."""
    if need.name == ANY_QUEUE:
        return [arn_of(roles, Need(need.action, need.kind, queue)) for queue in QUEUES]
    if need.kind != "object":
        return [arn_of(roles, need)]
    bucket = roles.resolve({"Fn::GetAtt": ["FilesBucket", "Arn"]})
    return [f"{bucket}/{prefix}an-object" for prefix in OBJECT_PREFIXES]


def given_url(roles: RoleBook, function: str, need: Need) -> bool:
    """The function's environment gives the URL of the queue `need` names (every queue, for one not
    resolved): its adapter then makes no GetQueueUrl call."""
    queues = QUEUES if need.name == ANY_QUEUE else (need.name,)
    return all(
        roles.resolve({"Ref": queue_logical_id(Need(need.action, need.kind, queue))}).rsplit("/", 1)[-1]
        in roles.queue_urls[function]
        for queue in queues
    )


def allowed(roles: RoleBook, function: str, need: Need) -> bool:
    """Some object of the bucket will do; a queue not resolved may be any queue, so it must be every one. A
    queue's URL lookup is needed only where the function is not given the URL, and a dead-letter queue's
    RedrivePolicy lookup only where it is not given the dead-letter queue's URL."""
    if need.action == "sqs:GetQueueUrl" and given_url(roles, function, need):
        return True
    if need.kind == "redrive-policy":
        if given_url(roles, function, Need(need.action, "dead-letter-queue", need.name)):
            return True
        need = Need(need.action, "queue", need.name)
    decisions = [roles.allows(function, Request(need.action, arn)) for arn in arns_of(roles, need)]
    return any(decisions) if need.kind == "object" else all(decisions)


@pytest.fixture(scope="module")
def roles(tmp_path_factory: pytest.TempPathFactory) -> RoleBook:
    # no stack is provisioned: every resource resolves to a placeholder ARN of its logical id
    return RoleBook(package_stack(tmp_path_factory.mktemp("package")), {}, {}, REGION)


@pytest.fixture(scope="module")
def port_map() -> ServicesPortMap:
    settings = Settings()
    return ServicesPortMap(build_services(settings), settings)


Reached = dict[str, dict[Need, tuple[str, ...]]]


@pytest.fixture(scope="module")
def program(port_map: ServicesPortMap) -> Program:
    return Program(port_map)


@pytest.fixture(scope="module")
def reached(program: Program) -> Reached:
    return program.function_reach(entry_points())


def denied(roles: RoleBook, reached: Reached) -> list[str]:
    """One line per reachable request the function's role refuses, with the call path that reaches it."""
    refused = []
    for function, needs in sorted(reached.items()):
        for need, path in sorted(needs.items()):
            if not allowed(roles, function, need):
                where = f"{need.kind} {need.name}".strip()
                refused.append(f"{function}: {need.action} on {where} (via {' -> '.join(path)})")
    return refused


def test_every_request_a_function_can_reach_its_role_allows(roles: RoleBook, reached: Reached) -> None:
    assert set(reached) == set(roles.policies)
    refused = denied(roles, reached)
    assert not refused, "\n".join(refused)


def test_every_port_call_the_walk_meets_is_mapped(
    port_map: ServicesPortMap, program: Program, reached: Reached
) -> None:
    assert not port_map.unknown, sorted(port_map.unknown)
    assert not port_map.unresolved(), port_map.unresolved()
    # every stage written to a row's `queued_stage` is known, so housekeeping's backlog reads are resolved
    assert program.queued_stages is not None and UNKNOWN_STAGE not in program.queued_stages


def test_the_walk_finds_the_paths_the_e2e_suite_missed(program: Program, reached: Reached) -> None:
    """The gaps found late (f8a2e33, 01d0c74) are requests the walk reaches, through the paths that hid them."""
    for stage in ("ChunkingStage", "EmbeddingStage"):
        wake = reached[stage][Need("sqs:SendMessage", "queue", "docreader")]
        assert wake[-2:] == ("wake_waiters", "enqueue"), wake
    housekeeping = reached["Housekeeping"]
    assert program.queued_stages is not None and {"chunking", "embedding"} <= program.queued_stages
    for queue in ("chunking", "embedding"):
        assert housekeeping[Need("sqs:GetQueueAttributes", "queue", queue)][-1] == "_why_alive"
    for action in ("dynamodb:GetItem", "dynamodb:UpdateItem"):
        assert "leave_pipeline" in housekeeping[Need(action, "table", "tenants")]


def test_the_walk_meets_the_apis_listing_of_a_tenants_pending_faq_uploads() -> None:
    """faq/uploads.py lists the tenant's prefix (s3:ListBucket on the bucket: the grant the role check above
    proves); `exists` needs the same action, so this says the listing itself is reached, not only the action."""
    settings = Settings()
    port_map = ServicesPortMap(build_services(settings), settings)
    met: list[PortCall] = []

    class Recording:
        def needs(self, call: PortCall) -> frozenset[Need]:
            met.append(call)
            return port_map.needs(call)

        def every_need(self, port: str) -> frozenset[Need]:
            return port_map.every_need(port)

    Program(Recording()).walk(entry_points()["APIHandler"])
    listings = [call for call in met if (call.port, call.method) == ("inbox", "list_keys")]
    assert listings and port_map.needs(listings[0]) == {Need("s3:ListBucket", "bucket")}


def without(roles: RoleBook, function: str, need: Need) -> RoleBook:
    """The same roles with every statement of `function`'s that allows `need` taken out."""
    requests = [Request(need.action, arn) for arn in arns_of(roles, need)]
    packaged = copy.deepcopy(roles.packaged)
    role = packaged["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]
    for policy in packaged["Resources"][role]["Properties"]["Policies"]:
        document = policy["PolicyDocument"]
        document["Statement"] = [
            s
            for s in document["Statement"]
            if not (isinstance(r := roles.resolve(s), dict) and any(statement_allows(r, q) for q in requests))
        ]
    return RoleBook(packaged, roles.created, roles.parameters, roles.region)


@pytest.mark.parametrize(
    ("function", "need"),
    [
        ("ChunkingStage", Need("sqs:SendMessage", "queue", "docreader")),  # f8a2e33
        ("EmbeddingStage", Need("sqs:SendMessage", "queue", "docreader")),  # f8a2e33
        ("Housekeeping", Need("sqs:GetQueueAttributes", "queue", "chunking")),  # 01d0c74
        ("Housekeeping", Need("sqs:GetQueueAttributes", "queue", "embedding")),  # 01d0c74
        ("Housekeeping", Need("dynamodb:UpdateItem", "table", "tenants")),  # 01d0c74
        ("PostprocessTask", Need("dynamodb:UpdateItem", "table", "graph")),  # found by this check
        ("EnrichmentTask", Need("dynamodb:Query", "table", "graph")),  # found by this check
        ("ChunkingStage", Need("s3:GetObject", "object")),  # any object: the parsed Markdown
    ],
)
def test_a_grant_taken_away_fails_the_check_naming_it(
    roles: RoleBook, reached: Reached, function: str, need: Need
) -> None:
    refused = denied(without(roles, function, need), {function: reached[function]})
    named = f"{function}: {need.action} on {need.kind} {need.name}".strip()
    assert any(line.startswith(f"{named} (via ") for line in refused), refused


def without_url(roles: RoleBook, function: str, queue_logical: str) -> RoleBook:
    """The same roles with `function` no longer given the URL of `queue_logical`."""
    packaged = copy.deepcopy(roles.packaged)
    variables = packaged["Resources"][function]["Properties"]["Environment"]["Variables"]
    (name,) = [n for n, value in variables.items() if value == {"Ref": queue_logical}]
    del variables[name]
    return RoleBook(packaged, roles.created, roles.parameters, roles.region)


@pytest.mark.parametrize(
    ("function", "need", "taken"),
    [
        ("Housekeeping", Need("sqs:GetQueueUrl", "queue", "chunking"), "chunking"),  # its backlog probe
        (
            "ChunkingStage",
            Need("sqs:GetQueueUrl", "queue", "docreader"),
            "docreader",
        ),  # the next waiter's wake
        # a poison message parked
        ("DocreaderStage", Need("sqs:GetQueueUrl", "dead-letter-queue", "docreader"), "docreader"),
        # the operators' redrive names its queue at run time: every queue's URL must be given
        ("APIHandler", Need("sqs:GetQueueUrl", "queue", ANY_QUEUE), "wiki"),
    ],
)
def test_a_queue_url_taken_away_fails_the_check_naming_the_lookup(
    roles: RoleBook, reached: Reached, function: str, need: Need, taken: str
) -> None:
    """No role may look a queue's URL up: a function that uses a queue must be given its URL."""
    assert not denied(roles, {function: reached[function]})
    taken_away = without_url(roles, function, queue_logical_id(Need(need.action, need.kind, taken)))
    refused = denied(taken_away, {function: reached[function]})
    named = f"{function}: {need.action} on {need.kind} {need.name}"
    assert any(line.startswith(f"{named} (via ") for line in refused), refused


def client_operations(cls: type, method: str, service: str, seen: set[str] | None = None) -> set[str]:
    """The AWS operations an adapter's method makes, through its `self.<helper>` calls: `self.client.<op>()`
    calls, and operation names handed on as text (`get_paginator("get_execution_history")`)."""
    seen = seen if seen is not None else set()
    if method in seen:
        return set()
    seen.add(method)
    model = botocore.session.get_session().get_service_model(service)
    by_snake = {xform_name(name): name for name in model.operation_names}
    prefix = model.signing_name if service == "stepfunctions" else model.endpoint_prefix
    found: set[str] = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(getattr(cls, method))))):
        if isinstance(node, ast.Constant) and node.value in by_snake:
            found.add(f"{prefix}:{by_snake[node.value]}")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        receiver, name = node.func.value, node.func.attr
        on_client = isinstance(receiver, ast.Attribute) and receiver.attr == "client"
        if on_client and name == "generate_presigned_post":  # a form upload (POST Object) is a PutObject
            found.add(f"{prefix}:PutObject")
        elif on_client and name in by_snake:
            found.add(f"{prefix}:{by_snake[name]}")
        elif isinstance(receiver, ast.Name) and receiver.id == "self" and hasattr(cls, name):
            found |= client_operations(cls, name, service, seen)
    return found


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def test_the_queue_declaration_is_what_the_sqs_adapter_calls() -> None:
    # url and ping are the adapter's own (the health probe's), not the TaskQueue port's
    assert set(QUEUE_METHODS) == public_methods(SqsTaskQueue) - {"url", "ping"}
    for method, needs in QUEUE_METHODS.items():
        assert {action for action, _ in needs} == client_operations(SqsTaskQueue, method, "sqs"), method


def test_the_workflow_declaration_is_what_the_step_functions_adapter_calls() -> None:
    assert set(WORKFLOW_METHODS) == public_methods(StepFunctionsWorkflow)
    for method, needs in WORKFLOW_METHODS.items():
        operations = client_operations(StepFunctionsWorkflow, method, "stepfunctions")
        assert {need.action for need in needs} == operations, method


#: S3 operations as IAM names them (a HeadObject is authorised as s3:GetObject, a copy as both)
S3_ACTIONS = {
    "s3:PutObject": {"s3:PutObject"},
    "s3:GetObject": {"s3:GetObject"},
    "s3:HeadObject": {"s3:GetObject"},
    "s3:DeleteObject": {"s3:DeleteObject"},
    "s3:CopyObject": {"s3:GetObject", "s3:PutObject"},
    "s3:ListObjectsV2": {"s3:ListBucket"},
}


def test_the_file_store_declaration_is_what_the_s3_adapter_calls() -> None:
    assert set(FILE_STORE_METHODS) == public_methods(S3FileStore) | {"backend", "backend_ids"}
    for method, actions in FILE_STORE_METHODS.items():
        if method in ("backend", "backend_ids"):  # the routing store's: it hands on a store
            continue
        calls = client_operations(S3FileStore, method, "s3")
        called = {action for operation in calls for action in S3_ACTIONS[operation]}
        # `exists` asks ListBucket too: without it a missing key answers 403, not 404 (infra/permissions.py)
        assert set(actions) == called | ({"s3:ListBucket"} if method == "exists" else set()), method


#: URLs given (from a send grant) for a queue the walk finds no send to: LifecycleTask's grant on the enrichment
#: queue (infra/permissions.py) predates the walk, which finds no path from the lifecycle tasks to it
GIVEN_NOT_REACHED = {"LifecycleTask": {"EnrichmentQueue"}}


def test_each_function_is_given_the_urls_of_the_queues_its_code_reaches_and_no_other(
    roles: RoleBook, reached: Reached
) -> None:
    """The URLs come from the grants (infra/stack.py); the walk finds the same queues from the code. A queue
    reached but not given is one the role lets the function look up (the API's dead-letter queues)."""
    for function, needs in reached.items():
        used = {
            queue_logical_id(Need(n.action, n.kind, queue))
            for n in needs
            if n.kind in ("queue", "dead-letter-queue")
            for queue in (QUEUES if n.name == ANY_QUEUE else (n.name,))
        }
        given = {value["Ref"] for value in roles.queue_variables(function).values()}
        assert given - used == GIVEN_NOT_REACHED.get(function, set()), function
        for logical in used - given:
            lookup = Request("sqs:GetQueueUrl", roles.resolve({"Fn::GetAtt": [logical, "Arn"]}))
            assert function == "APIHandler" and roles.allows(function, lookup), (function, logical)
