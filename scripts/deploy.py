"""`make deploy`: build, deploy the stack with SAM, create the operator key if it is missing, and print the API
URL and how to create the first tenant.

    python3.11 scripts/deploy.py [--dry-run] [--guided] [--stack-name NAME] [-- SAM-DEPLOY-ARGS...]

1. checks that `sam`, `aws` and `docker` are installed and that the AWS CLI has credentials (before any build);
2. `make package` (out/sam.json and the functions' zips), then `sam build -t out/sam.json` (the docreader
   image, with Docker); it warns when the account's Lambda concurrency limit is below what the queue
   triggers may run at once (their MaximumConcurrency added up: a new account's limit is often 10), and,
   when the saved parameters put OpenSearch in a VPC (OpenSearchSubnetIds), creates OpenSearch's
   service-linked role first (CloudFormation does not, and a VPC domain cannot be created without it);
3. `sam deploy` (after deleting the stack if its first deploy failed and left it in ROLLBACK_COMPLETE, where
   CloudFormation refuses to update it; the rollback removed what that deploy had created): `--guided` the
   first time (no samconfig.toml yet, or `--guided`), which asks for the stack
   name, the region and every template parameter and saves the answers in samconfig.toml; later runs reuse
   them. DynamoDB adds one global secondary index per table per update, so an upgrade that brings several
   new indexes to a table is deployed in as many updates, one new index each (a build of out/sam-step.json
   that holds the others back), then once more with the whole template;
4. creates the operator key, an SSM Parameter Store SecureString `/<Prefix>/<OperatorKeyName>`, if it does not
   exist (CloudFormation cannot create SecureStrings) and prints it once;
5. prints the API URL (the stack's EndpointURL output) and a curl that creates the first tenant.

`--dry-run` prints the commands instead of running them (nothing is needed for it). Arguments after `--` go to
`sam deploy` (e.g. `-- --confirm-changeset`; not `--parameter-overrides`, which replaces every saved value:
change parameters with `--guided` or in samconfig.toml). Standard library only: it runs before the
virtualenv exists.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STACK = "weknora"
#: what each tool is needed for, and where to get it
TOOLS = {
    "sam": "AWS SAM CLI, builds and deploys the stack: "
    "https://docs.aws.amazon.com/serverless-application-model/latest/developerguide/install-sam-cli.html",
    "aws": "AWS CLI v2, creates the operator key and reads the stack's outputs: "
    "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html",
    "docker": "Docker, `sam build` builds the docreader container image with it: https://docs.docker.com/get-docker/",
}
#: the template's defaults (infra/template.json), for a stack that does not report its parameters
TEMPLATE_DEFAULTS = {"Prefix": "weknora", "OperatorKeyName": "operator-key"}
SAM_DEPLOY_FLAGS = (
    "--capabilities",
    "CAPABILITY_IAM",
    "CAPABILITY_AUTO_EXPAND",
    # a re-run with nothing to change still checks the key and prints the URL
    "--no-fail-on-empty-changeset",
)
#: what samconfig.toml may hold that this script reads
SAVED_KEYS = (
    "stack_name",
    "region",
    "s3_bucket",
    "image_repositories",
    "image_repository",
    "parameter_overrides",
)


class DeployError(Exception):
    """A step failed; the message says what to do."""


class Shell:
    """Runs commands from the project root, printing each; in a dry run it only prints them."""

    def __init__(self, dry_run: bool) -> None:
        self.dry_run = dry_run
        # the AWS CLI v2 pipes output through a pager by default
        self.env = {**os.environ, "AWS_PAGER": ""}

    def run(self, cmd: Sequence[str]) -> None:
        print("+ " + shlex.join(cmd), flush=True)
        if self.dry_run:
            return
        if subprocess.run(list(cmd), cwd=ROOT, env=self.env).returncode != 0:
            raise DeployError(f"`{shlex.join(cmd[:2])}` failed (its output is above)")

    def attempt(self, cmd: Sequence[str]) -> subprocess.CompletedProcess[str] | None:
        """Runs a command that may fail, its stdout and stderr captured; None in a dry run."""
        print("+ " + shlex.join(cmd), flush=True)
        if self.dry_run:
            return None
        return subprocess.run(list(cmd), cwd=ROOT, env=self.env, capture_output=True, text=True)

    def output(self, cmd: Sequence[str], failure: str = "") -> str:
        """The command's stdout (an AWS CLI query); its stderr goes to the terminal."""
        print("+ " + shlex.join(cmd), flush=True)
        if self.dry_run:
            return ""
        done = subprocess.run(list(cmd), cwd=ROOT, env=self.env, stdout=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise DeployError(failure or f"`{shlex.join(cmd[:3])}` failed (its error is above)")
        return done.stdout.strip()


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def saved_config(path: Path) -> dict[str, str]:
    """What `sam deploy --guided` saved in samconfig.toml: the stack, its region, the artifact bucket and
    image repositories."""
    if not path.is_file():
        return {}
    with path.open("rb") as file:
        config: dict[str, Any] = tomllib.load(file).get("default", {})
    found: dict[str, str] = {}
    for section in ("global", "deploy"):  # the deploy command's values win
        parameters = config.get(section, {}).get("parameters", {})
        found.update({k: str(parameters[k]) for k in SAVED_KEYS if parameters.get(k)})
    return found


def saved_parameters(saved: dict[str, str]) -> dict[str, str]:
    """The template parameters the guided run saved (`Prefix="acme" ModelCatalog="{\\"chat\\": ...}"`)."""
    pairs = (item.partition("=") for item in shlex.split(saved.get("parameter_overrides", "")))
    return {key: value for key, _, value in pairs}


def region_args(region: str) -> list[str]:
    return ["--region", region] if region else []


def describe_stack(shell: Shell, stack: str, region: str) -> dict[str, Any]:
    raw = shell.output(
        [
            "aws",
            "cloudformation",
            "describe-stacks",
            "--stack-name",
            stack,
            *region_args(region),
            "--query",
            "Stacks[0]",
            "--output",
            "json",
        ]
    )
    return dict(json.loads(raw)) if raw else {}


def failed_first_create(shell: Shell, stack: str, region: str) -> str:
    """The id of the stack if its first deploy failed and was rolled back (ROLLBACK_COMPLETE: CloudFormation
    updates no such stack), else ''. `list-stacks` answers for a stack that does not exist, too."""
    found = shell.output(
        [
            "aws",
            "cloudformation",
            "list-stacks",
            *region_args(region),
            "--stack-status-filter",
            "ROLLBACK_COMPLETE",
            "--query",
            f"StackSummaries[?StackName=='{stack}'].StackId | [0]",
            "--output",
            "text",
        ]
    )
    return "" if found in ("", "None") else found


def stack_values(stack: dict[str, Any], key: str, name: str, value: str) -> dict[str, str]:
    return {str(entry[name]): str(entry.get(value, "")) for entry in stack.get(key) or []}


def parameter_exists(shell: Shell, name: str, region: str) -> bool:
    found = shell.output(
        [
            "aws",
            "ssm",
            "describe-parameters",
            *region_args(region),
            "--parameter-filters",
            f"Key=Name,Values={name}",
            "--query",
            "Parameters[0].Name",
            "--output",
            "text",
        ]
    )
    return found == name


def create_operator_key(shell: Shell, name: str, region: str) -> str:
    """A new random key, stored as a SecureString under the AWS-managed key (aws/ssm). The value goes in a
    private file, not on the command line, where other users' `ps` could read it."""
    key = "wko_" + secrets.token_urlsafe(32)
    request = {
        "Name": name,
        "Value": key,
        "Type": "SecureString",
        "Description": "weknora-ingest operator key (X-Operator-Key for /api/v1/admin)",
    }
    with tempfile.TemporaryDirectory(prefix="weknora-deploy-") as private:
        path = Path(private) / "put-parameter.json"
        path.touch(mode=0o600)
        path.write_text(json.dumps(request))
        # no --overwrite: a key created meanwhile is kept (the call fails with ParameterAlreadyExists)
        shell.run(["aws", "ssm", "put-parameter", *region_args(region), "--cli-input-json", f"file://{path}"])
    return key


def new_indexes(shell: Shell, template: dict[str, Any], prefix: str, region: str) -> dict[str, list[str]]:
    """Per table of the template that exists already: the global secondary indexes it does not have yet."""
    listed = shell.output(
        ["aws", "dynamodb", "list-tables", *region_args(region), "--query", "TableNames", "--output", "json"]
    )
    tables = set(json.loads(listed or "[]"))
    new: dict[str, list[str]] = {}
    for logical, resource in template.get("Resources", {}).items():
        properties = resource.get("Properties", {})
        wanted = [index["IndexName"] for index in properties.get("GlobalSecondaryIndexes", [])]
        pattern = properties.get("TableName", {})
        if resource.get("Type") != "AWS::DynamoDB::Table" or not wanted or not isinstance(pattern, dict):
            continue
        name = str(pattern.get("Fn::Sub", "")).replace("${Prefix}", prefix)
        if name not in tables:
            continue  # created with all its indexes at once
        query = ["--query", "Table.GlobalSecondaryIndexes[].IndexName", "--output", "json"]
        described = shell.output(
            ["aws", "dynamodb", "describe-table", "--table-name", name, *region_args(region), *query]
        )
        present = set(json.loads(described or "null") or [])
        if missing := [index for index in wanted if index not in present]:
            new[logical] = missing
    return new


def trigger_concurrency(template: dict[str, Any]) -> int:
    """How many invocations the SQS triggers may run at once: their ScalingConfig.MaximumConcurrency added up."""
    total = 0
    for resource in template.get("Resources", {}).values():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        for event in resource.get("Properties", {}).get("Events", {}).values():
            if event.get("Type") == "SQS":
                total += int(
                    event.get("Properties", {}).get("ScalingConfig", {}).get("MaximumConcurrency", 0)
                )
    return total


def warn_on_concurrency_limit(shell: Shell, template: dict[str, Any], region: str) -> None:
    """A warning when the account's Lambda concurrency limit is below the triggers' sum: a throttled batch
    comes back after its queue's visibility timeout with its receive count raised, so throttles spend the
    tries a stage has before its dead-letter queue. Skipped when the limit cannot be read."""
    wanted = trigger_concurrency(template)
    if not wanted:
        return
    query = ["--query", "AccountLimit.ConcurrentExecutions", "--output", "text"]
    done = shell.attempt(["aws", "lambda", "get-account-settings", *region_args(region), *query])
    if done is None:
        return
    limit = done.stdout.strip()
    if done.returncode != 0 or not limit.isdigit():
        print("(the account's Lambda concurrency limit could not be read; not checked)", file=sys.stderr)
        return
    if int(limit) < wanted:
        print(
            f"Warning: this account runs at most {limit} Lambda invocations at once, fewer than the "
            f"{wanted} the stack's queue triggers may start (their MaximumConcurrency added up). Throttled "
            "work waits a visibility timeout and spends one of its stage's tries (StageMaxReceives) each "
            "time. Ask for a higher 'Concurrent executions' quota (Service Quotas, AWS Lambda) before "
            "heavy imports.",
            file=sys.stderr,
        )


#: what IAM answers when the service-linked role is there already
ROLE_EXISTS = ("has been taken", "already exists")


def ensure_opensearch_service_role(shell: Shell, parameters: dict[str, str], region: str) -> None:
    """OpenSearch's service-linked role, which a domain in a VPC needs and CloudFormation does not create;
    only when the saved parameters put the domain in subnets. One that exists is fine."""
    if not parameters.get("OpenSearchSubnetIds") or parameters.get("EnableOpenSearch") == "false":
        return
    service = ["--aws-service-name", "opensearchservice.amazonaws.com"]
    done = shell.attempt(["aws", "iam", "create-service-linked-role", *region_args(region), *service])
    if done is None or done.returncode == 0:
        return
    if any(sign in done.stderr for sign in ROLE_EXISTS):
        print("OpenSearch's service-linked role exists already.")
        return
    print(
        "Warning: could not create OpenSearch's service-linked role (a domain in a VPC needs it; the deploy "
        f"fails without it):\n{done.stderr.strip()}",
        file=sys.stderr,
    )


def hold_back(template: dict[str, Any], new: dict[str, list[str]]) -> tuple[dict[str, Any], list[str]]:
    """The template with at most one new index per table (the first in its order), and what it holds back;
    attribute definitions only the held-back indexes use go too (CloudFormation refuses unused ones)."""
    step = copy.deepcopy(template)
    held: list[str] = []
    for logical, names in new.items():
        later = set(names[1:])
        if not later:
            continue
        properties = step["Resources"][logical]["Properties"]
        indexes = [i for i in properties["GlobalSecondaryIndexes"] if i["IndexName"] not in later]
        properties["GlobalSecondaryIndexes"] = indexes
        keys = [properties["KeySchema"]]
        keys += [index["KeySchema"] for index in indexes + properties.get("LocalSecondaryIndexes", [])]
        used = {key["AttributeName"] for schema in keys for key in schema}
        properties["AttributeDefinitions"] = [
            a for a in properties["AttributeDefinitions"] if a["AttributeName"] in used
        ]
        held += [f"{logical} {name}" for name in names[1:]]
    return step, held


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument(
        "--guided", action="store_true", help="sam deploy --guided even with a samconfig.toml"
    )
    parser.add_argument(
        "--stack-name",
        default=os.environ.get("STACK_NAME", DEFAULT_STACK),
        help="the first deploy's suggested stack name (env STACK_NAME; later: samconfig.toml's)",
    )
    parser.add_argument("--config", type=Path, default=ROOT / "samconfig.toml", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=ROOT / "out", help=argparse.SUPPRESS)
    parser.add_argument("sam_args", nargs="*", help="passed to sam deploy (after --)")
    return parser.parse_args(argv)


def deploy(args: argparse.Namespace) -> int:
    shell = Shell(args.dry_run)
    missing = missing_tools()
    if missing and not args.dry_run:
        print("make deploy needs tools that are not installed:", file=sys.stderr)
        for tool in missing:
            print(f"  {tool}: {TOOLS[tool]}", file=sys.stderr)
        return 2
    config = args.config.resolve()
    guided = args.guided or not config.is_file()
    saved = saved_config(config)
    # credentials before a build of several minutes
    region = saved.get("region", "")
    account = shell.output(
        ["aws", "sts", "get-caller-identity", *region_args(region), "--query", "Account", "--output", "text"],
        failure="the AWS CLI has no usable credentials: run `aws configure` (or `aws sso login`, or set "
        "AWS_PROFILE) and try again",
    )
    if account:
        print(f"AWS account {account}", flush=True)

    # a first deploy that failed left an empty stack (the rollback deleted what it had created, tables and
    # bucket included: RetainExceptOnCreate); it must go before the same name can be deployed again
    rolled_back = failed_first_create(shell, saved.get("stack_name", args.stack_name), region)
    if rolled_back:
        print("The first deploy of this stack failed and was rolled back: deleting the empty stack first.")
        shell.run(
            ["aws", "cloudformation", "delete-stack", "--stack-name", rolled_back, *region_args(region)]
        )
        shell.run(
            [
                "aws",
                "cloudformation",
                "wait",
                "stack-delete-complete",
                "--stack-name",
                rolled_back,
                *region_args(region),
            ]
        )

    shell.run(["make", "package"])
    packaged = args.out / "sam.json"
    template = json.loads(packaged.read_text()) if packaged.is_file() else {}
    warn_on_concurrency_limit(shell, template, region)
    ensure_opensearch_service_role(shell, saved_parameters(saved), region)
    previous: list[str] = []
    while True:
        built, held = packaged, list[str]()
        if saved and template:  # an update: tables exist
            prefix = saved_parameters(saved).get("Prefix", TEMPLATE_DEFAULTS["Prefix"])
            step, held = hold_back(template, new_indexes(shell, template, prefix, region))
            if held and held == previous:
                raise DeployError("the last update added none of the new indexes: " + ", ".join(held))
            previous = held
            if held:
                built = args.out / "sam-step.json"
                built.write_text(json.dumps(step, indent=1))
                print("One new index per table per update: this update holds back " + ", ".join(held))
        shell.run(["sam", "build", "-t", os.path.relpath(built, ROOT)])
        # a relative --config-file would be read beside the built template: an absolute one stays here
        deploy_cmd = ["sam", "deploy", "--config-file", str(config), *SAM_DEPLOY_FLAGS]
        if guided:
            deploy_cmd[2:2] = ["--guided", "--stack-name", saved.get("stack_name", args.stack_name)]
        # guided runs save the bucket and repositories they made; sam refuses --resolve-s3 beside a bucket
        if not saved.get("s3_bucket"):
            deploy_cmd.append("--resolve-s3")
        if not (saved.get("image_repositories") or saved.get("image_repository")):
            deploy_cmd.append("--resolve-image-repos")
        shell.run([*deploy_cmd, *args.sam_args])
        saved, guided = saved_config(config), False  # a guided run has just written them
        region = saved.get("region", region)
        if not held:
            break

    stack_name = saved.get("stack_name", args.stack_name)
    stack = describe_stack(shell, stack_name, region)
    parameters = {**TEMPLATE_DEFAULTS, **stack_values(stack, "Parameters", "ParameterKey", "ParameterValue")}
    outputs = stack_values(stack, "Outputs", "OutputKey", "OutputValue")
    name = f"/{parameters['Prefix']}/{parameters['OperatorKeyName']}"

    if parameter_exists(shell, name, region):
        print(f"\nThe operator key is kept in the SSM parameter {name}.")
        read_key = ["aws", "ssm", "get-parameter", "--name", name, *region_args(region), "--with-decryption"]
        key_expression = f"$({shlex.join(read_key)} --query Parameter.Value --output text)"
    else:
        key = create_operator_key(shell, name, region)
        if args.dry_run:
            key = "<a new random key, printed once>"
        print(f"\nOperator key (shown once; stored as the SecureString {name}):\n\n    {key}\n")
        key_expression = key

    endpoint = outputs.get("EndpointURL", "https://<api-id>.execute-api.<region>.amazonaws.com/api/")
    api = endpoint.rstrip("/") + "/api/v1"
    print(f"API: {api}")
    print("Create the first tenant (its API key is shown once in the answer):\n")
    print(
        f'    curl -sS -X POST "{api}/admin/tenants" -H "X-Operator-Key: {key_expression}" '
        '-H "Content-Type: application/json" -d \'{"name": "my-first-tenant"}\''
    )
    print(
        "\nBedrock: the stack's region must offer the models of the EmbeddingModel and ModelCatalog "
        "parameters, and your account may use them (README, Deploy to AWS, Bedrock models)."
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return deploy(args)
    except DeployError as error:
        print(f"make deploy: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
