"""Each function is given the URLs of exactly the queues it uses (infra/stack.py), so its code never looks one
up (GetQueueUrl: a round trip per queue on every cold start) and no role may; the IAM check holds a function
that uses a queue it is not given to that lookup, which its role refuses."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from chalicelib.local.aws_calls import AwsCall
from chalicelib.local.moto_server import ACCOUNT_ID
from chalicelib.local.provision import ProvisionedResource
from chalicelib.settings import load_settings

from .iam_policy import RoleBook, package_stack, stack_module

REGION = "us-east-1"
#: Lambda refuses a function whose environment (names and values) is over 4 KB
LAMBDA_ENVIRONMENT_LIMIT = 4096


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def url_of(queue_name: str) -> str:
    return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT_ID}/{queue_name}"


@pytest.fixture(scope="module")
def roles(packaged: dict[str, Any]) -> RoleBook:
    """The roles, with every queue of the template created as on AWS (`weknora-<name>`, its URL)."""
    created = {}
    for logical, spec in packaged["Resources"].items():
        if spec.get("Type") == "AWS::SQS::Queue":
            name = spec["Properties"]["QueueName"]["Fn::Sub"].replace("${Prefix}", "weknora")
            arn = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"
            created[logical] = ProvisionedResource(logical, "AWS::SQS::Queue", name, arn, url_of(name))
    return RoleBook(packaged, created, {}, REGION)


def functions(packaged: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in packaged["Resources"].items() if v.get("Type") == "AWS::Serverless::Function"}


def sqs_resources(packaged: dict[str, Any], function: dict[str, Any], *, looked_up: bool = False) -> set[str]:
    """The queues (logical ids) the function's role names in its SQS statements (conditional ones included):
    all of them, or those it may look up (sqs:GetQueueUrl)."""
    role = function["Properties"]["Role"]["Fn::GetAtt"][0]
    found = set()
    for policy in packaged["Resources"][role]["Properties"]["Policies"]:
        for statement in policy["PolicyDocument"]["Statement"]:
            statement = statement["Fn::If"][1] if "Fn::If" in statement else statement
            actions = statement["Action"]
            if "sqs:GetQueueUrl" in actions if looked_up else any(a.startswith("sqs:") for a in actions):
                found |= {r["Fn::GetAtt"][0] for r in statement["Resource"]}
    return found


def test_each_function_is_given_the_url_of_exactly_the_queues_its_role_names(
    packaged: dict[str, Any], roles: RoleBook
) -> None:
    stack_module()  # puts infra/ on sys.path
    permissions = importlib.import_module("permissions")
    for name, function in functions(packaged).items():
        variables = roles.queue_variables(name)
        given = {value["Ref"] for value in variables.values()}
        looked_up = sqs_resources(packaged, function, looked_up=True)
        assert given == sqs_resources(packaged, function) - looked_up, name
        # read back as the function's settings read them: each name's URL is the URL of that queue
        settings = load_settings({variable: str(roles.resolve(ref)) for variable, ref in variables.items()})
        assert {permissions.QUEUES[q]: url for q, url in settings.queue_urls.items()} == {
            ref["Ref"]: url_of(roles.created[ref["Ref"]].name)
            for ref in variables.values()
            if ref["Ref"] in permissions.QUEUES.values()
        }, name
        assert {
            permissions.dead_letter_queue(q): url for q, url in settings.dead_letter_queue_urls.items()
        } == {
            ref["Ref"]: url_of(roles.created[ref["Ref"]].name)
            for ref in variables.values()
            if ref["Ref"] not in permissions.QUEUES.values()
        }, name
    chunking = {v["Ref"] for v in roles.queue_variables("ChunkingStage").values()}
    assert chunking == {
        "ChunkingQueue",
        "ChunkingDeadLetterQueue",
        "EmbeddingQueue",
        "DocreaderQueue",
        "WebhooksQueue",
        "WebhooksSlowQueue",  # a delivery to a degraded webhook (its slow lane)
        "WebhooksDeadLetterQueue",  # a webhook delivery the queue did not take is parked there
    }


def test_only_the_api_may_look_a_queue_up_and_only_the_dead_letter_queues(
    packaged: dict[str, Any], roles: RoleBook
) -> None:
    """The operators' DLQ routes are the API's only lookups: 11 more URLs would take 1 KB more of its 4 KB."""
    for name, function in functions(packaged).items():
        looked_up = sqs_resources(packaged, function, looked_up=True)
        if name != "APIHandler":
            assert not looked_up, name
            continue
        assert looked_up == {f"{logical.removesuffix('Queue')}DeadLetterQueue" for logical in _stage_queues()}
        assert not looked_up & {v["Ref"] for v in roles.queue_variables(name).values()}


def _stage_queues() -> list[str]:
    stack_module()
    return list(importlib.import_module("permissions").QUEUES.values())


def test_a_call_by_a_url_the_function_is_not_given_counts_its_lookup(roles: RoleBook) -> None:
    docreader = url_of("weknora-docreader")
    send = AwsCall("ChunkingStage", "sqs", "SendMessage", (("QueueUrl", docreader),))
    assert not roles.denied([send])  # given: no lookup, and the send is granted
    lookups = [r for r in roles.requests(send) if r.action == "sqs:GetQueueUrl"]
    assert not lookups

    stray = AwsCall("WikiTask", "sqs", "SendMessage", (("QueueUrl", docreader),))
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:weknora-docreader"
    assert roles.denied([stray]) == [
        f"WikiTask: sqs:GetQueueUrl on {arn} (SendMessage)",
        f"WikiTask: sqs:SendMessage on {arn} (SendMessage)",
    ]


def test_a_granted_queue_whose_url_is_taken_away_needs_the_lookup_the_role_refuses(
    packaged: dict[str, Any], roles: RoleBook
) -> None:
    without = json.loads(json.dumps(packaged))
    del without["Resources"]["ChunkingStage"]["Properties"]["Environment"]["Variables"][
        "WEKNORA_QUEUE_URL_DOCREADER"
    ]
    book = RoleBook(without, roles.created, {}, REGION)
    send = AwsCall("ChunkingStage", "sqs", "SendMessage", (("QueueUrl", url_of("weknora-docreader")),))
    arn = f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:weknora-docreader"
    assert book.denied([send]) == [f"ChunkingStage: sqs:GetQueueUrl on {arn} (SendMessage)"]


def test_every_environment_fits_lambdas_limit_with_room_for_the_parameters(
    packaged: dict[str, Any], roles: RoleBook
) -> None:
    """The API is given 11 URLs (every stage queue): with the defaults, a long region and a long prefix, its
    environment keeps 1.25 KB free for the JSON parameters (ModelCatalog, StorageBackends, CorsOrigins) an
    operator may make longer."""
    globals_ = packaged["Globals"]["Function"]["Environment"]["Variables"]
    parameters = packaged["Parameters"]
    for name, function in functions(packaged).items():
        variables = {**globals_, **function["Properties"].get("Environment", {}).get("Variables", {})}
        size = 0
        for variable, value in variables.items():
            if isinstance(value, dict) and "Ref" in value and value["Ref"] in roles.created:
                # a queue URL in a long region name, under a 20-character prefix
                text = url_of(roles.created[value["Ref"]].name).replace(REGION, "ap-southeast-4")
                text = text.replace("weknora", "w" * 20)
            elif isinstance(value, dict) and "Ref" in value and value["Ref"] in parameters:
                text = str(parameters[value["Ref"]].get("Default", ""))
            else:  # another intrinsic (an ARN, an endpoint): 120 characters at most
                text = value if isinstance(value, str) else "x" * 120
            size += len(variable) + len(text)
        assert size <= LAMBDA_ENVIRONMENT_LIMIT - 1280, (name, size)
