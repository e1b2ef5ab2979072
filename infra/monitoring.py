"""Alarms and a dashboard for the deployed pipeline, as a CloudFormation fragment `infra/stack.py` merges
into the template (plain Python, never deployed).

Alarms: every dead-letter queue's depth, the state machine's failed and timed-out executions, each
function's errors and throttles, the age of the oldest message of every queue that triggers a
function, and the OpenSearch domain's health (red, writes blocked, storage, JVM memory; AWS's recommended
alarms); all notify one SNS topic (ALARM and OK), which e-mails `AlarmEmail` when it is set.
Dashboard: documents per stage, failures, queue depths and ages, and the cost per finished document,
from the AWS metrics and the EMF metrics the code emits (`chalicelib/observability.py`).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

STATE_MACHINE = "KnowledgeStateMachine"
#: the domain and the condition it exists under (infra/template.json)
SEARCH_DOMAIN = "OpenSearchDomain"
SEARCH_CONDITION = "HasOpenSearch"
#: alarm when a data node has less than this share of its EBS volume free (AWS recommends 25 %)
FREE_STORAGE_PERCENT = 25
TOPIC = "AlarmTopic"
DASHBOARD = "PipelineDashboard"
#: POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_SERVICE_NAME in the template's Globals: Powertools adds the
#: service as a dimension, and CloudWatch matches a metric on its exact dimension set
NAMESPACE = "WeknoraIngest"
SERVICE = "weknora-ingest"
#: stages whose outcomes are metrics (the runner's run_stage); the tasks (run_task) meter their cost only
OUTCOME_STAGES = ("docreader", "chunking", "embedding")
COST_STAGES = (*OUTCOME_STAGES, "multimodal", "postprocess", "enrichment")
COST_METRIC = "StageCostUSD"
#: queues whose stages legitimately keep a message for a long time (15-minute runs, 90-minute visibility)
SLOW_QUEUES = frozenset({"DocreaderQueue", "EmbeddingQueue"})
PERIOD = 300

PARAMETERS: dict[str, Any] = {
    "AlarmEmail": {
        "Type": "String",
        "Default": "",
        "AllowedPattern": r"^$|^[^@\s]+@[^@\s]+\.[^@\s]+$",
        "ConstraintDescription": "an e-mail address, or empty",
        "Description": "E-mail address the pipeline's alarms are sent to (SNS asks it to confirm the "
        "subscription first). Empty: alarms go only to the AlarmTopicArn output's topic, for you to "
        "subscribe a pager or chat to.",
    },
    "OldestMessageAgeSeconds": {
        "Type": "Number",
        "Default": 1800,
        "MinValue": 60,
        "Description": "Alarm when a message has waited this long in the uploads, chunking, multimodal, "
        "postprocess, enrichment, lifecycle, wiki or FAQ-import queue: the stage is stuck, failing or "
        "cannot keep up.",
    },
    "SlowStageOldestMessageAgeSeconds": {
        "Type": "Number",
        "Default": 7200,
        "MinValue": 60,
        "Description": "The same alarm for the docreader and embedding queues, whose runs legitimately "
        "take up to 15 minutes each (OCR, large files).",
    },
    "FunctionErrorsThreshold": {
        "Type": "Number",
        "Default": 5,
        "MinValue": 1,
        "Description": "Alarm when a Lambda function fails this many invocations within 5 minutes. "
        "A stage retries a failed message, so a single error is not yet a problem.",
    },
    "FunctionThrottlesThreshold": {
        "Type": "Number",
        "Default": 10,
        "MinValue": 1,
        "Description": "Alarm when a Lambda function is throttled this many times within 5 minutes: the "
        "account's concurrency limit is reached (queued work waits, the API answers 429).",
    },
}

CONDITIONS: dict[str, Any] = {"HasAlarmEmail": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]}}


def monitoring_fragment(functions: Mapping[str, str | None]) -> dict[str, Any]:
    """`functions`: each function's logical id -> the logical id of the queue that triggers it, or None.
    The dead-letter queue of `XQueue` is `XDeadLetterQueue`."""
    triggered = {function: queue for function, queue in functions.items() if queue}
    for queue in triggered.values():
        if not queue.endswith("Queue"):
            raise ValueError(f"{queue}: a queue's logical id ends with Queue (its DLQ is XDeadLetterQueue)")
    resources: dict[str, Any] = {
        TOPIC: {
            "Type": "AWS::SNS::Topic",
            "Properties": {
                "TopicName": {"Fn::Sub": "${Prefix}-alarms"},
                "DisplayName": {"Fn::Sub": "${Prefix} alarms"},
            },
        },
        "AlarmEmailSubscription": {
            "Type": "AWS::SNS::Subscription",
            "Condition": "HasAlarmEmail",
            "Properties": {
                "TopicArn": {"Ref": TOPIC},
                "Protocol": "email",
                "Endpoint": {"Ref": "AlarmEmail"},
            },
        },
    }
    for queue in sorted(set(triggered.values())):
        dlq = dead_letter_queue(queue)
        resources[f"{dlq}DepthAlarm"] = _alarm(
            f"{_kebab(dlq)}-not-empty",
            f"Messages wait in {dlq}: work that failed all its tries (or was unreadable). List them with "
            "GET /api/v1/admin/dlq, fix the cause, then POST /api/v1/admin/dlq/redrive.",
            ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "QueueName", _queue_name(dlq)),
            "Maximum",
            1,
        )
        slow = queue in SLOW_QUEUES
        resources[f"{queue}AgeAlarm"] = _alarm(
            f"{_kebab(queue)}-oldest-message",
            f"A message has waited too long in {queue}: its stage is stuck, failing or cannot keep up "
            "(see the function's errors and throttles, and its logs).",
            ("AWS/SQS", "ApproximateAgeOfOldestMessage", "QueueName", _queue_name(queue)),
            "Maximum",
            {"Ref": "SlowStageOldestMessageAgeSeconds" if slow else "OldestMessageAgeSeconds"},
            comparison="GreaterThanThreshold",
        )
    for function in sorted(functions):
        for metric, threshold in (
            ("Errors", "FunctionErrorsThreshold"),
            ("Throttles", "FunctionThrottlesThreshold"),
        ):
            resources[f"{function}{metric}Alarm"] = _alarm(
                f"{_kebab(function)}-{metric.lower()}",
                f"{function}: {metric.lower()} reached the {threshold} parameter within 5 minutes. "
                "Errors: see its log group; throttles: the account's Lambda concurrency limit is reached.",
                ("AWS/Lambda", metric, "FunctionName", {"Ref": function}),
                "Sum",
                {"Ref": threshold},
            )
    for metric, what in (("ExecutionsFailed", "failed"), ("ExecutionsTimedOut", "timed out")):
        resources[f"{STATE_MACHINE}{metric}Alarm"] = _alarm(
            f"knowledge-workflow-{metric.removeprefix('Executions').lower()}",
            f"A knowledge workflow execution {what}: its document may be left unfinished. See the "
            "execution's history in the Step Functions console.",
            ("AWS/States", metric, "StateMachineArn", {"Ref": STATE_MACHINE}),
            "Sum",
            1,
        )
    resources.update(search_domain_alarms())
    resources[DASHBOARD] = {
        "Type": "AWS::CloudWatch::Dashboard",
        "Properties": {
            "DashboardName": {"Fn::Sub": "${Prefix}-pipeline"},
            "DashboardBody": {"Fn::Sub": json.dumps(dashboard_body(functions), separators=(",", ":"))},
        },
    }
    return {
        "Parameters": copy.deepcopy(PARAMETERS),
        "Conditions": copy.deepcopy(CONDITIONS),
        "Resources": resources,
        "Outputs": {
            "AlarmTopicArn": {
                "Description": "SNS topic of the pipeline's alarms: subscribe more endpoints to it.",
                "Value": {"Ref": TOPIC},
            },
            "DashboardUrl": {
                "Description": "The pipeline's CloudWatch dashboard.",
                "Value": {
                    "Fn::Sub": "https://${AWS::Region}.console.aws.amazon.com/cloudwatch/home"
                    "?region=${AWS::Region}#dashboards:name=${" + DASHBOARD + "}"
                },
            },
        },
    }


def search_domain_alarms() -> dict[str, Any]:
    """The OpenSearch domain's recommended alarms, on its per-domain metrics (AWS/ES, DomainName and
    ClientId), only where the stack has the domain."""
    domain = [("DomainName", {"Ref": SEARCH_DOMAIN}), ("ClientId", {"Ref": "AWS::AccountId"})]
    alarms: dict[str, Any] = {
        "OpenSearchClusterRedAlarm": _alarm(
            "opensearch-cluster-red",
            "The OpenSearch domain is red: a primary shard is unassigned, so searches miss documents and "
            "index writes to it fail. See the domain's cluster health in the OpenSearch console.",
            ("AWS/ES", "ClusterStatus.red", domain),
            "Maximum",
            1,
        ),
        "OpenSearchWritesBlockedAlarm": _alarm(
            "opensearch-writes-blocked",
            "The OpenSearch domain blocks index writes (storage or JVM memory pressure): the embedding "
            "stage's writes fail and documents go to the dead-letter queue. Free storage or scale the domain.",
            ("AWS/ES", "ClusterIndexWritesBlocked", domain),
            "Maximum",
            1,
        ),
        "OpenSearchOldGenJvmMemoryAlarm": _alarm(
            "opensearch-jvm-memory",
            "The OpenSearch domain's old-generation JVM heap stayed at 80 % or more for 3 minutes: it may "
            "soon block writes or crash nodes. Use a larger instance type (OpenSearchInstanceType).",
            ("AWS/ES", "OldGenJVMMemoryPressure", domain),
            "Maximum",
            80,
            period=60,
            evaluation_periods=3,
        ),
    }
    # FreeStorageSpace is in MiB per node (Minimum: the fullest node); the volume size is a parameter, so
    # the share is metric math
    low_storage = _alarm(
        "opensearch-free-storage",
        f"A data node of the OpenSearch domain has less than {FREE_STORAGE_PERCENT} % of its volume free: "
        "at 20 GiB or 5 % free OpenSearch blocks writes. Delete what is no longer needed or raise "
        "OpenSearchVolumeGiB.",
        ("AWS/ES", "FreeStorageSpace", domain),
        "Minimum",
        FREE_STORAGE_PERCENT,
        comparison="LessThanOrEqualToThreshold",
    )
    properties = low_storage["Properties"]
    metric = {
        "Namespace": properties.pop("Namespace"),
        "MetricName": properties.pop("MetricName"),
        "Dimensions": properties.pop("Dimensions"),
    }
    properties["Metrics"] = [
        {
            "Id": "free",
            "MetricStat": {
                "Metric": metric,
                "Period": properties.pop("Period"),
                "Stat": properties.pop("Statistic"),
            },
            "ReturnData": False,
        },
        {
            "Id": "free_percent",
            "Expression": {"Fn::Sub": "100 * free / (${OpenSearchVolumeGiB} * 1024)"},
            "Label": "free storage of the fullest data node (%)",
            "ReturnData": True,
        },
    ]
    alarms["OpenSearchFreeStorageAlarm"] = low_storage
    for alarm in alarms.values():
        alarm["Condition"] = SEARCH_CONDITION
    return alarms


def dead_letter_queue(queue: str) -> str:
    return f"{queue.removesuffix('Queue')}DeadLetterQueue"


def _kebab(logical_id: str) -> str:
    """`FaqImportDeadLetterQueue` -> `faq-import-dead-letter-queue`, `APIHandler` -> `api-handler`."""
    words = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1-\2", logical_id)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", words).lower()


def _queue_name(queue: str) -> dict[str, Any]:
    return {"Fn::GetAtt": [queue, "QueueName"]}


def _alarm(
    name: str,
    description: str,
    metric: tuple[str, str, str, Any] | tuple[str, str, list[tuple[str, Any]]],
    statistic: str,
    threshold: Any,
    comparison: str = "GreaterThanOrEqualToThreshold",
    *,
    period: int = PERIOD,
    evaluation_periods: int = 1,
) -> dict[str, Any]:
    """`metric`: (namespace, name, dimension, its value) or (namespace, name, [(dimension, value), ...])."""
    if len(metric) == 4:
        namespace, metric_name, dimension, value = metric
        dimensions = [(dimension, value)]
    else:
        namespace, metric_name, dimensions = metric
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "AlarmName": {"Fn::Sub": "${Prefix}-" + name},
            "AlarmDescription": description,
            "Namespace": namespace,
            "MetricName": metric_name,
            "Dimensions": [{"Name": key, "Value": value} for key, value in dimensions],
            "Statistic": statistic,
            "Period": period,
            "EvaluationPeriods": evaluation_periods,
            "Threshold": threshold,
            "ComparisonOperator": comparison,
            # no data is no message, no invocation, no execution: nothing is wrong
            "TreatMissingData": "notBreaching",
            "AlarmActions": [{"Ref": TOPIC}],
            "OKActions": [{"Ref": TOPIC}],
        },
    }


# The dashboard body is one Fn::Sub string: `${Function}` is a function's name, `${Queue.QueueName}` a
# queue's, `${KnowledgeStateMachine}` the state machine's ARN.


def _custom(metric: str, stage: str, **options: Any) -> list[Any]:
    return [NAMESPACE, metric, "stage", stage, "service", SERVICE, {"label": stage, **options}]


def _per_function(metric: str, functions: Mapping[str, str | None], **options: Any) -> list[list[Any]]:
    return [["AWS/Lambda", metric, "FunctionName", f"${{{f}}}", {"label": f, **options}] for f in functions]


def _per_queue(metric: str, queues: list[str]) -> list[list[Any]]:
    return [["AWS/SQS", metric, "QueueName", f"${{{q}.QueueName}}", {"label": q}] for q in queues]


def _workflow(metric: str, label: str, **options: Any) -> list[Any]:
    return ["AWS/States", metric, "StateMachineArn", f"${{{STATE_MACHINE}}}", {"label": label, **options}]


def _graph(
    title: str, metrics: list[list[Any]], stat: str, *, period: int = PERIOD, stacked: bool = False
) -> dict[str, Any]:
    return {
        "type": "metric",
        "properties": {
            "title": title,
            "region": "${AWS::Region}",
            "view": "timeSeries",
            "stacked": stacked,
            "stat": stat,
            "period": period,
            "metrics": metrics,
        },
    }


def dashboard_body(functions: Mapping[str, str | None]) -> dict[str, Any]:
    queues = sorted({q for q in functions.values() if q})
    dlqs = [dead_letter_queue(q) for q in queues]
    cost_ids = [f"c{i}" for i in range(len(COST_STAGES))]
    cost_per_document: list[list[Any]] = [
        *(
            _custom(COST_METRIC, stage, id=cost_id, visible=False)
            for stage, cost_id in zip(COST_STAGES, cost_ids, strict=True)
        ),
        _workflow("ExecutionsSucceeded", "documents finished", id="docs", visible=False),
        [{"expression": f"SUM(FILL([{','.join(cost_ids)}], 0))", "id": "spend", "visible": False}],
        [{"expression": "spend / docs", "id": "per_document", "label": "USD per finished document"}],
    ]
    rows: list[list[tuple[int, dict[str, Any]]]] = [
        [
            (
                24,
                {
                    "type": "text",
                    "properties": {
                        "markdown": "## Document pipeline\n"
                        "Documents per stage: stage workers' successes and the knowledge workflow "
                        "(one execution per document attempt, started once it is indexed). Cost: every "
                        "metered stage try's price (`StageCostUSD`, the cost API's price table) divided "
                        "by the workflows finished; Step Functions transitions are not in it (the cost "
                        "API adds them). Alarms go to the stack's `AlarmTopicArn` output."
                    },
                },
            )
        ],
        [
            (
                12,
                _graph(
                    "Documents per stage",
                    [
                        *(_custom("StageSucceeded", stage) for stage in OUTCOME_STAGES),
                        _workflow("ExecutionsStarted", "workflow started"),
                        _workflow("ExecutionsSucceeded", "workflow finished"),
                    ],
                    "Sum",
                ),
            ),
            (12, _graph("Invocations per function", _per_function("Invocations", functions), "Sum")),
        ],
        [
            (
                12,
                _graph(
                    "Stage retries, failures (for good) and throttling deferrals",
                    [
                        _custom(f"Stage{outcome}", stage, label=f"{stage} {outcome.lower()}")
                        for outcome in ("Failed", "Retried", "Deferred")
                        for stage in OUTCOME_STAGES
                    ],
                    "Sum",
                ),
            ),
            (
                12,
                _graph(
                    "Workflow failures",
                    [
                        _workflow("ExecutionsFailed", "failed"),
                        _workflow("ExecutionsTimedOut", "timed out"),
                        _workflow("ExecutionsAborted", "aborted (cancelled or deleted)"),
                    ],
                    "Sum",
                ),
            ),
        ],
        [
            (8, _graph("Lambda errors", _per_function("Errors", functions), "Sum")),
            (8, _graph("Lambda throttles", _per_function("Throttles", functions), "Sum")),
            (8, _graph("Lambda duration p95 (ms)", _per_function("Duration", functions), "p95")),
        ],
        [
            (
                8,
                _graph(
                    "Dead-letter queues (messages)",
                    _per_queue("ApproximateNumberOfMessagesVisible", dlqs),
                    "Maximum",
                ),
            ),
            (
                8,
                _graph(
                    "Oldest message age (s)", _per_queue("ApproximateAgeOfOldestMessage", queues), "Maximum"
                ),
            ),
            (
                8,
                _graph(
                    "Messages waiting", _per_queue("ApproximateNumberOfMessagesVisible", queues), "Maximum"
                ),
            ),
        ],
        [
            (
                12,
                _graph(
                    "Cost per stage (USD, hourly)",
                    [_custom(COST_METRIC, stage) for stage in COST_STAGES],
                    "Sum",
                    period=3600,
                    stacked=True,
                ),
            ),
            (12, _graph("Cost per finished document (USD, hourly)", cost_per_document, "Sum", period=3600)),
        ],
    ]
    widgets = []
    y = 0
    for row in rows:
        x = 0
        height = 2 if row[0][1]["type"] == "text" else 6
        for width, widget in row:
            widgets.append({**widget, "x": x, "y": y, "width": width, "height": height})
            x += width
        y += height
    return {"widgets": widgets}
