"""With `OpenSearchSubnetIds` set, the functions that search or index run in the VPC and reach AWS only through a
NAT gateway or VPC endpoints: the parameter's description and the README name an endpoint for every service
their roles call (the roles follow the code: test_iam_reach.py), else a first deploy without a NAT hangs those
calls to their connect timeouts (the API's 504s, stages' messages in their dead-letter queues)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .iam_policy import package_stack

#: an IAM action's service → the name the description and the README give its endpoint
ENDPOINT_NAMES = {
    "s3": "S3",
    "dynamodb": "DynamoDB",
    "sqs": "SQS",
    "states": "Step Functions",
    "bedrock": "Bedrock Runtime",
    "events": "EventBridge",
    "textract": "Textract",
    "ssm": "Systems Manager",
    "secretsmanager": "Secrets Manager",
}
#: reached without an endpoint of the function's own: through Lambda (logs, X-Ray), Lambda's own network
#: interfaces (ec2), the domain's VPC endpoint (es)
NOT_THROUGH_THE_SUBNETS = {"logs", "xray", "ec2", "es"}


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def _actions(node: Any) -> set[str]:
    """Every action a policy statement tree names, both branches of a condition included."""
    if isinstance(node, dict):
        found = set()
        if "Action" in node:
            actions = node["Action"]
            found |= {actions} if isinstance(actions, str) else set(actions)
        for value in node.values():
            found |= _actions(value)
        return found
    if isinstance(node, list):
        return set().union(*(_actions(item) for item in node)) if node else set()
    return set()


def _services_called_from_the_vpc(template: dict[str, Any]) -> set[str]:
    resources = template["Resources"]
    services: set[str] = set()
    for name, resource in resources.items():
        if resource["Type"] != "AWS::Serverless::Function" or "VpcConfig" not in resource["Properties"]:
            continue
        role = resources[f"{name}Role"]["Properties"]["Policies"]
        services |= {action.split(":")[0] for action in _actions(role)}
    return services - NOT_THROUGH_THE_SUBNETS


def test_every_service_a_vpc_function_calls_has_a_named_endpoint(packaged: dict[str, Any]) -> None:
    services = _services_called_from_the_vpc(packaged)
    assert {"s3", "dynamodb", "sqs", "events"} <= services  # the check sees the roles
    assert services <= set(ENDPOINT_NAMES), f"no endpoint name for {services - set(ENDPOINT_NAMES)}"
    description = packaged["Parameters"]["OpenSearchSubnetIds"]["Description"]
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    in_a_vpc = " ".join(readme[readme.index("**In a VPC**") :].split("\n\n")[0].split())
    for service in sorted(services):
        assert ENDPOINT_NAMES[service] in description, service
        assert ENDPOINT_NAMES[service] in in_a_vpc, service
