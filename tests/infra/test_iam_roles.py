"""The stack as `make package` deploys it: one least-privilege role per function, triggers bound to their
queue resources, logs kept, data retained, limits that protect the account, and no name outside `Prefix`.

What each role allows is proven against the calls the functions really make by the end-to-end suite
(tests/e2e/conftest.py evaluates every recorded call after each test; tests/e2e/test_iam_roles.py shows a
removed permission fails it). These tests check the template's shape.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from .iam_policy import package_stack, stack_module
from .test_monitoring import FUNCTIONS

#: the queue that triggers each stage function (the same expectation the monitoring tests hold)
STAGE_QUEUES = {function: queue for function, queue in FUNCTIONS.items() if queue}
EVENT_SOURCE_ACTIONS = {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def of_type(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v.get("Type") == kind}


def statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """The role's statements, a conditional one (`Fn::If`) as if its condition held: the most it may do."""
    policies = template["Resources"][role]["Properties"]["Policies"]
    listed = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    return [s["Fn::If"][1] if "Fn::If" in s else s for s in listed]


def role_of(function: dict[str, Any]) -> str:
    role = function["Properties"]["Role"]
    assert set(role) == {"Fn::GetAtt"} and role["Fn::GetAtt"][1] == "Arn", role
    return str(role["Fn::GetAtt"][0])


def test_every_function_has_a_role_of_its_own(template: dict[str, Any]) -> None:
    functions = of_type(template, "AWS::Serverless::Function")
    roles = {name: role_of(f) for name, f in functions.items()}
    assert len(functions) == 14
    assert len(set(roles.values())) == len(roles), roles
    assert set(roles.values()) == set(of_type(template, "AWS::IAM::Role"))
    assert "DefaultRole" not in template["Resources"]


def test_every_trigger_is_bound_to_its_queue_and_only_its_role_may_receive_from_it(
    template: dict[str, Any],
) -> None:
    functions = of_type(template, "AWS::Serverless::Function")
    for name, function in functions.items():
        events = [e for e in function["Properties"].get("Events", {}).values() if e["Type"] == "SQS"]
        receives = {
            json.dumps(resource)
            for s in statements(template, role_of(function))
            if set(s["Action"]) >= EVENT_SOURCE_ACTIONS
            for resource in s["Resource"]
        }
        if name not in STAGE_QUEUES:
            assert not events and not receives, name
            continue
        (event,) = events
        queue = {"Fn::GetAtt": [STAGE_QUEUES[name], "Arn"]}
        assert event["Properties"]["Queue"] == queue, name
        assert receives == {json.dumps(queue)}, name  # exactly its queue
        assert 2 <= event["Properties"]["ScalingConfig"]["MaximumConcurrency"] <= 20, name


def test_every_function_writes_its_own_log_group_with_retention(template: dict[str, Any]) -> None:
    groups = of_type(template, "AWS::Logs::LogGroup")
    for name, function in of_type(template, "AWS::Serverless::Function").items():
        group = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
        assert groups[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
        logs = [s for s in statements(template, role_of(function)) if "logs:PutLogEvents" in s["Action"]]
        assert logs == [
            {
                "Effect": "Allow",
                "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
                "Resource": [{"Fn::GetAtt": [group, "Arn"]}],
            }
        ]
        xray = [s for s in statements(template, role_of(function)) if "xray:PutTraceSegments" in s["Action"]]
        assert len(xray) == 1, name
    assert template["Parameters"]["LogRetentionDays"]["Default"] == 30


def test_star_resources_only_where_the_table_says_why() -> None:
    permissions = stack_module().FUNCTIONS
    for function, grants in permissions.items():
        for grant in grants:
            if "*" in grant.resources:
                assert grant.why, (function, grant.actions)
                assert not any(a.startswith(("dynamodb:", "s3:", "sqs:")) for a in grant.actions), grant


def test_the_state_machine_may_do_what_its_tasks_do_and_nothing_more(template: dict[str, Any]) -> None:
    (policy,) = template["Resources"]["KnowledgeStateMachine"]["Properties"]["Policies"]
    assert policy["Statement"] == [
        {
            "Effect": "Allow",
            "Action": ["dynamodb:UpdateItem"],
            "Resource": [{"Fn::GetAtt": ["KnowledgeTable", "Arn"]}],
        },
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage"],
            "Resource": [
                {"Fn::GetAtt": ["MultimodalQueue", "Arn"]},
                {"Fn::GetAtt": ["PostprocessQueue", "Arn"]},
                {"Fn::GetAtt": ["EnrichmentQueue", "Arn"]},
                {"Fn::GetAtt": ["WebhooksQueue", "Arn"]},  # the machine's announcements
            ],
        },
        stack_module().STATE_MACHINE_LOG_DELIVERY,  # its error log (tests/infra/test_hardening.py)
    ]


def test_a_task_the_generator_does_not_know_is_refused() -> None:
    asl = {"States": {"X": {"Type": "Task", "Resource": "arn:aws:states:::lambda:invoke", "Parameters": {}}}}
    with pytest.raises(ValueError, match="lambda"):
        stack_module().state_machine_statements(asl, {})


def test_a_task_arn_with_a_literal_partition_is_refused() -> None:
    """`arn:aws:` is wrong in GovCloud and China: the definition takes `${Partition}` (AWS::Partition)."""
    parameters = {"TableName": "${KnowledgeTableName}"}
    literal = {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:updateItem", "Parameters": parameters}
    substitutions = {"KnowledgeTableName": {"Ref": "KnowledgeTable"}, "Partition": {"Ref": "AWS::Partition"}}
    with pytest.raises(ValueError, match="Partition"):
        stack_module().state_machine_statements({"States": {"X": literal}}, substitutions)
    partitioned = {**literal, "Resource": "arn:${Partition}:states:::dynamodb:updateItem"}
    assert stack_module().state_machine_statements({"States": {"X": partitioned}}, substitutions)
    with pytest.raises(ValueError, match="Partition"):  # and the substitution must be there
        stack_module().state_machine_statements(
            {"States": {"X": partitioned}}, {"KnowledgeTableName": {"Ref": "KnowledgeTable"}}
        )


def test_tables_the_bucket_and_the_queues_outlive_the_stack(template: dict[str, Any]) -> None:
    kept = {
        **of_type(template, "AWS::DynamoDB::Table"),
        **of_type(template, "AWS::S3::Bucket"),
        **of_type(template, "AWS::SQS::Queue"),
    }
    assert len(kept) == 17 + 1 + 24
    for name, resource in kept.items():
        # retained, except by the rollback of the deploy that created it (a failed first deploy leaves
        # nothing that would hold the names its retry needs)
        assert resource["DeletionPolicy"] == "RetainExceptOnCreate", name
        assert resource["UpdateReplacePolicy"] == "Retain", name
    for name, table in of_type(template, "AWS::DynamoDB::Table").items():
        properties = table["Properties"]
        assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}, name
        assert properties["DeletionProtectionEnabled"] == {"Fn::If": ["ProtectTables", True, False]}, name
    # a protected table cannot be rolled back either: protection is for after the first deploy
    assert template["Parameters"]["TableDeletionProtection"]["Default"] == "false"


def test_limits_that_protect_the_account(template: dict[str, Any]) -> None:
    functions = of_type(template, "AWS::Serverless::Function")
    assert functions["APIHandler"]["Properties"]["Timeout"] < 29  # API Gateway gives up at 29 s
    (settings,) = template["Resources"]["RestAPI"]["Properties"]["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == {"Ref": "ApiThrottleRate"}
    assert settings["ThrottlingBurstLimit"] == {"Ref": "ApiThrottleBurst"}


def test_only_the_functions_that_search_or_index_may_reach_opensearch(template: dict[str, Any]) -> None:
    (access,) = template["Resources"]["OpenSearchDomain"]["Properties"]["AccessPolicies"]["Statement"]
    allowed = {p["Fn::GetAtt"][0] for p in access["Principal"]["AWS"]}
    signers = {
        role_of(f)
        for f in of_type(template, "AWS::Serverless::Function").values()
        if any("es:ESHttpPost" in s["Action"] for s in statements(template, role_of(f)))
    }
    assert allowed == signers and "HousekeepingRole" not in allowed and "DocreaderStageRole" not in allowed


#: where the default prefix may appear as text: descriptions and the app's tags, not resource names
_NOT_NAMES = re.compile(r"(Description|Tags|title)")
#: the service's name (Powertools' `service` metric dimension, log field), not a resource's
SERVICE = "weknora-ingest"
#: ARNs that name AWS's own resources, not this stack's
_AWS_OWNED = ("arn:aws:bedrock:*::foundation-model/*",)


def test_another_prefix_leaves_no_name_or_arn_outside_it(template: dict[str, Any]) -> None:
    """Resolve every `${Prefix}` to another prefix: no literal name or ARN of ours may remain."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "Fn::Sub":
                    text = value if isinstance(value, str) else value[0]
                    check(text.replace("${Prefix}", "zz-other"), path)
                    if not isinstance(value, str):
                        walk(value[1], f"{path}/Fn::Sub")
                else:
                    walk(value, f"{path}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}/{i}")
        elif isinstance(node, str):
            check(node, path)

    def check(text: str, path: str) -> None:
        if _NOT_NAMES.search(path) or text in _AWS_OWNED:
            return
        if "weknora" in text.replace(SERVICE, "") or re.search(
            r"arn:[^$]*:(sqs|dynamodb|s3|states|logs|es):.*:[a-z0-9-]+$", text
        ):
            found.append(f"{path}: {text}")

    walk(template["Resources"], "Resources")
    assert not found, "\n".join(found)


def test_opensearch_in_a_vpc_takes_the_functions_that_reach_it_along(template: dict[str, Any]) -> None:
    """With OpenSearchSubnetIds, the domain and exactly the functions that sign requests to it are in the
    VPC, and only their roles may manage the network interfaces Lambda attaches them with."""
    conditions = template["Conditions"]
    assert {"Condition": "HasOpenSearch"} in conditions["HasOpenSearchVpc"]["Fn::And"]
    vpc = {
        "SubnetIds": {"Ref": "OpenSearchSubnetIds"},
        "SecurityGroupIds": {"Ref": "OpenSearchSecurityGroupIds"},
    }
    no_value = {"Ref": "AWS::NoValue"}
    domain = template["Resources"]["OpenSearchDomain"]["Properties"]
    assert domain["VPCOptions"] == {"Fn::If": ["HasOpenSearchVpc", vpc, no_value]}
    (access,) = domain["AccessPolicies"]["Statement"]
    signers = {p["Fn::GetAtt"][0] for p in access["Principal"]["AWS"]}
    for name, function in of_type(template, "AWS::Serverless::Function").items():
        role = role_of(function)
        conditional = [
            s["Fn::If"]
            for s in template["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            if "Fn::If" in s
        ]
        if role in signers:
            assert function["Properties"]["VpcConfig"] == {"Fn::If": ["HasOpenSearchVpc", vpc, no_value]}, (
                name
            )
            ((condition, grant, otherwise),) = conditional
            assert condition == "HasOpenSearchVpc" and otherwise == no_value
            assert "ec2:CreateNetworkInterface" in grant["Action"] and grant["Resource"] == ["*"]
        else:
            assert "VpcConfig" not in function["Properties"] and not conditional, name
