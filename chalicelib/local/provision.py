"""Create the resources of a CloudFormation/SAM JSON template in moto, the way CloudFormation would.

Only the resource types this project uses are supported; anything else (e.g. Chalice-generated functions,
IAM roles, queue policies) is skipped with a log line. Re-provisioning into the same moto server is a no-op
for resources that already exist, so it can run before every test after a ``/moto-api/reset``.

Over 600 lines: one resolver of the template's intrinsics and one creator per resource type, which read
the same resolved template; the resolver (`TemplateResolver`) is its own class for that reason.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from chalicelib.local.moto_server import ACCOUNT_ID
from chalicelib.settings import dead_letter_queue_url_variable, queue_url_variable

log = logging.getLogger(__name__)

_NO_VALUE = object()  # AWS::NoValue removes the property that holds it
_DUMMY_ROLE = f"arn:aws:iam::{ACCOUNT_ID}:role/weknora-local-stepfunctions"
_SUB_VAR = re.compile(r"\$\{([^}!][^}]*)\}")


@dataclass(frozen=True)
class ProvisionedResource:
    logical_id: str
    type: str
    name: str
    arn: str
    url: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, str | None]:
        return {"name": self.name, "arn": self.arn, "url": self.url}

    def __getitem__(self, key: str) -> str | None:  # res["WorkQueue"]["url"] works too
        return self.as_dict()[key]


class ProvisionedResources(dict[str, ProvisionedResource]):
    """Logical id → created resource, plus the resolved ``Globals.Function.Environment`` of the template."""

    def __init__(self, *args: Any, function_env: Mapping[str, str] | None = None) -> None:
        super().__init__(*args)
        self.function_env: dict[str, str] = dict(function_env or {})

    def of_type(self, cfn_type: str) -> list[ProvisionedResource]:
        return [r for r in self.values() if r.type == cfn_type]

    @property
    def queues(self) -> list[ProvisionedResource]:
        return self.of_type("AWS::SQS::Queue")

    def queue_url_env(self, queue_names: Mapping[str, str]) -> dict[str, str]:
        """The variables that give a function the URL of each stage queue provisioned here and of its
        dead-letter queue (its RedrivePolicy's target), by the code's name for the queue -> its SQS name.
        On AWS each function is given those its grants name (infra/stack.py)."""
        by_name = {q.name: q for q in self.queues}
        by_arn = {q.arn: q for q in self.queues}
        env: dict[str, str] = {}
        for queue, name in queue_names.items():
            found = by_name.get(name)
            if found is None or found.url is None:
                continue
            env[queue_url_variable(queue)] = found.url
            policy = found.attributes.get("RedrivePolicy")
            dead_letters = by_arn.get(json.loads(policy)["deadLetterTargetArn"]) if policy else None
            if dead_letters is not None and dead_letters.url is not None:
                env[dead_letter_queue_url_variable(queue)] = dead_letters.url
        return env

    @property
    def state_machines(self) -> list[ProvisionedResource]:
        return [r for r in self.values() if r.type in _STATE_MACHINE_TYPES]


class TemplateError(ValueError):
    pass


_STATE_MACHINE_TYPES = ("AWS::Serverless::StateMachine", "AWS::StepFunctions::StateMachine")
_SM_PROPS = (
    "Name",
    "StateMachineName",
    "Definition",
    "DefinitionString",
    "DefinitionUri",
    "DefinitionSubstitutions",
    "Role",
    "RoleArn",
    "Type",
    "StateMachineType",
)
#: CloudFormation queue properties that map one-to-one onto SQS queue attributes
_SQS_ATTRIBUTES = (
    "VisibilityTimeout",
    "MessageRetentionPeriod",
    "DelaySeconds",
    "MaximumMessageSize",
    "ReceiveMessageWaitTimeSeconds",
    "FifoQueue",
    "ContentBasedDeduplication",
)
_USED_PROPS: dict[str, tuple[str, ...]] = {
    "AWS::DynamoDB::Table": (
        "TableName",
        "KeySchema",
        "AttributeDefinitions",
        "BillingMode",
        "ProvisionedThroughput",
        "GlobalSecondaryIndexes",
        "LocalSecondaryIndexes",
        "StreamSpecification",
        "TimeToLiveSpecification",
    ),
    "AWS::SQS::Queue": ("QueueName", *_SQS_ATTRIBUTES, "RedrivePolicy"),
    "AWS::S3::Bucket": ("BucketName", "NotificationConfiguration"),
    "AWS::Serverless::StateMachine": _SM_PROPS,
    "AWS::StepFunctions::StateMachine": _SM_PROPS,
    "AWS::Events::EventBus": ("Name",),
}


class TemplateResolver:
    """CloudFormation's parameters, conditions and intrinsic functions over the resources `created` so far
    (what `Ref` and `Fn::GetAtt` of each resolve to)."""

    def __init__(
        self,
        template: dict[str, Any],
        parameters: Mapping[str, str],
        region: str,
        stack_name: str,
        created: Mapping[str, ProvisionedResource] | None = None,
    ) -> None:
        self.template = template
        self.resources_def: dict[str, Any] = template.get("Resources", {})
        self.region = region
        self.stack_name = stack_name
        self.params = self._parameter_values(parameters)
        self.created: dict[str, ProvisionedResource] = dict(created or {})
        self._conditions: dict[str, bool] = {}

    # ---- parameters and intrinsic functions -------------------------------------------------------------

    def _parameter_values(self, given: Mapping[str, str]) -> dict[str, Any]:
        values: dict[str, Any] = {
            "AWS::Region": self.region,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::StackName": self.stack_name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region}:{ACCOUNT_ID}:stack/{self.stack_name}/x",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": _NO_VALUE,
        }
        for name, spec in self.template.get("Parameters", {}).items():
            if name in given:
                value = str(given[name])
            elif "Default" in spec:
                value = str(spec["Default"])
            else:
                raise TemplateError(f"template parameter {name} has no Default and no value was given")
            allowed = spec.get("AllowedValues")
            if allowed is not None and value not in [str(a) for a in allowed]:
                raise TemplateError(f"parameter {name}={value!r} is not one of {allowed}")
            pattern = spec.get("AllowedPattern")
            if pattern is not None and not re.fullmatch(pattern, value):
                raise TemplateError(f"parameter {name}={value!r} does not match {pattern}")
            # a CommaDelimitedList is a list to the intrinsics (Fn::Join, Fn::Select), as CloudFormation has it
            values[name] = (
                (value.split(",") if value else []) if spec.get("Type") == "CommaDelimitedList" else value
            )
        unknown = set(given) - set(self.template.get("Parameters", {}))
        if unknown:
            log.warning("ignoring parameters not declared by the template: %s", sorted(unknown))
        return values

    def resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = [self.resolve(v) for v in value]
            return [v for v in items if v is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, arg),) = value.items()
            fn = self._intrinsics().get(key)
            if fn is not None:
                return fn(arg)
        out = {k: self.resolve(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not _NO_VALUE}

    def _intrinsics(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Sub": self._sub,
            "Fn::Join": lambda a: str(self.resolve(a[0])).join(str(x) for x in self.resolve(a[1])),
            "Fn::Select": lambda a: self.resolve(a[1])[int(self.resolve(a[0]))],
            "Fn::Split": lambda a: str(self.resolve(a[1])).split(str(self.resolve(a[0]))),
            "Fn::If": lambda a: self.resolve(a[1] if self.condition(a[0]) else a[2]),
            "Fn::Equals": lambda a: str(self.resolve(a[0])) == str(self.resolve(a[1])),
            "Fn::Not": lambda a: not self._truth(a[0]),
            "Fn::And": lambda a: all(self._truth(x) for x in a),
            "Fn::Or": lambda a: any(self._truth(x) for x in a),
            "Condition": self.condition,
        }

    def _truth(self, value: Any) -> bool:
        resolved = self.resolve(value)
        if isinstance(resolved, bool):
            return resolved
        raise TemplateError(f"condition did not evaluate to a boolean: {value!r}")

    def condition(self, name: str) -> bool:
        if name not in self._conditions:
            spec = self.template.get("Conditions", {}).get(name)
            if spec is None:
                raise TemplateError(f"unknown condition {name!r}")
            self._conditions[name] = self._truth(spec)
        return self._conditions[name]

    def _ref(self, name: str) -> Any:
        if name in self.params:
            return self.params[name]
        res = self._require(name)
        if res.type == "AWS::SQS::Queue":
            return res.url
        if res.type in _STATE_MACHINE_TYPES:
            return res.arn
        return res.name

    def _get_att(self, arg: Any) -> str:
        if isinstance(arg, str):
            logical, _, attr = arg.partition(".")
        else:
            logical, attr = arg[0], self.resolve(arg[1])
        res = self._require(logical)
        if attr == "Arn":
            return res.arn
        if attr in ("QueueName", "Name", "TableName"):
            return res.name
        if attr == "QueueUrl":
            return res.url or ""
        if attr in res.attributes:
            return res.attributes[attr]
        raise TemplateError(f"unsupported Fn::GetAtt {logical}.{attr}")

    def _sub(self, arg: Any) -> str:
        if isinstance(arg, list):
            text, local_vars = arg[0], {k: self.resolve(v) for k, v in arg[1].items()}
        else:
            text, local_vars = arg, {}

        def repl(m: re.Match[str]) -> str:
            name = m.group(1)
            if name in local_vars:
                return str(local_vars[name])
            if "." in name:
                logical, attr = name.split(".", 1)
                return self._get_att([logical, attr])
            return str(self._ref(name))

        # "${!Literal}" is CloudFormation's escape for a literal "${Literal}".
        return _SUB_VAR.sub(repl, text).replace("${!", "${")

    def _require(self, logical: str) -> ProvisionedResource:
        if logical in self.created:
            return self.created[logical]
        if logical in self.resources_def:
            raise TemplateError(f"{logical} is referenced but its type is not provisioned locally")
        raise TemplateError(f"unknown reference {logical!r}")


class _Provisioner(TemplateResolver):
    def __init__(
        self,
        template: dict[str, Any],
        parameters: Mapping[str, str],
        base_dir: Path,
        region: str,
        stack_name: str,
        endpoint_url: str | None,
    ) -> None:
        super().__init__(template, parameters, region, stack_name)
        self.base_dir = base_dir
        kw: dict[str, Any] = {"region_name": region}
        if endpoint_url:
            kw["endpoint_url"] = endpoint_url
        self.ddb: Any = boto3.client("dynamodb", **kw)
        self.sqs: Any = boto3.client("sqs", **kw)
        self.s3: Any = boto3.client("s3", **kw)
        self.sfn: Any = boto3.client("stepfunctions", **kw)
        self.events: Any = boto3.client("events", **kw)

    # ---- ordering -------------------------------------------------------------------------------------

    def _deps(self, logical: str) -> set[str]:
        found: set[str] = set()

        def walk(v: Any) -> None:
            if isinstance(v, dict):
                for k, x in v.items():
                    if k == "Ref" and isinstance(x, str):
                        found.add(x)
                    elif k == "Fn::GetAtt":
                        found.add(x.split(".", 1)[0] if isinstance(x, str) else x[0])
                    elif k == "Fn::Sub":
                        text = x if isinstance(x, str) else x[0]
                        found.update(n.split(".", 1)[0] for n in _SUB_VAR.findall(text))
                        walk(x)
                    else:
                        walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)

        spec = self.resources_def[logical]
        walk(spec.get("Properties", {}))
        depends = spec.get("DependsOn", [])
        found.update([depends] if isinstance(depends, str) else depends)
        return {d for d in found if d in self.resources_def and d != logical}

    def order(self) -> list[str]:
        ordered: list[str] = []
        state: dict[str, int] = {}

        def visit(n: str, path: tuple[str, ...]) -> None:
            if state.get(n) == 2:
                return
            if state.get(n) == 1:
                raise TemplateError(f"dependency cycle: {' -> '.join((*path, n))}")
            state[n] = 1
            for d in sorted(self._deps(n)):
                visit(d, (*path, n))
            state[n] = 2
            ordered.append(n)

        for n in self.resources_def:
            visit(n, ())
        return ordered

    # ---- resource types -------------------------------------------------------------------------------

    def run(self) -> ProvisionedResources:
        handlers: dict[str, Callable[[str, dict[str, Any]], ProvisionedResource | None]] = {
            "AWS::DynamoDB::Table": self._table,
            "AWS::SQS::Queue": self._queue,
            "AWS::S3::Bucket": self._bucket,
            "AWS::Serverless::StateMachine": self._state_machine,
            "AWS::StepFunctions::StateMachine": self._state_machine,
            "AWS::Events::EventBus": self._event_bus,
        }
        for logical in self.order():
            spec = self.resources_def[logical]
            if "Type" not in spec:
                # A --merge-template fragment for a resource Chalice generates (e.g. a function's Events).
                log.info("provision: skipping %s: no Type (a merge fragment)", logical)
                continue
            if "Condition" in spec and not self.condition(spec["Condition"]):
                log.info("provision: skipping %s: condition %s is false", logical, spec["Condition"])
                continue
            handler = handlers.get(spec["Type"])
            if handler is None:
                log.info("provision: skipping %s (%s): not emulated locally", logical, spec.get("Type"))
                continue
            props = self._resolve_props(logical, spec["Type"], spec.get("Properties", {}))
            res = handler(logical, props)
            if res is not None:
                self.created[logical] = res
                log.debug("provision: %s -> %s", logical, res.arn)
        env = self._function_env()
        return ProvisionedResources(self.created, function_env=env)

    def _resolve_props(self, logical: str, cfn_type: str, raw: dict[str, Any]) -> dict[str, Any]:
        # Resolve only the properties we act on: Policies, Tags, ... may point at skipped types.
        props: dict[str, Any] = {}
        for key in _USED_PROPS[cfn_type]:
            if key not in raw:
                continue
            try:
                value = self.resolve(raw[key])
            except TemplateError:
                if key in ("Role", "RoleArn"):  # an IAM role we do not create; moto does not enforce IAM
                    continue
                raise
            if value is not _NO_VALUE:
                props[key] = value
        return props

    def _function_env(self) -> dict[str, str]:
        variables = self.template.get("Globals", {}).get("Function", {}).get("Environment", {})
        env: dict[str, str] = {}
        # Per variable: one that points at a type not provisioned locally (an OpenSearch domain) is
        # skipped, and the app falls back to its local default for it.
        for name, raw in variables.get("Variables", {}).items():
            try:
                value = self.resolve(raw)
                if isinstance(value, dict | list):  # e.g. Fn::If on a condition: not evaluated locally
                    raise TemplateError(f"unsupported intrinsic in {name}")
                env[name] = str(value)
            except TemplateError as exc:
                log.info("provision: %s not resolvable locally (%s); using the app default", name, exc)
        return env

    def _physical_name(self, logical: str, props: dict[str, Any], key: str, lower: bool = False) -> str:
        name = props.get(key)
        if not name:
            # CloudFormation appends a random suffix; a stable one keeps re-provisioning idempotent.
            name = f"{self.stack_name}-{logical}"
        return str(name).lower() if lower else str(name)

    def _table(self, logical: str, props: dict[str, Any]) -> ProvisionedResource:
        name = self._physical_name(logical, props, "TableName")
        kw: dict[str, Any] = {
            "TableName": name,
            "KeySchema": props["KeySchema"],
            "AttributeDefinitions": props["AttributeDefinitions"],
        }
        billing = props.get("BillingMode", "PROVISIONED")
        kw["BillingMode"] = billing
        if billing == "PROVISIONED":
            kw["ProvisionedThroughput"] = _throughput(props.get("ProvisionedThroughput"))
        for key in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes"):
            if props.get(key):
                indexes = []
                for idx in props[key]:
                    idx = dict(idx)
                    if billing == "PROVISIONED" and key == "GlobalSecondaryIndexes":
                        idx["ProvisionedThroughput"] = _throughput(idx.get("ProvisionedThroughput"))
                    else:
                        idx.pop("ProvisionedThroughput", None)
                    indexes.append(idx)
                kw[key] = indexes
        if props.get("StreamSpecification"):
            kw["StreamSpecification"] = {"StreamEnabled": True, **props["StreamSpecification"]}
        try:
            desc = self.ddb.create_table(**kw)["TableDescription"]
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise
            desc = self.ddb.describe_table(TableName=name)["Table"]
        ttl = props.get("TimeToLiveSpecification")
        if ttl and ttl.get("Enabled"):
            try:
                self.ddb.update_time_to_live(
                    TableName=name,
                    TimeToLiveSpecification={"Enabled": True, "AttributeName": ttl["AttributeName"]},
                )
            except ClientError as exc:  # already enabled on re-provision
                if "already enabled" not in str(exc).lower():
                    raise
        attrs = {"StreamArn": desc["LatestStreamArn"]} if desc.get("LatestStreamArn") else {}
        return ProvisionedResource(logical, "AWS::DynamoDB::Table", name, desc["TableArn"], None, attrs)

    def _queue(self, logical: str, props: dict[str, Any]) -> ProvisionedResource:
        fifo = str(props.get("FifoQueue", "false")).lower() == "true"
        name = props.get("QueueName") or f"{self.stack_name}-{logical}" + (".fifo" if fifo else "")
        attributes: dict[str, str] = {}
        for key in _SQS_ATTRIBUTES:
            if key in props:
                attributes[key] = _attr_str(props[key])
        if "RedrivePolicy" in props:
            policy = props["RedrivePolicy"]
            attributes["RedrivePolicy"] = policy if isinstance(policy, str) else json.dumps(policy)
        try:
            url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        except ClientError as exc:
            if _code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
                raise
            url = self.sqs.get_queue_url(QueueName=name)["QueueUrl"]
            settable = {k: v for k, v in attributes.items() if k != "FifoQueue"}
            if settable:
                self.sqs.set_queue_attributes(QueueUrl=url, Attributes=settable)
        arn = f"arn:aws:sqs:{self.region}:{ACCOUNT_ID}:{name}"
        redrive = {"RedrivePolicy": attributes["RedrivePolicy"]} if "RedrivePolicy" in attributes else {}
        return ProvisionedResource(logical, "AWS::SQS::Queue", name, arn, url, attributes=redrive)

    def _bucket(self, logical: str, props: dict[str, Any]) -> ProvisionedResource:
        name = self._physical_name(logical, props, "BucketName", lower=True)
        kw: dict[str, Any] = {"Bucket": name}
        if self.region != "us-east-1":
            kw["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self.s3.create_bucket(**kw)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        notification = props.get("NotificationConfiguration") or {}
        queue_configs = []
        for qc in notification.get("QueueConfigurations", []):
            entry: dict[str, Any] = {"QueueArn": qc["Queue"], "Events": [qc["Event"]]}
            rules = (qc.get("Filter") or {}).get("S3Key", {}).get("Rules")
            if rules:
                filter_rules = [{"Name": r["Name"], "Value": r["Value"]} for r in rules]
                entry["Filter"] = {"Key": {"FilterRules": filter_rules}}
            queue_configs.append(entry)
        for other in ("TopicConfigurations", "LambdaConfigurations", "EventBridgeConfiguration"):
            if notification.get(other):
                log.info("provision: %s.%s not emulated (S3 -> SQS only)", logical, other)
        if queue_configs and _notification_key(queue_configs) != _notification_key(
            self.s3.get_bucket_notification_configuration(Bucket=name).get("QueueConfigurations", [])
        ):
            # Only when it changed: every put makes S3 send another s3:TestEvent to the queues.
            self.s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"QueueConfigurations": queue_configs}
            )
        attrs = {
            "DomainName": f"{name}.s3.amazonaws.com",
            "RegionalDomainName": f"{name}.s3.{self.region}.amazonaws.com",
        }
        return ProvisionedResource(logical, "AWS::S3::Bucket", name, f"arn:aws:s3:::{name}", None, attrs)

    def _state_machine(self, logical: str, props: dict[str, Any]) -> ProvisionedResource:
        name = props.get("Name") or props.get("StateMachineName") or f"{self.stack_name}-{logical}"
        definition = self._definition_text(logical, props)
        # DefinitionSubstitutions were resolved with the properties; apply them to the ASL text like SAM/CFN.
        for key, val in (props.get("DefinitionSubstitutions") or {}).items():
            definition = definition.replace("${" + key + "}", _attr_str(val))
        leftover = _SUB_VAR.findall(definition)
        if leftover:
            raise TemplateError(f"{logical}: unresolved definition substitutions {sorted(set(leftover))}")
        json.loads(definition)  # fail here, not deep inside moto, on a broken ASL file
        role = props.get("Role") or props.get("RoleArn") or _DUMMY_ROLE
        sm_type = props.get("Type") or props.get("StateMachineType") or "STANDARD"
        arn = f"arn:aws:states:{self.region}:{ACCOUNT_ID}:stateMachine:{name}"
        try:
            arn = self.sfn.create_state_machine(
                name=name, definition=definition, roleArn=str(role), type=sm_type
            )["stateMachineArn"]
        except ClientError as exc:
            if _code(exc) != "StateMachineAlreadyExists":
                raise
            self.sfn.update_state_machine(stateMachineArn=arn, definition=definition, roleArn=str(role))
        sm_cfn_type = "AWS::StepFunctions::StateMachine"
        return ProvisionedResource(logical, sm_cfn_type, name, arn, None, {"Name": name})

    def _event_bus(self, logical: str, props: dict[str, Any]) -> ProvisionedResource:
        """A custom bus on moto's EventBridge: `put_events` to it reaches its pattern rules' SQS targets."""
        name = self._physical_name(logical, props, "Name")
        try:
            arn = self.events.create_event_bus(Name=name)["EventBusArn"]
        except ClientError as exc:
            if _code(exc) != "ResourceAlreadyExistsException":
                raise
            arn = self.events.describe_event_bus(Name=name)["Arn"]
        return ProvisionedResource(logical, "AWS::Events::EventBus", name, str(arn), None, {"Name": name})

    def _definition_text(self, logical: str, props: dict[str, Any]) -> str:
        if "DefinitionString" in props:
            return str(props["DefinitionString"])
        if "Definition" in props:
            return json.dumps(props["Definition"])
        uri = props.get("DefinitionUri")
        if isinstance(uri, str) and not uri.startswith("s3://"):
            return (self.base_dir / uri).read_text(encoding="utf-8")
        raise TemplateError(f"{logical}: only a local DefinitionUri path or an inline Definition works")


def _notification_key(configs: list[dict[str, Any]]) -> list[tuple[str, tuple[str, ...], str]]:
    return sorted(
        (c["QueueArn"], tuple(sorted(c["Events"])), json.dumps(c.get("Filter", {}), sort_keys=True))
        for c in configs
    )


def _throughput(value: Any) -> dict[str, int]:
    value = value or {}
    return {
        "ReadCapacityUnits": int(value.get("ReadCapacityUnits", 5)),
        "WriteCapacityUnits": int(value.get("WriteCapacityUnits", 5)),
    }


def _attr_str(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


@dataclass(frozen=True)
class ImageFunction:
    """A container-image function of the template with an SQS event: locally, its handler runs in-process
    from ``functions/<name>/handler.py`` (the folder of its Dockerfile), polled like a Chalice handler."""

    logical_id: str
    handler_file: Path
    handler_name: str
    queue_logical_id: str
    batch_size: int
    maximum_batching_window_in_seconds: float
    report_batch_item_failures: bool
    timeout_seconds: float
    memory_mb: int


def image_sqs_functions(template_path: str | os.PathLike[str]) -> list[ImageFunction]:
    """The template's ``PackageType: Image`` functions and the queue each one's SQS event reads."""
    template = load_template(template_path)
    base = Path(template_path).resolve().parent
    defaults = template.get("Globals", {}).get("Function", {})
    found = []
    for logical, spec in template["Resources"].items():
        props = spec.get("Properties", {})
        if spec.get("Type") != "AWS::Serverless::Function" or props.get("PackageType") != "Image":
            continue
        metadata = spec.get("Metadata", {})
        if "Dockerfile" not in metadata:
            raise TemplateError(
                f"{logical}: an Image function needs Metadata.Dockerfile (sam build reads it)"
            )
        dockerfile = base / metadata.get("DockerContext", ".") / metadata["Dockerfile"]
        handler_file = dockerfile.parent / "handler.py"
        if not handler_file.is_file():
            raise TemplateError(f"{logical}: no handler module at {handler_file}")
        command = props.get("ImageConfig", {}).get("Command") or ["handler.handler"]
        module, _, function = str(command[0]).rpartition(".")
        if module != "handler":
            raise TemplateError(f"{logical}: ImageConfig.Command {command[0]!r} is not handler.<function>")
        for event in props.get("Events", {}).values():
            if event.get("Type") != "SQS":
                continue
            event_props = event["Properties"]
            queue = event_props["Queue"]
            if not (isinstance(queue, dict) and "Fn::GetAtt" in queue):
                raise TemplateError(
                    f"{logical}: only an SQS event whose Queue is Fn::GetAtt [Queue, Arn] runs locally"
                )
            target = queue["Fn::GetAtt"]
            found.append(
                ImageFunction(
                    logical_id=logical,
                    handler_file=handler_file,
                    handler_name=function,
                    queue_logical_id=target.split(".", 1)[0] if isinstance(target, str) else target[0],
                    batch_size=int(event_props.get("BatchSize", 10)),  # the SQS event source's default
                    maximum_batching_window_in_seconds=float(
                        event_props.get("MaximumBatchingWindowInSeconds", 0)
                    ),
                    report_batch_item_failures="ReportBatchItemFailures"
                    in event_props.get("FunctionResponseTypes", []),
                    timeout_seconds=float(props.get("Timeout", defaults.get("Timeout", 3))),  # SAM's defaults
                    memory_mb=int(props.get("MemorySize", defaults.get("MemorySize", 128))),
                )
            )
    return found


def load_template(template_path: str | os.PathLike[str]) -> dict[str, Any]:
    data = json.loads(Path(template_path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "Resources" not in data:
        raise TemplateError(f"{template_path}: not a CloudFormation template (no Resources)")
    return data


def provision(
    template_path: str | os.PathLike[str],
    parameters: Mapping[str, str] | None = None,
    base_dir: str | os.PathLike[str] | None = None,
    *,
    region: str | None = None,
    stack_name: str = "weknora-local",
    endpoint_url: str | None = None,
) -> ProvisionedResources:
    """Create the template's tables, queues, buckets (with S3 → SQS notifications) and state machines.

    ``base_dir`` is where relative ``DefinitionUri`` paths start (default: the template's folder).
    ``endpoint_url`` defaults to ``AWS_ENDPOINT_URL`` (set by :class:`MotoServer`).
    """
    template = load_template(template_path)
    base = Path(base_dir) if base_dir is not None else Path(template_path).resolve().parent
    region = region or os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    return _Provisioner(template, parameters or {}, base, region, stack_name, endpoint).run()
