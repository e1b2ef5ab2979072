"""The merge template `chalice package --merge-template` takes: `infra/template.json` (what is written by hand:
tables, queues, the bucket, the state machine, OpenSearch, layers) plus what is generated from tables in
code, so that each rule is written once:

- one IAM role per function from `infra/permissions.py`, with its own log group (retention a parameter),
  X-Ray, and, for a queue-triggered function, the event source mapping's rights on exactly its queue;
- each function's environment: the URL (`Ref`) of every queue and dead-letter queue its SQS grants name, so
  its code sends without a GetQueueUrl round trip per queue per cold start, and no role needs that action;
- each SQS trigger bound to its queue resource (`Fn::GetAtt`, so the `Prefix` parameter holds) with a
  maximum concurrency per stage;
- the state machine's role from the tasks its ASL runs;
- data that outlives the stack (tables, bucket, queues, the OpenSearch domain: DeletionPolicy
  RetainExceptOnCreate, UpdateReplacePolicy Retain; optional table deletion protection, point-in-time
  recovery), API Gateway throttling;
- a WAF web ACL on the API's stage that limits each API key's requests a minute before the stage's
  throttle spends its allowance on them (`TenantRequestsPerMinute`, 0: none);
- the API's gateway responses (`AWS::ApiGateway::GatewayResponse` in template.json, where the local stack
  reads them too) moved into the API's `GatewayResponses`, so every deployment of its stage carries them;
- the alarms, topic and dashboard of `infra/monitoring.py`.

    python infra/stack.py [OUT]    (`chalice package` into OUT; scripts/build_lambda.py does it for `make package`)
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

INFRA = Path(__file__).resolve().parent
if str(INFRA) not in sys.path:  # run as a script or imported from scripts/ and tests/
    sys.path.insert(0, str(INFRA))

from monitoring import monitoring_fragment  # noqa: E402
from permissions import (  # noqa: E402
    FUNCTIONS,
    QUEUES,
    SEARCH_INDEX,
    TRACING,
    VPC_NETWORK_INTERFACES,
    Grant,
    dead_letter_queue,
)

BASE_TEMPLATE = INFRA / "template.json"
ASL = INFRA / "statemachine" / "knowledge.asl.json"

#: the queue that triggers each function (None: the API, the schedule)
TRIGGERS: dict[str, str | None] = {
    "APIHandler": None,
    "Housekeeping": None,
    "OnUploadEvent": "uploads",
    "DocreaderStage": "docreader",
    "ChunkingStage": "chunking",
    "EmbeddingStage": "embedding",
    "MultimodalTask": "multimodal",
    "PostprocessTask": "postprocess",
    "EnrichmentTask": "enrichment",
    "LifecycleTask": "lifecycle",
    "WikiTask": "wiki",
    "FaqImportTask": "faq-import",
    "WebhookDelivery": "webhooks",
    "WebhookSlowDelivery": "webhooks-slow",
}
#: how many invocations each trigger may run at once (SQS ScalingConfig, 2..1000), after WeKnora's worker
#: pools (docreader 4 workers per instance, enrichment 12, postprocess 2, maintenance 4, wiki 8): a big
#: import fills its own stage, never every Lambda slot of the account
MAXIMUM_CONCURRENCY = {
    "uploads": 5,
    "docreader": 10,
    "chunking": 10,
    "embedding": 10,
    "multimodal": 5,
    "postprocess": 5,
    "enrichment": 12,
    "lifecycle": 4,
    "wiki": 8,
    "faq-import": 2,
    "webhooks": 5,
    # degraded webhooks' tries (stages/webhooks.py): the fewest SQS allows, so receivers that fail most of
    # their tries hold 2 workers between them, never the 5 of the webhooks queue
    "webhooks-slow": 2,
}
RETAINED_TYPES = (
    "AWS::DynamoDB::Table",
    "AWS::S3::Bucket",
    "AWS::SQS::Queue",
    # the index: rebuilding it means re-embedding every document
    "AWS::OpenSearchService::Domain",
)
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557)

#: one API key's requests a minute that WAF lets through: above the in-Lambda per-tenant default (20 a second,
#: 1,200 a minute), so a tenant within its rate never meets WAF, and well below the stage's (100 a second)
TENANT_REQUESTS_PER_MINUTE = 1800
#: seconds a client refused by WAF waits: the rule counts the trailing 60 s
WAF_RETRY_AFTER_SECONDS = 60

PARAMETERS: dict[str, Any] = {
    "LogRetentionDays": {
        "Type": "Number",
        "Default": 30,
        "AllowedValues": list(LOG_RETENTION_DAYS),
        "Description": "Days the functions' CloudWatch logs are kept.",
    },
    "TableDeletionProtection": {
        "Type": "String",
        "Default": "false",
        "AllowedValues": ["true", "false"],
        "Description": "DynamoDB deletion protection on every table, against deleting them by hand. The "
        "tables are retained when the stack is deleted either way. Protected tables cannot be deleted by "
        "CloudFormation either, so a failed deploy cannot roll back a table it created: turn it on after the "
        "first deploy.",
    },
    "ApiThrottleRate": {
        "Type": "Number",
        "Default": 100,
        "MinValue": 1,
        "Description": "API Gateway steady-state requests per second, for the whole API (5 tenants at the "
        "per-tenant default of 20 a second; the account's Lambda concurrency must follow it).",
    },
    "ApiThrottleBurst": {
        "Type": "Number",
        "Default": 200,
        "MinValue": 1,
        "Description": "API Gateway burst: requests above the rate served at once before 429s.",
    },
    "TenantRequestsPerMinute": {
        # a String for its pattern: a Number's MinValue cannot say "0 or at least 10", and a limit of 1-9
        # made WAF refuse the web ACL and the whole stack roll back
        "Type": "String",
        "Default": str(TENANT_REQUESTS_PER_MINUTE),
        "AllowedPattern": r"^(0|[1-9][0-9]{1,8})$",
        "ConstraintDescription": "0 (no web ACL) or a whole number from 10 (WAF's minimum) to 999999999",
        "Description": "AWS WAF's limit on one API key's requests in any 60 s, in front of the API's stage "
        "throttle (429 tenant_rate_limited): 0 (no web ACL) or at least 10 (WAF's minimum). Requests without "
        "an X-API-Key header are not counted by it.",
    },
    "Tracing": {
        "Type": "String",
        "Default": "PassThrough",
        "AllowedValues": ["Active", "PassThrough"],
        "Description": "X-Ray tracing of the functions: Active samples every function's invocations (X-Ray "
        "charges per trace); PassThrough traces only what arrives sampled.",
    },
}


def statement(grant: Grant) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": list(grant.actions), "Resource": list(grant.resources)}


def function_role(function: str, grants: list[Grant]) -> dict[str, Any]:
    logs = Grant(
        ("logs:CreateLogStream", "logs:PutLogEvents"), ({"Fn::GetAtt": [f"{function}LogGroup", "Arn"]},)
    )
    reaches_index = SEARCH_INDEX in grants
    return {
        "Type": "AWS::IAM::Role",
        "Properties": {
            "Description": {"Fn::Sub": f"${{Prefix}} {function}: what infra/permissions.py grants it"},
            "AssumeRolePolicyDocument": {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            },
            "Policies": [
                {
                    "PolicyName": "least-privilege",
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            *(statement(g) for g in [*grants, logs, TRACING]),
                            *(
                                [in_opensearch_vpc(statement(VPC_NETWORK_INTERFACES))]
                                if reaches_index
                                else []
                            ),
                        ],
                    },
                }
            ],
        },
    }


def in_opensearch_vpc(value: dict[str, Any]) -> dict[str, Any]:
    """`value` where the stack puts OpenSearch in a VPC (OpenSearchSubnetIds), else nothing."""
    return {"Fn::If": ["HasOpenSearchVpc", value, {"Ref": "AWS::NoValue"}]}


def log_group(function: str) -> dict[str, Any]:
    return {
        "Type": "AWS::Logs::LogGroup",
        "Properties": {
            "LogGroupName": {"Fn::Sub": f"/aws/lambda/${{Prefix}}/{function}"},
            "RetentionInDays": {"Ref": "LogRetentionDays"},
        },
    }


#: the variables chalicelib/settings.py reads a queue's URL from (`queue_url_variable`,
#: `dead_letter_queue_url_variable`); tests/infra/test_queue_urls.py reads the packaged ones back through it
QUEUE_URL_VARIABLE = "WEKNORA_QUEUE_URL_{}"
DEAD_LETTER_QUEUE_URL_VARIABLE = "WEKNORA_DLQ_URL_{}"


def queue_url_environment(grants: list[Grant]) -> dict[str, Any]:
    """The URL of each queue and dead-letter queue the SQS grants name: what the function's code may send to,
    probe or receive from is what it is given, from the one table, so grants and URLs cannot drift. Queues a
    grant lets it look up (sqs:GetQueueUrl) are not given."""
    by_logical_id = {
        **{logical: QUEUE_URL_VARIABLE.format(_variable_part(q)) for q, logical in QUEUES.items()},
        **{dead_letter_queue(q): DEAD_LETTER_QUEUE_URL_VARIABLE.format(_variable_part(q)) for q in QUEUES},
    }
    named: set[str] = set()
    looked_up: set[str] = set()
    for grant in grants:
        if not any(action.startswith("sqs:") for action in grant.actions):
            continue
        for resource in grant.resources:
            logical = resource.get("Fn::GetAtt", [None])[0] if isinstance(resource, dict) else None
            if logical not in by_logical_id:
                raise ValueError(f"an SQS grant on {resource!r}, which is not a stage or dead-letter queue")
            (looked_up if "sqs:GetQueueUrl" in grant.actions else named).add(logical)
    return {by_logical_id[logical]: {"Ref": logical} for logical in sorted(named - looked_up)}


def _variable_part(queue: str) -> str:
    return queue.upper().replace("-", "_")


def function_fragment(function: str) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "Role": {"Fn::GetAtt": [f"{function}Role", "Arn"]},
        "LoggingConfig": {"LogGroup": {"Ref": f"{function}LogGroup"}},
        "Tracing": {"Ref": "Tracing"},
    }
    urls = queue_url_environment(FUNCTIONS[function])
    if urls:  # over Globals' variables (SAM merges the two)
        properties["Environment"] = {"Variables": urls}
    if SEARCH_INDEX in FUNCTIONS[function]:  # with OpenSearchSubnetIds, next to the domain in its VPC
        properties["VpcConfig"] = in_opensearch_vpc(
            {
                "SubnetIds": {"Ref": "OpenSearchSubnetIds"},
                "SecurityGroupIds": {"Ref": "OpenSearchSecurityGroupIds"},
            }
        )
    queue = TRIGGERS[function]
    if queue is not None:  # the queue itself is bound after packaging: see bind_triggers
        properties["Events"] = {
            trigger_event(function): {
                "Properties": {
                    "ScalingConfig": {"MaximumConcurrency": MAXIMUM_CONCURRENCY[queue]},
                    "FunctionResponseTypes": ["ReportBatchItemFailures"],
                }
            }
        }
    return {"Properties": properties}


def trigger_event(function: str) -> str:
    return f"{function}SqsEventSource"


def bind_triggers(packaged: dict[str, Any]) -> None:
    """Points every SQS trigger at its queue resource. Chalice writes the queue's ARN as a literal
    (`…:weknora-chunking`), which another `Prefix` would leave pointing at a queue that does not exist or at
    another stack's; a merge cannot replace it (it merges the two intrinsics into one object)."""
    for function, queue in TRIGGERS.items():
        if queue is None:
            continue
        event = packaged["Resources"][function]["Properties"]["Events"][trigger_event(function)]
        event["Properties"]["Queue"] = {"Fn::GetAtt": [QUEUES[queue], "Arn"]}


#: what Step Functions needs to deliver a state machine's logs to CloudWatch Logs; AWS documents these
#: actions on "*" only (the delivery is set up on the account, not on the log group)
STATE_MACHINE_LOG_DELIVERY = {
    "Effect": "Allow",
    "Action": [
        "logs:CreateLogDelivery",
        "logs:GetLogDelivery",
        "logs:UpdateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:DescribeResourcePolicies",
        "logs:DescribeLogGroups",
    ],
    "Resource": "*",
}


def state_machine_statements(asl: dict[str, Any], substitutions: dict[str, Any]) -> list[dict[str, Any]]:
    """The rights each Task state of the ASL needs (`arn:${Partition}:states:::sqs:sendMessage.waitForTaskToken`
    -> sqs:SendMessage on the queue its QueueUrl names), on the resources its substitutions point at. A task's
    ARN takes its partition from the substitution `Partition` (AWS::Partition), never a literal `aws`."""
    tasks = _task_states(asl)
    needed: dict[str, list[Any]] = {}
    for state in tasks:
        match = re.fullmatch(r"arn:\$\{Partition\}:states:::(\w+):(\w+)(\.\w+)?", state["Resource"])
        if match is None:
            raise ValueError(
                f"unsupported task resource {state['Resource']!r} (arn:${{Partition}}:states:::…)"
            )
        service, action = match.group(1), match.group(2)
        parameters = state.get("Parameters", {})
        if service == "sqs":
            target = substitutions[_variable(parameters["QueueUrl"])]["Ref"]
        elif service == "dynamodb":
            target = substitutions[_variable(parameters["TableName"])]["Ref"]
        else:
            raise ValueError(f"no rule for a {service} task")
        resources = needed.setdefault(f"{service}:{action[0].upper()}{action[1:]}", [])
        arn = {"Fn::GetAtt": [target, "Arn"]}
        if arn not in resources:
            resources.append(arn)
    if tasks and substitutions.get("Partition") != {"Ref": "AWS::Partition"}:
        raise ValueError("the state machine's DefinitionSubstitutions need Partition: {Ref: AWS::Partition}")
    return [{"Effect": "Allow", "Action": [a], "Resource": r} for a, r in sorted(needed.items())]


def _variable(text: str) -> str:
    match = re.fullmatch(r"\$\{(\w+)\}", text)
    if match is None:
        raise ValueError(f"expected a ${{Substitution}}, got {text!r}")
    return match.group(1)


def _task_states(node: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(node, dict):
        if node.get("Type") == "Task":
            found.append(node)
        for value in node.values():
            found += _task_states(value)
    elif isinstance(node, list):
        for value in node:
            found += _task_states(value)
    return found


def api_gateway_responses(resources: dict[str, Any]) -> dict[str, Any]:
    """Removes the `AWS::ApiGateway::GatewayResponse` resources of the API from `resources` and returns them
    in SAM's `GatewayResponses` form. Beside the API they change without a new deployment of its stage,
    which then keeps serving the old ones (cfn-lint W3660); in the API's definition each deployment has
    them."""
    responses: dict[str, Any] = {}
    for logical in [k for k, v in resources.items() if v.get("Type") == "AWS::ApiGateway::GatewayResponse"]:
        properties = resources.pop(logical)["Properties"]
        if properties.get("RestApiId") != {"Ref": "RestAPI"}:
            raise ValueError(f"{logical}: a gateway response of another API than RestAPI")
        headers: dict[str, Any] = {}
        for name, value in properties.get("ResponseParameters", {}).items():
            if not name.startswith("gatewayresponse.header."):
                raise ValueError(f"{logical}: only header response parameters are moved, not {name}")
            headers[name.removeprefix("gatewayresponse.header.")] = value
        response: dict[str, Any] = {}
        if "StatusCode" in properties:
            response["StatusCode"] = properties["StatusCode"]
        if headers:
            response["ResponseParameters"] = {"Headers": headers}
        if "ResponseTemplates" in properties:
            response["ResponseTemplates"] = properties["ResponseTemplates"]
        responses[properties["ResponseType"]] = response
    return responses


TENANT_RATE_CONDITION = "HasTenantRateLimit"
WEB_ACL = "ApiWebAcl"
WEB_ACL_ASSOCIATION = "ApiWebAclAssociation"
_WAF_BODY = "tenant_rate_limited"


def tenant_rate_web_acl() -> dict[str, Any]:
    """A per-key limit in front of the stage throttle. The API's own per-tenant limit refuses in the Lambda,
    after API Gateway has spent the stage's (whole API's) allowance on the request: one noisy tenant still
    throttles the others. WAF refuses before the stage counts. It counts per X-API-Key value (a tenant's
    keys each count apart); a request without the header is not counted (WAF leaves requests missing a
    custom key out of the rule)."""
    message = (
        "this API key made more than ${TenantRequestsPerMinute} requests in 60 s; "
        f"wait {WAF_RETRY_AFTER_SECONDS} s (Retry-After) and send fewer"
    )
    envelope = json.dumps({"success": False, "error": {"code": "tenant_rate_limited", "message": message}})
    visibility = {"SampledRequestsEnabled": True, "CloudWatchMetricsEnabled": True}
    return {
        "Type": "AWS::WAFv2::WebACL",
        "Condition": TENANT_RATE_CONDITION,
        "Properties": {
            "Name": {"Fn::Sub": "${Prefix}-api"},
            "Scope": "REGIONAL",
            "Description": "Requests per API key, in front of the API stage throttle",
            "DefaultAction": {"Allow": {}},
            "CustomResponseBodies": {
                _WAF_BODY: {"ContentType": "APPLICATION_JSON", "Content": {"Fn::Sub": envelope}}
            },
            "Rules": [
                {
                    "Name": "requests-per-api-key",
                    "Priority": 0,
                    "Statement": {
                        "RateBasedStatement": {
                            "Limit": {"Ref": "TenantRequestsPerMinute"},
                            "EvaluationWindowSec": 60,
                            "AggregateKeyType": "CUSTOM_KEYS",
                            "CustomKeys": [
                                {
                                    "Header": {
                                        "Name": "x-api-key",
                                        "TextTransformations": [{"Priority": 0, "Type": "NONE"}],
                                    }
                                }
                            ],
                        }
                    },
                    "Action": {
                        "Block": {
                            "CustomResponse": {
                                "ResponseCode": 429,
                                "CustomResponseBodyKey": _WAF_BODY,
                                "ResponseHeaders": [
                                    {"Name": "Retry-After", "Value": str(WAF_RETRY_AFTER_SECONDS)}
                                ],
                            }
                        }
                    },
                    "VisibilityConfig": {
                        **visibility,
                        "MetricName": {"Fn::Sub": "${Prefix}-requests-per-api-key"},
                    },
                }
            ],
            "VisibilityConfig": {**visibility, "MetricName": {"Fn::Sub": "${Prefix}-api"}},
        },
    }


def associate_web_acl(packaged: dict[str, Any]) -> None:
    """Puts the web ACL on the API's stage, named as chalice wrote it. SAM names the stage resource
    `RestAPI<stage>Stage` for an alphanumeric stage name; the association waits for it (else it races the
    stage's creation)."""
    stage = packaged["Resources"]["RestAPI"]["Properties"]["StageName"]
    if not (isinstance(stage, str) and stage.isalnum()):
        raise ValueError(f"api_gateway_stage {stage!r}: the web ACL needs an alphanumeric stage name")
    packaged["Resources"][WEB_ACL_ASSOCIATION] = {
        "Type": "AWS::WAFv2::WebACLAssociation",
        "Condition": TENANT_RATE_CONDITION,
        "DependsOn": f"RestAPI{stage}Stage",
        "Properties": {
            "ResourceArn": {
                "Fn::Sub": f"arn:${{AWS::Partition}}:apigateway:${{AWS::Region}}::/restapis/${{RestAPI}}/stages/{stage}"
            },
            "WebACLArn": {"Fn::GetAtt": [WEB_ACL, "Arn"]},
        },
    }


def _merge(into: dict[str, Any], fragment: dict[str, Any]) -> None:
    for key, value in fragment.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def merge_template(base: dict[str, Any] | None = None) -> dict[str, Any]:
    template = copy.deepcopy(base if base is not None else json.loads(BASE_TEMPLATE.read_text()))
    resources = template["Resources"]
    if set(FUNCTIONS) != set(TRIGGERS):
        raise ValueError(
            f"permissions and triggers name different functions: {set(FUNCTIONS) ^ set(TRIGGERS)}"
        )
    _merge(template.setdefault("Parameters", {}), PARAMETERS)
    template.setdefault("Conditions", {})["ProtectTables"] = {
        "Fn::Equals": [{"Ref": "TableDeletionProtection"}, "true"]
    }
    template["Conditions"][TENANT_RATE_CONDITION] = {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "TenantRequestsPerMinute"}, "0"]}]
    }
    resources[WEB_ACL] = tenant_rate_web_acl()
    for function, grants in FUNCTIONS.items():
        resources[f"{function}Role"] = function_role(function, grants)
        resources[f"{function}LogGroup"] = log_group(function)
        _merge(resources.setdefault(function, {}), function_fragment(function))

    domain = resources.get("OpenSearchDomain")
    if domain is not None:  # only the functions that search or index may sign requests to it
        (access,) = domain["Properties"]["AccessPolicies"]["Statement"]
        access["Principal"] = {
            "AWS": [
                {"Fn::GetAtt": [f"{f}Role", "Arn"]}
                for f, grants in FUNCTIONS.items()
                if SEARCH_INDEX in grants
            ]
        }

    machine = resources["KnowledgeStateMachine"]["Properties"]
    tasks = state_machine_statements(json.loads(ASL.read_text()), machine["DefinitionSubstitutions"])
    logs = [STATE_MACHINE_LOG_DELIVERY] if "Logging" in machine else []
    machine["Policies"] = [{"Version": "2012-10-17", "Statement": [*tasks, *logs]}]

    for spec in resources.values():
        if spec.get("Type") in RETAINED_TYPES:
            # kept when the stack is deleted, but not left behind by the rollback of the deploy that
            # created it: a failed first deploy would otherwise hold the names the retry needs
            spec["DeletionPolicy"] = "RetainExceptOnCreate"
            spec["UpdateReplacePolicy"] = "Retain"
        if spec.get("Type") == "AWS::DynamoDB::Table":
            properties = spec["Properties"]
            properties["PointInTimeRecoverySpecification"] = {"PointInTimeRecoveryEnabled": True}
            properties["DeletionProtectionEnabled"] = {"Fn::If": ["ProtectTables", True, False]}

    _merge(
        resources.setdefault("RestAPI", {}),
        {
            "Properties": {
                "GatewayResponses": api_gateway_responses(resources),
                "MethodSettings": [
                    {
                        "ResourcePath": "/*",
                        "HttpMethod": "*",
                        "ThrottlingRateLimit": {"Ref": "ApiThrottleRate"},
                        "ThrottlingBurstLimit": {"Ref": "ApiThrottleBurst"},
                    }
                ],
            }
        },
    )

    monitoring = monitoring_fragment({f: (QUEUES[q] if q else None) for f, q in TRIGGERS.items()})
    for section, entries in monitoring.items():
        clashes = set(entries) & set(template.get(section, {}))
        if clashes:
            raise ValueError(f"monitoring redefines {section}: {sorted(clashes)}")
        template.setdefault(section, {}).update(entries)
    return template


def package(out: Path, stage: str = "dev", *, project: Path = INFRA.parent) -> dict[str, Any]:
    """`chalice package` of the project with the generated merge template, triggers bound: `out/sam.json`."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="weknora-merge-") as scratch:
        merge = Path(scratch) / "merge-template.json"
        merge.write_text(json.dumps(merge_template(), indent=1) + "\n")
        env = {**os.environ, "AWS_DEFAULT_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1")}
        env.pop("AWS_ENDPOINT_URL", None)
        chalice = Path(sys.executable).parent / "chalice"
        command = [str(chalice), "package", "--stage", stage, "--merge-template", str(merge), str(out)]
        print("+", " ".join(command), flush=True)
        subprocess.run(command, cwd=project, env=env, check=True)
    packaged: dict[str, Any] = json.loads((out / "sam.json").read_text())
    bind_triggers(packaged)
    associate_web_acl(packaged)
    (out / "sam.json").write_text(json.dumps(packaged, indent=2) + "\n")
    return packaged


if __name__ == "__main__":
    package(Path(sys.argv[1]) if len(sys.argv) > 1 else INFRA.parent / "out")
