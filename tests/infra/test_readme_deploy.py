"""The README's "Deploy to AWS" section lists every parameter the packaged stack asks for, with its default,
and the commands an operator runs (`make deploy` asks for each parameter in its guided run)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from .iam_policy import ROOT, package_stack


def deploy_section() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("\n## Deploy to AWS\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.fixture(scope="module")
def parameters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    packaged: dict[str, Any] = package_stack(Path(tmp_path_factory.mktemp("package")))
    return dict(packaged["Parameters"])


def test_every_parameter_is_listed_with_its_default(parameters: dict[str, Any]) -> None:
    rows = {
        match[1]: match[2]
        for match in re.finditer(r"^\| `(\w+)` \| ([^|]*) \|", deploy_section(), flags=re.MULTILINE)
    }
    assert set(rows) == set(parameters), "README Deploy to AWS, Parameters: add or remove rows"
    for name, spec in parameters.items():
        default = str(spec.get("Default", ""))
        assert (f"`{default}`" in rows[name]) if default else ("empty" in rows[name]), (name, rows[name])


def test_the_commands_an_operator_runs() -> None:
    section = deploy_section()
    for command in (
        "make deploy",
        "sam build -t out/sam.json",
        "sam deploy --guided --capabilities CAPABILITY_IAM CAPABILITY_AUTO_EXPAND --resolve-s3 --resolve-image-repos",
        "aws ssm put-parameter --name /weknora/operator-key --type SecureString",
        'curl -sS -X POST "$API/admin/tenants" -H "X-Operator-Key: $KEY"',
        "scripts/backfill_listing_keys.py",
        "sam delete --stack-name",
    ):
        assert command in section, command


def test_the_teardown_deletes_every_table_and_queue_the_stack_keeps() -> None:
    """The retained names block a new stack under the same prefix: the README's loops must name them all."""
    import json

    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    named = {
        kind: {
            resource["Properties"][field]["Fn::Sub"].removeprefix("${Prefix}-")
            for resource in template["Resources"].values()
            if resource.get("Type") == kind
        }
        for kind, field in (("AWS::DynamoDB::Table", "TableName"), ("AWS::SQS::Queue", "QueueName"))
    }
    section = deploy_section()
    tables = set(re.search(r"for t in ([^;]+); do", section)[1].split())  # type: ignore[index]
    queues = set(re.search(r"for q in ([^;]+); do", section)[1].split())  # type: ignore[index]
    assert tables == named["AWS::DynamoDB::Table"]
    assert queues | {f"{q}-dlq" for q in queues} == named["AWS::SQS::Queue"]
