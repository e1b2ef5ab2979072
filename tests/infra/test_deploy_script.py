"""`make deploy` (scripts/deploy.py) offline: the commands it runs, in order, with stand-ins for `sam`, `aws`,
`docker` and `make` on the PATH; it stops before anything when a tool is missing; the operator key is created
once, as a SecureString, shown once and never on a command line; an upgrade that brings a table several new
indexes deploys them one per update."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "deploy.py"
ENDPOINT = "https://abc123.execute-api.eu-west-1.amazonaws.com/api/"
STACK = {
    "StackName": "acme-ingest",
    "Parameters": [
        {"ParameterKey": "Prefix", "ParameterValue": "acme"},
        {"ParameterKey": "OperatorKeyName", "ParameterValue": "operator-key"},
    ],
    "Outputs": [{"OutputKey": "EndpointURL", "OutputValue": ENDPOINT}],
}
#: `sam deploy --guided` saves the answers (here: where --config-file points)
SAVED = """version = 0.1
[default.deploy.parameters]
stack_name = "acme-ingest"
region = "eu-west-1"
s3_bucket = "aws-sam-cli-managed-default-samclisourcebucket-x"
image_repositories = ["DocreaderFunction=123456789012.dkr.ecr.eu-west-1.amazonaws.com/x"]
capabilities = "CAPABILITY_IAM CAPABILITY_AUTO_EXPAND"
"""
FAKE_AWS = """#!/bin/bash
echo "aws $*" >> "$FAKE_LOG"
case "$1 $2" in
  "sts get-caller-identity") echo 123456789012 ;;
  "cloudformation describe-stacks") cat "$FAKE_DIR/stack.json" ;;
  "cloudformation list-stacks") cat "$FAKE_DIR/rolled-back" 2>/dev/null || echo None ;;
  "ssm describe-parameters")
    if [ -f "$FAKE_DIR/parameter.json" ]; then echo /acme/operator-key; else echo None; fi ;;
  "ssm put-parameter")
    for arg in "$@"; do
      case "$arg" in file://*) cp "${arg#file://}" "$FAKE_DIR/parameter.json" ;; esac
    done ;;
  "dynamodb list-tables") cat "$FAKE_DIR/tables.json" 2>/dev/null || echo "[]" ;;
  "dynamodb describe-table") cat "$FAKE_DIR/indexes.json" ;;
  "lambda get-account-settings")
    if [ -f "$FAKE_DIR/concurrency" ]; then cat "$FAKE_DIR/concurrency"; else
      echo "An error occurred (AccessDeniedException) when calling the GetAccountSettings operation" >&2
      exit 254
    fi ;;
  "iam create-service-linked-role")
    if [ -f "$FAKE_DIR/service-role" ]; then
      echo "An error occurred (InvalidInput) when calling the CreateServiceLinkedRole operation: Service role name AWSServiceRoleForAmazonOpenSearchService has been taken in this account, please try a different suffix." >&2
      exit 254
    fi
    touch "$FAKE_DIR/service-role" ;;
esac
"""
#: sam: a guided deploy saves its answers; a deploy gives the knowledge table the indexes of the last build
FAKE_SAM = f"""#!{sys.executable}
import json, os, shutil, sys
from pathlib import Path
fake, args = Path(os.environ["FAKE_DIR"]), sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write("sam " + " ".join(args) + "\\n")
if args[0] == "build":
    (fake / "built").write_text(str(Path(args[args.index("-t") + 1]).resolve()))
if args[0] == "deploy":
    if "--guided" in args:
        shutil.copy(fake / "saved.toml", args[args.index("--config-file") + 1])
    template = json.loads(Path((fake / "built").read_text()).read_text())
    table = template.get("Resources", {{}}).get("KnowledgeTable")
    if table and not os.environ.get("FAKE_STUCK"):
        names = [index["IndexName"] for index in table["Properties"]["GlobalSecondaryIndexes"]]
        (fake / "indexes.json").write_text(json.dumps(names))
"""
FAKE_TOOL = """#!/bin/bash
echo "$(basename "$0") $*" >> "$FAKE_LOG"
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in {"aws": FAKE_AWS, "sam": FAKE_SAM, "docker": FAKE_TOOL, "make": FAKE_TOOL}.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "stack.json").write_text(json.dumps(STACK))
    (tmp_path / "saved.toml").write_text(SAVED)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "sam.json").write_text("{}")
    return tmp_path


def deploy(fake: Path, *args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": path if path is not None else f"{fake / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin",
        "FAKE_DIR": str(fake),
        "FAKE_LOG": str(fake / "calls.log"),
    }
    env.pop("STACK_NAME", None)
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--config",
            str(fake / "samconfig.toml"),
            "--out",
            str(fake / "out"),
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def calls(fake: Path) -> list[str]:
    log = fake / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return lines


def test_missing_tools_stop_it_before_anything_runs(fake: Path) -> None:
    empty = fake / "empty"
    empty.mkdir()
    done = deploy(fake, path=str(empty))
    assert done.returncode == 2
    for tool in ("sam", "aws", "docker"):
        assert f"  {tool}: " in done.stderr
    assert "+ " not in done.stdout and calls(fake) == []


def test_the_first_deploy_is_guided_creates_the_key_once_and_prints_the_first_tenants_curl(
    fake: Path,
) -> None:
    done = deploy(fake)
    assert done.returncode == 0, done.stderr
    ran = calls(fake)
    assert [line.split()[:2] for line in ran] == [
        ["aws", "sts"],
        ["aws", "cloudformation"],
        ["make", "package"],
        ["sam", "build"],
        ["sam", "deploy"],
        ["aws", "cloudformation"],
        ["aws", "ssm"],
        ["aws", "ssm"],
    ]
    assert "list-stacks" in ran[1] and "StackName=='weknora'" in ran[1]  # not rolled back: nothing deleted
    assert ran[3].startswith("sam build -t ") and ran[3].endswith("/out/sam.json")
    guided = ran[4].split()
    assert guided[:3] == ["sam", "deploy", "--guided"]
    for flag in ("CAPABILITY_IAM", "CAPABILITY_AUTO_EXPAND", "--resolve-s3", "--resolve-image-repos"):
        assert flag in guided
    assert "--region eu-west-1" in ran[5]  # the region the guided run saved
    assert "Values=/acme/operator-key" in ran[6] and ran[7].startswith("aws ssm put-parameter")

    stored = json.loads((fake / "parameter.json").read_text())
    assert stored["Name"] == "/acme/operator-key" and stored["Type"] == "SecureString"
    key = stored["Value"]
    assert len(key) > 40 and key not in " ".join(ran)  # never on a command line
    assert done.stdout.count(key) == 2  # shown once, and in the curl
    api = "https://abc123.execute-api.eu-west-1.amazonaws.com/api/api/v1"
    assert f"API: {api}" in done.stdout
    assert f'curl -sS -X POST "{api}/admin/tenants" -H "X-Operator-Key: {key}"' in done.stdout
    assert not list(Path("/tmp").glob("weknora-deploy-*/put-parameter.json"))


def test_an_update_reuses_the_saved_answers_and_keeps_the_key(fake: Path) -> None:
    (fake / "samconfig.toml").write_text(SAVED)
    (fake / "parameter.json").write_text(json.dumps({"Value": "kept"}))
    done = deploy(fake, "--", "--confirm-changeset")
    assert done.returncode == 0, done.stderr
    ran = calls(fake)
    (deploy_call,) = [line for line in ran if line.startswith("sam deploy")]
    assert "--guided" not in deploy_call
    # sam refuses --resolve-s3 beside the bucket the guided run saved
    assert "--resolve-s3" not in deploy_call and "--resolve-image-repos" not in deploy_call
    assert deploy_call.endswith("--confirm-changeset")
    assert not any("put-parameter" in line for line in ran)
    assert "kept in the SSM parameter /acme/operator-key" in done.stdout
    assert (
        '-H "X-Operator-Key: $(aws ssm get-parameter --name /acme/operator-key --region eu-west-1 '
        '--with-decryption --query Parameter.Value --output text)"' in done.stdout
    )


def test_a_stack_whose_first_deploy_was_rolled_back_is_deleted_before_the_retry(fake: Path) -> None:
    """CloudFormation updates no stack in ROLLBACK_COMPLETE; its resources went with the rollback."""
    (fake / "samconfig.toml").write_text(SAVED)  # sam saved the answers before the failed deploy
    stack_id = "arn:aws:cloudformation:eu-west-1:123456789012:stack/acme-ingest/1"
    (fake / "rolled-back").write_text(stack_id)
    done = deploy(fake)
    assert done.returncode == 0, done.stderr
    ran = calls(fake)
    first = [line.split()[:3] for line in ran[:5]]
    assert first == [
        ["aws", "sts", "get-caller-identity"],
        ["aws", "cloudformation", "list-stacks"],
        ["aws", "cloudformation", "delete-stack"],
        ["aws", "cloudformation", "wait"],
        ["make", "package"],
    ]
    assert "StackName=='acme-ingest'" in ran[1] and "--region eu-west-1" in ran[1]
    assert ran[2].endswith(f"--stack-name {stack_id} --region eu-west-1")
    assert f"stack-delete-complete --stack-name {stack_id}" in ran[3]
    assert "first deploy of this stack failed" in done.stdout


def test_a_failed_step_stops_it_with_the_reason(fake: Path) -> None:
    (fake / "bin" / "sam").write_text('#!/bin/bash\necho "sam $*" >> "$FAKE_LOG"\nexit 1\n')
    done = deploy(fake)
    assert done.returncode == 1 and "`sam build` failed" in done.stderr
    assert not any(line.startswith("aws ssm") for line in calls(fake))


def test_no_credentials_stop_it_before_the_build(fake: Path) -> None:
    (fake / "bin" / "aws").write_text('#!/bin/bash\necho "aws $*" >> "$FAKE_LOG"\nexit 255\n')
    done = deploy(fake)
    assert done.returncode == 1 and "aws configure" in done.stderr
    assert [line.split()[0] for line in calls(fake)] == ["aws"]


def test_a_dry_run_prints_the_commands_and_needs_no_tool(fake: Path) -> None:
    empty = fake / "empty"
    empty.mkdir()
    done = deploy(fake, "--dry-run", path=str(empty))
    assert done.returncode == 0, done.stderr
    commands = [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]
    assert [c.split()[:2] for c in commands] == [
        ["aws", "sts"],
        ["aws", "cloudformation"],
        ["make", "package"],
        ["sam", "build"],
        ["sam", "deploy"],
        ["aws", "cloudformation"],
        ["aws", "ssm"],
        ["aws", "ssm"],
    ]
    assert "X-Operator-Key: <a new random key, printed once>" in done.stdout
    assert not (fake / "samconfig.toml").exists()


def knowledge_table(*indexes: str) -> dict[str, object]:
    """The knowledge table as packaged, with these of its global secondary indexes."""
    keys = {"kb-index": "kb_id", "kb-source-index": "kb_source", "kb-type-index": "kb_type"}
    return {
        "Type": "AWS::DynamoDB::Table",
        "Properties": {
            "TableName": {"Fn::Sub": "${Prefix}-knowledge"},
            "KeySchema": [{"AttributeName": "id", "KeyType": "HASH"}],
            "AttributeDefinitions": [
                {"AttributeName": name, "AttributeType": "S"} for name in ("id", *(keys[i] for i in indexes))
            ],
            "GlobalSecondaryIndexes": [
                {"IndexName": index, "KeySchema": [{"AttributeName": keys[index], "KeyType": "HASH"}]}
                for index in indexes
            ],
        },
    }


def test_an_upgrade_adds_one_new_index_per_update(fake: Path) -> None:
    (fake / "samconfig.toml").write_text(
        SAVED + 'parameter_overrides = "Prefix=\\"acme\\" StageMaxReceives=\\"4\\""\n'
    )
    (fake / "parameter.json").write_text("{}")
    everything = ("kb-index", "kb-source-index", "kb-type-index")
    (fake / "out" / "sam.json").write_text(
        json.dumps({"Resources": {"KnowledgeTable": knowledge_table(*everything)}})
    )
    (fake / "tables.json").write_text(json.dumps(["acme-knowledge", "acme-tenants"]))
    (fake / "indexes.json").write_text(json.dumps(["kb-index"]))  # a stack from before the listing indexes
    done = deploy(fake)
    assert done.returncode == 0, done.stderr
    ran = [line for line in calls(fake) if line.startswith(("sam", "aws dynamodb describe-table"))]
    assert [" ".join(line.split()[:2]) for line in ran] == [
        "aws dynamodb",
        "sam build",
        "sam deploy",
        "aws dynamodb",
        "sam build",
        "sam deploy",
    ]
    assert "--table-name acme-knowledge" in ran[0]  # the saved Prefix names the table
    assert ran[1].endswith("/out/sam-step.json") and ran[4].endswith("/out/sam.json")
    assert "holds back KnowledgeTable kb-type-index" in done.stdout
    step = json.loads((fake / "out" / "sam-step.json").read_text())
    assert step["Resources"]["KnowledgeTable"] == knowledge_table("kb-index", "kb-source-index")
    assert json.loads((fake / "indexes.json").read_text()) == list(everything)


def test_an_update_that_adds_no_index_stops_with_the_reason(
    fake: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fake / "samconfig.toml").write_text(SAVED)
    (fake / "parameter.json").write_text("{}")
    template = {
        "Resources": {"KnowledgeTable": knowledge_table("kb-index", "kb-source-index", "kb-type-index")}
    }
    (fake / "out" / "sam.json").write_text(json.dumps(template))
    (fake / "tables.json").write_text(json.dumps(["weknora-knowledge"]))
    (fake / "indexes.json").write_text(json.dumps([]))
    monkeypatch.setenv("FAKE_STUCK", "1")
    done = deploy(fake)
    assert done.returncode == 1 and "added none of the new indexes" in done.stderr


def with_triggers(*concurrencies: int) -> dict[str, object]:
    """A packaged template whose functions' SQS triggers run at most these many invocations each."""
    return {
        "Resources": {
            f"Stage{n}": {
                "Type": "AWS::Serverless::Function",
                "Properties": {
                    "Events": {
                        "Queue": {"Type": "SQS", "Properties": {"ScalingConfig": {"MaximumConcurrency": c}}},
                        "Tick": {"Type": "Schedule", "Properties": {"Schedule": "rate(5 minutes)"}},
                    }
                },
            }
            for n, c in enumerate(concurrencies)
        }
    }


def test_an_account_concurrency_limit_below_the_triggers_is_warned_about(fake: Path) -> None:
    """A throttled batch comes back with its receive count raised: on a new account (often 10 at once) the
    stages' triggers (76 at once) would spend their tries on throttles."""
    (fake / "out" / "sam.json").write_text(json.dumps(with_triggers(10, 12, 5)))
    (fake / "concurrency").write_text("10\n")
    done = deploy(fake)
    assert done.returncode == 0, done.stderr  # a warning, not a stop
    ran = calls(fake)
    steps = [" ".join(line.split()[:3]) for line in ran]
    assert steps.index("aws lambda get-account-settings") < steps.index("sam build -t")
    assert "AccountLimit.ConcurrentExecutions" in ran[steps.index("aws lambda get-account-settings")]
    assert "at most 10 Lambda invocations at once, fewer than the 27" in done.stderr

    (fake / "concurrency").write_text("1000\n")
    done = deploy(fake)
    assert done.returncode == 0 and "Lambda invocations at once" not in done.stderr


def test_an_unreadable_concurrency_limit_is_skipped(fake: Path) -> None:
    (fake / "out" / "sam.json").write_text(json.dumps(with_triggers(10)))
    done = deploy(fake)  # the fake answers AccessDenied
    assert done.returncode == 0, done.stderr
    assert "concurrency limit could not be read" in done.stderr
    assert any(line.startswith("sam deploy") for line in calls(fake))


def test_opensearch_in_a_vpc_gets_its_service_linked_role_before_the_deploy(fake: Path) -> None:
    """CloudFormation does not create it and a VPC domain cannot be created without it; one that exists
    already ("has been taken") is fine."""
    (fake / "samconfig.toml").write_text(
        SAVED + 'parameter_overrides = "Prefix=\\"acme\\" OpenSearchSubnetIds=\\"subnet-1,subnet-2\\""\n'
    )
    (fake / "parameter.json").write_text("{}")
    for _ in range(2):  # created, then already there
        done = deploy(fake)
        assert done.returncode == 0, done.stderr
        ran = calls(fake)
        steps = [" ".join(line.split()[:3]) for line in ran]
        assert steps.index("aws iam create-service-linked-role") < steps.index("sam deploy --config-file")
        role = ran[steps.index("aws iam create-service-linked-role")]
        assert "--aws-service-name opensearchservice.amazonaws.com" in role
    assert "service-linked role exists already" in done.stdout and "Warning" not in done.stderr


def test_no_service_linked_role_without_opensearch_subnets(fake: Path) -> None:
    (fake / "samconfig.toml").write_text(SAVED)
    (fake / "parameter.json").write_text("{}")
    done = deploy(fake)
    assert done.returncode == 0, done.stderr
    assert not any(line.startswith("aws iam") for line in calls(fake))
