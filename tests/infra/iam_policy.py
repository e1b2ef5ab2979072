"""Evaluates recorded AWS calls against each function's IAM role in the packaged template.

A recorded call (`chalicelib/local/aws_calls.py`: function, service, operation, the parameters that name its
resources) becomes the IAM requests AWS would authorise for it (action + resource ARN, e.g. `HeadObject` ->
`s3:GetObject` on the object, a `TransactWriteItems` -> one `dynamodb:PutItem`/`UpdateItem`/... per item).
The role's policy comes from the packaged `sam.json`, its intrinsics resolved against the resources the
local runtime provisioned in moto (the same resolver that provisions them), and moto's IAM policy evaluator
(`moto.iam.access_control.IAMPolicy`, Allow/Deny with wildcards) decides. A call with no mapping here is an
error, so a new kind of AWS call cannot pass unchecked.

An SQS call names its queue by URL. A function is given the URLs of the queues it uses in its environment
(infra/stack.py); for a queue whose URL it is not given, its adapter looks the URL up first on each cold start
(`GetQueueUrl`), and `RoleBook.requests` adds that request, so the role must allow it (none does).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

from moto.iam.access_control import IAMPolicy, PermissionResult

from chalicelib.local.aws_calls import AwsCall
from chalicelib.local.moto_server import ACCOUNT_ID
from chalicelib.local.provision import ProvisionedResource, TemplateResolver

ROOT = Path(__file__).resolve().parents[2]


def stack_module() -> ModuleType:
    """infra/stack.py, which generates the merge template and packages the project (not a package)."""
    if str(ROOT / "infra") not in sys.path:
        sys.path.insert(0, str(ROOT / "infra"))
    import stack

    return stack


def package_stack(out: Path) -> dict[str, Any]:
    """`out/sam.json` as `make package` writes it (without building the layers)."""
    packaged: dict[str, Any] = stack_module().package(out, "dev", project=ROOT)
    return packaged


#: API operations whose IAM action has another name (S3's reads are all s3:GetObject, its lists s3:ListBucket)
_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "GetObject": "GetObject",
    "PutObject": "PutObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "AbortMultipartUpload": "AbortMultipartUpload",
    "DeleteObject": "DeleteObject",
    "DeleteObjects": "DeleteObject",
}
_S3_BUCKET_ACTIONS = {"HeadBucket": "ListBucket", "ListObjects": "ListBucket", "ListObjectsV2": "ListBucket"}
_SQS_BATCH = {
    "SendMessageBatch": "SendMessage",
    "DeleteMessageBatch": "DeleteMessage",
    "ChangeMessageVisibilityBatch": "ChangeMessageVisibility",
}
_TRANSACT = {
    "TransactPut": "PutItem",
    "TransactUpdate": "UpdateItem",
    "TransactDelete": "DeleteItem",
    "TransactConditionCheck": "ConditionCheckItem",
    "TransactGet": "GetItem",
}
_UNMAPPED = "unmapped"


@dataclass(frozen=True)
class Request:
    action: str
    resource: str


def requests_of(call: AwsCall, region: str, account: str = ACCOUNT_ID) -> list[Request]:
    """The IAM requests one AWS call makes (an unknown operation gives a request no policy allows)."""
    params = call.parameters
    named = dict(params)
    if call.service == "s3":
        bucket = named.get("Bucket", "")
        if call.operation in _S3_BUCKET_ACTIONS:
            return [Request(f"s3:{_S3_BUCKET_ACTIONS[call.operation]}", f"arn:aws:s3:::{bucket}")]
        if call.operation == "CopyObject":
            return [
                Request("s3:GetObject", f"arn:aws:s3:::{named['CopySource']}"),
                Request("s3:PutObject", f"arn:aws:s3:::{bucket}/{named['Key']}"),
            ]
        action = _S3_ACTIONS.get(call.operation, _UNMAPPED)
        keys = [value for name, value in params if name == "Key"]
        return [Request(f"s3:{action}", f"arn:aws:s3:::{bucket}/{key}") for key in keys]
    if call.service == "dynamodb":
        table = f"arn:aws:dynamodb:{region}:{account}:table/"
        transacts = [(name, value) for name, value in params if name.startswith("Transact")]
        if transacts:
            return [Request(f"dynamodb:{_TRANSACT[name]}", table + value) for name, value in transacts]
        requests = []
        for name, value in params:
            if name == "TableName":
                resource = table + value
                if named.get("IndexName"):
                    resource += f"/index/{named['IndexName']}"
                requests.append(Request(f"dynamodb:{call.operation}", resource))
        return requests
    if call.service == "sqs":
        action = f"sqs:{_SQS_BATCH.get(call.operation, call.operation)}"
        name = _queue_name(named["QueueUrl"]) if "QueueUrl" in named else named.get("QueueName", "")
        return [Request(action, f"arn:aws:sqs:{region}:{account}:{name}")]
    if call.service == "states":
        if call.operation in ("SendTaskSuccess", "SendTaskFailure", "SendTaskHeartbeat", "ListStateMachines"):
            return [Request(f"states:{call.operation}", "*")]
        arn = named.get("stateMachineArn") or named.get("executionArn", "")
        return [Request(f"states:{call.operation}", arn)]
    if call.service == "transcribe":
        job = named.get("TranscriptionJobName", "")
        return [
            Request(
                f"transcribe:{call.operation}",
                f"arn:aws:transcribe:{region}:{account}:transcription-job/{job}",
            )
        ]
    if call.service == "ssm":
        return [
            Request(
                f"ssm:{call.operation}", f"arn:aws:ssm:{region}:{account}:parameter{named.get('Name', '')}"
            )
        ]
    if call.service == "secretsmanager":
        secret = named.get("SecretId", "")
        if not secret.startswith("arn:"):  # by name: IAM sees the ARN (its random suffix aside)
            secret = f"arn:aws:secretsmanager:{region}:{account}:secret:{secret}"
        return [Request(f"secretsmanager:{call.operation}", secret)]
    if call.service == "events":
        buses = [value for name, value in params if name == "EventBusName"] or ["default"]
        return [
            Request(f"events:{call.operation}", f"arn:aws:events:{region}:{account}:event-bus/{bus}")
            for bus in buses
        ]
    if call.service == "textract":
        return [Request(f"textract:{call.operation}", "*")]
    return [Request(f"{call.service}:{_UNMAPPED}:{call.operation}", "*")]


class _RoleResolver(TemplateResolver):
    """Resolves the roles' policies; resources the local runtime does not provision (log groups, the
    OpenSearch domain, other roles) get a placeholder ARN that no recorded call can name."""

    def _require(self, logical: str) -> ProvisionedResource:
        if logical in self.created:
            return self.created[logical]
        kind = self.resources_def.get(logical, {}).get("Type", "none")
        arn = f"arn:aws:unprovisioned:{self.region}:{ACCOUNT_ID}:{kind}/{logical}"
        return ProvisionedResource(logical, kind, logical, arn, url=arn)


class RoleBook:
    """Each function's IAM policy from the packaged template, resolved for one provisioned stack."""

    def __init__(
        self,
        packaged: dict[str, Any],
        created: Mapping[str, ProvisionedResource],
        parameters: Mapping[str, str],
        region: str,
    ) -> None:
        self.region = region
        self.packaged, self.created, self.parameters = packaged, created, parameters
        resolver = _RoleResolver(packaged, parameters, region, "weknora-local", created)
        self.resolver = resolver
        resources = packaged["Resources"]
        self.policies: dict[str, list[dict[str, Any]]] = {}
        #: the queues (by name) each function is given the URL of
        self.queue_urls: dict[str, set[str]] = {}
        for logical, spec in resources.items():
            if spec.get("Type") != "AWS::Serverless::Function":
                continue
            role = spec["Properties"]["Role"]
            if not (isinstance(role, dict) and "Fn::GetAtt" in role):
                raise ValueError(f"{logical}: its role is not a role of this template: {role!r}")
            role_id = role["Fn::GetAtt"][0]
            documents = [p["PolicyDocument"] for p in resources[role_id]["Properties"].get("Policies", [])]
            self.policies[logical] = [resolver.resolve(d) for d in documents]
            self.queue_urls[logical] = {
                _queue_name(resolver.resolve(value)) for value in self.queue_variables(logical).values()
            }

    def queue_variables(self, function: str) -> dict[str, Any]:
        """The function's environment variables (Globals' and its own, as SAM merges them) that hold a
        queue's URL: a `Ref` to an SQS queue of the template."""
        resources = self.packaged["Resources"]
        variables = {
            **self.packaged.get("Globals", {})
            .get("Function", {})
            .get("Environment", {})
            .get("Variables", {}),
            **resources[function]["Properties"].get("Environment", {}).get("Variables", {}),
        }
        return {
            name: value
            for name, value in variables.items()
            if isinstance(value, dict)
            and set(value) == {"Ref"}
            and resources.get(value["Ref"], {}).get("Type") == "AWS::SQS::Queue"
        }

    def resolve(self, expression: Any) -> Any:
        """A CloudFormation expression of the packaged template, as the roles' policies resolve it."""
        return self.resolver.resolve(expression)

    def without(self, function: str, statement: int) -> RoleBook:
        """The same stack with one statement taken out of `function`'s role."""
        packaged = json.loads(json.dumps(self.packaged))
        role = packaged["Resources"][function]["Properties"]["Role"]["Fn::GetAtt"][0]
        (policy,) = packaged["Resources"][role]["Properties"]["Policies"]
        del policy["PolicyDocument"]["Statement"][statement]
        return RoleBook(packaged, self.created, self.parameters, self.region)

    def denied(self, calls: Iterable[AwsCall]) -> list[str]:
        """One line per IAM request that the calling function's role does not allow."""
        refused = []
        for call in calls:
            if call.function not in self.policies:
                refused.append(f"{call.function}: no such function in the packaged template")
                continue
            for request in self.requests(call):
                if not self.allows(call.function, request):
                    refused.append(
                        f"{call.function}: {request.action} on {request.resource} ({call.operation})"
                    )
        return sorted(set(refused))

    def requests(self, call: AwsCall) -> list[Request]:
        """The IAM requests of one call, with the GetQueueUrl a cold start of the calling function makes
        first when the call names a queue by a URL the function is not given."""
        requests = requests_of(call, self.region)
        url = call.parameter("QueueUrl")
        if (
            call.service == "sqs"
            and url
            and _queue_name(url) not in self.queue_urls.get(call.function, set())
        ):
            lookup = AwsCall(call.function, "sqs", "GetQueueUrl", (("QueueName", _queue_name(url)),))
            requests += requests_of(lookup, self.region)
        return requests

    def allows(self, function: str, request: Request) -> bool:
        results = [_decision(document, request) for document in self.policies[function]]
        return PermissionResult.PERMITTED in results and PermissionResult.DENIED not in results


def _queue_name(url: str) -> str:
    """The queue a URL names (its last path segment)."""
    return urlparse(url).path.rsplit("/", 1)[-1]


def statement_allows(statement: dict[str, Any], request: Request) -> bool:
    return (
        _decision({"Version": "2012-10-17", "Statement": [statement]}, request) is PermissionResult.PERMITTED
    )


def _decision(document: dict[str, Any], request: Request) -> PermissionResult:
    return IAMPolicy(json.dumps(document)).is_action_permitted(request.action, request.resource)
