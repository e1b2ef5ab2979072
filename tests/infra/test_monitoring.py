"""The monitoring fragment (`infra/monitoring.py`): an alarm on every DLQ, on the workflow's failures, on
each function's errors and throttles and each queue's oldest message, all to one topic; physical names
carry the Prefix; the dashboard is valid JSON naming only metrics AWS publishes or the code emits; and the
template with the fragment merged in packages and lints clean."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from chalicelib import observability
from chalicelib.domain.types import Stage
from chalicelib.settings import load_settings

from .iam_policy import package_stack

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
FUNCTIONS: dict[str, str | None] = {
    "APIHandler": None,
    "Housekeeping": None,
    "OnUploadEvent": "UploadsQueue",
    "DocreaderStage": "DocreaderQueue",
    "ChunkingStage": "ChunkingQueue",
    "EmbeddingStage": "EmbeddingQueue",
    "MultimodalTask": "MultimodalQueue",
    "PostprocessTask": "PostprocessQueue",
    "EnrichmentTask": "EnrichmentQueue",
    "LifecycleTask": "LifecycleQueue",
    "WikiTask": "WikiQueue",
    "FaqImportTask": "FaqImportQueue",
    "WebhookDelivery": "WebhooksQueue",
    "WebhookSlowDelivery": "WebhooksSlowQueue",
}
QUEUES = sorted({q for q in FUNCTIONS.values() if q})
TOPIC = {"Ref": "AlarmTopic"}
#: what AWS publishes, by namespace: metric names and the one dimension each is read by here
AWS_METRICS = {
    "AWS/Lambda": ({"Errors", "Throttles", "Invocations", "Duration"}, "FunctionName"),
    "AWS/SQS": ({"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"}, "QueueName"),
    "AWS/States": (
        {
            "ExecutionsStarted",
            "ExecutionsSucceeded",
            "ExecutionsFailed",
            "ExecutionsTimedOut",
            "ExecutionsAborted",
        },
        "StateMachineArn",
    ),
}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("monitoring", ROOT / "infra" / "monitoring.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


monitoring = _load()


@pytest.fixture(scope="module")
def fragment() -> dict[str, Any]:
    built: dict[str, Any] = monitoring.monitoring_fragment(FUNCTIONS)
    return built


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "infra" / "template.json").read_text())
    return loaded


def alarms(fragment: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["Properties"] for r in fragment["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]


def metrics_of(alarm: dict[str, Any]) -> list[dict[str, Any]]:
    """The metrics an alarm watches: its own, or those of its metric math."""
    if "Metrics" in alarm:
        return [m["MetricStat"]["Metric"] for m in alarm["Metrics"] if "MetricStat" in m]
    return [alarm]


def period_of(alarm: dict[str, Any]) -> int:
    if "Metrics" in alarm:
        (period,) = {m["MetricStat"]["Period"] for m in alarm["Metrics"] if "MetricStat" in m}
        return int(period)
    return int(alarm["Period"])


def alarm_on(fragment: dict[str, Any], namespace: str, metric: str, dimension: Any) -> dict[str, Any]:
    found = [
        a
        for a in alarms(fragment)
        if a.get("Namespace") == namespace
        and a.get("MetricName") == metric
        and a["Dimensions"][0]["Value"] == dimension
    ]
    assert len(found) == 1, (namespace, metric, dimension)
    return found[0]


def test_every_dlq_has_a_depth_alarm_and_is_the_queues_real_dlq(
    fragment: dict[str, Any], template: dict[str, Any]
) -> None:
    for queue in QUEUES:
        dlq = monitoring.dead_letter_queue(queue)
        redrive = template["Resources"][queue]["Properties"]["RedrivePolicy"]
        assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq, "Arn"]}, queue
        alarm = alarm_on(
            fragment, "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"Fn::GetAtt": [dlq, "QueueName"]}
        )
        assert alarm["Threshold"] == 1 and alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_the_state_machine_has_failed_and_timed_out_alarms(
    fragment: dict[str, Any], template: dict[str, Any]
) -> None:
    assert template["Resources"]["KnowledgeStateMachine"]["Type"] == "AWS::Serverless::StateMachine"
    for metric in ("ExecutionsFailed", "ExecutionsTimedOut"):
        alarm = alarm_on(fragment, "AWS/States", metric, {"Ref": "KnowledgeStateMachine"})
        assert alarm["Dimensions"][0]["Name"] == "StateMachineArn" and alarm["Threshold"] == 1


def test_every_function_has_errors_and_throttles_alarms(fragment: dict[str, Any]) -> None:
    for function in FUNCTIONS:
        for metric in ("Errors", "Throttles"):
            alarm = alarm_on(fragment, "AWS/Lambda", metric, {"Ref": function})
            assert alarm["Dimensions"][0]["Name"] == "FunctionName"


def test_every_triggering_queue_has_an_oldest_message_alarm_with_its_stages_threshold(
    fragment: dict[str, Any],
) -> None:
    for queue in QUEUES:
        alarm = alarm_on(
            fragment, "AWS/SQS", "ApproximateAgeOfOldestMessage", {"Fn::GetAtt": [queue, "QueueName"]}
        )
        slow = queue in ("DocreaderQueue", "EmbeddingQueue")
        expected = "SlowStageOldestMessageAgeSeconds" if slow else "OldestMessageAgeSeconds"
        assert alarm["Threshold"] == {"Ref": expected}
    # + the state machine's 2 + the OpenSearch domain's 4 (tests/infra/test_hardening.py)
    assert len(alarms(fragment)) == 2 * len(QUEUES) + 2 * len(FUNCTIONS) + 2 + 4


def test_every_alarm_notifies_the_topic_and_treats_no_data_as_fine(fragment: dict[str, Any]) -> None:
    resources = fragment["Resources"]
    assert resources["AlarmTopic"]["Type"] == "AWS::SNS::Topic"
    for alarm in alarms(fragment):
        assert alarm["AlarmActions"] == [TOPIC] and alarm["OKActions"] == [TOPIC], alarm["AlarmName"]
        assert alarm["TreatMissingData"] == "notBreaching"
        assert period_of(alarm) * alarm["EvaluationPeriods"] <= 3600
    subscription = resources["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"] == {
        "TopicArn": TOPIC,
        "Protocol": "email",
        "Endpoint": {"Ref": "AlarmEmail"},
    }
    assert fragment["Conditions"]["HasAlarmEmail"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]
    }


def _physical_names(fragment: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [
        (logical, key, value)
        for logical, resource in fragment["Resources"].items()
        for key, value in resource.get("Properties", {}).items()
        if key.endswith("Name") and key != "MetricName"
    ]


def test_every_physical_name_carries_the_prefix_and_names_differ(fragment: dict[str, Any]) -> None:
    names = _physical_names(fragment)
    assert {key for _, key, _ in names} == {"TopicName", "DisplayName", "AlarmName", "DashboardName"}
    resolved = []
    for logical, key, value in names:
        assert isinstance(value, dict) and set(value) == {"Fn::Sub"}, (logical, key)
        assert value["Fn::Sub"].startswith("${Prefix}"), (logical, key)
        if key != "DisplayName":  # the e-mails' sender name, not a name AWS keeps unique
            resolved.append(value["Fn::Sub"].replace("${Prefix}", "weknora"))
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,255}", resolved[-1]), resolved[-1]
    assert len(resolved) == len(set(resolved))
    for alarm in alarms(fragment):  # dimensions name the stack's own resources, never a literal name
        dimensions = [d for metric in metrics_of(alarm) for d in metric["Dimensions"]]
        assert all(isinstance(d["Value"], dict) for d in dimensions), alarm["AlarmName"]


def test_parameters_have_defaults_and_descriptions_and_every_ref_resolves(
    fragment: dict[str, Any], template: dict[str, Any]
) -> None:
    for name, parameter in fragment["Parameters"].items():
        assert "Default" in parameter and len(parameter.get("Description", "")) > 20, name
        assert name not in template["Parameters"]
    assert not set(fragment["Resources"]) & set(template["Resources"])
    known = {*fragment["Parameters"], *template["Parameters"], *fragment["Resources"], *template["Resources"]}
    known |= set(FUNCTIONS)  # the Chalice functions come from `chalice package`
    refs = re.findall(r'"Ref": "(\w+)"', json.dumps(fragment))
    getatts = re.findall(r'"Fn::GetAtt": \["(\w+)"', json.dumps(fragment))
    assert set(refs) | set(getatts) <= known


def dashboard(fragment: dict[str, Any]) -> dict[str, Any]:
    """The body with its Fn::Sub variables resolved with dummy values (each one a name the stack has)."""
    body = fragment["Resources"]["PipelineDashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
    allowed = {"AWS::Region", "KnowledgeStateMachine", *FUNCTIONS}
    allowed |= {f"{q}.QueueName" for q in QUEUES} | {
        f"{monitoring.dead_letter_queue(q)}.QueueName" for q in QUEUES
    }

    def dummy(match: re.Match[str]) -> str:
        assert match.group(1) in allowed, match.group(1)
        return f"dummy-{match.group(1).replace('.', '-').replace(':', '-')}"

    resolved: dict[str, Any] = json.loads(re.sub(r"\$\{([^}]+)\}", dummy, body))
    return resolved


def _emitted_dimensions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], template: dict[str, Any]
) -> dict[str, set[tuple[str, ...]]]:
    """What the code really sends with the template's environment: metric name -> its dimension sets."""
    env = template["Globals"]["Function"]["Environment"]["Variables"]
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", env["POWERTOOLS_SERVICE_NAME"])
    settings = load_settings(
        {"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_METRICS_NAMESPACE": env["POWERTOOLS_METRICS_NAMESPACE"]}
    )
    monkeypatch.setattr(observability, "get_settings", lambda: settings)
    capsys.readouterr()
    for name in _runner_outcomes():
        observability.stage_outcome("chunking", name.removeprefix("Stage").lower())
    observability.stage_cost("chunking", 0.001)
    emitted: dict[str, set[tuple[str, ...]]] = {}
    for line in capsys.readouterr().out.splitlines():
        if not line.startswith('{"_aws"'):
            continue
        emf = json.loads(line)
        directive = emf["_aws"]["CloudWatchMetrics"][0]
        assert directive["Namespace"] == env["POWERTOOLS_METRICS_NAMESPACE"] == monitoring.NAMESPACE
        assert emf["service"] == env["POWERTOOLS_SERVICE_NAME"] == monitoring.SERVICE
        for metric in directive["Metrics"]:
            emitted.setdefault(metric["Name"], set()).update(
                tuple(sorted(d)) for d in directive["Dimensions"]
            )
    return emitted


def _code_stages() -> tuple[set[str], set[str]]:
    """(stages whose outcomes are metrics, stages whose cost is): run_stage's and run_task's callers."""
    sources = "\n".join(p.read_text() for p in (ROOT / "chalicelib" / "stages").glob("*.py"))
    outcome = {Stage[name].value for name in re.findall(r"run_stage\(deps, Stage\.(\w+)", sources)}
    tasks = set(re.findall(r"run_task\([^)]*?\"(\w+)\"", sources))
    return outcome, outcome | tasks


def _runner_outcomes() -> set[str]:
    source = (ROOT / "chalicelib" / "stages" / "runner.py").read_text()
    found = re.findall(r'note\(\s*"(\w+)"(?:\s+if\s+\w+\s+else\s+"(\w+)")?', source)
    return {f"Stage{name.capitalize()}" for pair in found for name in pair if name}


def test_the_dashboard_is_json_and_names_only_published_or_emitted_metrics(
    fragment: dict[str, Any],
    template: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = dashboard(fragment)
    emitted = _emitted_dimensions(monkeypatch, capsys, template)
    assert set(emitted) == _runner_outcomes() | {observability.STAGE_COST_METRIC}
    outcome_stages, cost_stages = _code_stages()
    assert outcome_stages == {"docreader", "chunking", "embedding"} and "enrichment" in cost_stages
    custom_names = _runner_outcomes() | {observability.STAGE_COST_METRIC}
    seen: set[str] = set()
    for widget in body["widgets"]:
        assert widget["x"] + widget["width"] <= 24
        if widget["type"] != "metric":
            continue
        ids = set()
        for entry in widget["properties"]["metrics"]:
            options = entry[-1] if isinstance(entry[-1], dict) else {}
            ids.add(options.get("id"))
            if "expression" in options:
                referenced = set(re.findall(r"\b[a-z]\w*\b", options["expression"]))
                assert referenced <= ids, options["expression"]  # ids defined before the expression
                continue
            namespace, name, *dimensions = entry[:-1] if options else entry
            pairs = dict(zip(dimensions[::2], dimensions[1::2], strict=True))
            seen.add(name)
            if namespace in AWS_METRICS:
                names, dimension = AWS_METRICS[namespace]
                assert name in names and set(pairs) == {dimension}, entry
                assert pairs[dimension].startswith("dummy-"), entry  # a resolved reference, never a literal
            else:
                assert namespace == monitoring.NAMESPACE and name in custom_names, entry
                assert tuple(sorted(pairs)) in emitted[name], entry  # CloudWatch matches the exact set
                assert pairs["service"] == monitoring.SERVICE
                stages = cost_stages if name == observability.STAGE_COST_METRIC else outcome_stages
                assert pairs["stage"] in stages, entry
    assert {"StageSucceeded", "StageFailed", observability.STAGE_COST_METRIC, "ExecutionsSucceeded"} <= seen
    assert {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible", "ExecutionsFailed"} <= seen


def test_the_dashboard_shows_the_cost_per_finished_document(fragment: dict[str, Any]) -> None:
    widget = next(
        w
        for w in dashboard(fragment)["widgets"]
        if "per finished document" in w["properties"].get("title", "")
    )
    entries = widget["properties"]["metrics"]
    costs = [e for e in entries if e[1:2] == [observability.STAGE_COST_METRIC]]
    assert {dict(zip(e[2:-1:2], e[3:-1:2], strict=True))["stage"] for e in costs} == _code_stages()[1]
    shown = [e[0] for e in entries if isinstance(e[0], dict) and e[0].get("visible", True)]
    assert shown == [
        {"expression": "spend / docs", "id": "per_document", "label": "USD per finished document"}
    ]


def test_the_packaged_stack_carries_the_fragment_for_its_own_functions(
    fragment: dict[str, Any], tmp_path: Path
) -> None:
    """infra/stack.py merges the fragment; the mapping it is given is the packaged template's triggers (lint
    of the whole packaged template: tests/infra/test_package.py)."""
    packaged = package_stack(tmp_path)
    for section, body in fragment.items():
        assert {k: packaged[section][k] for k in body} == body, section

    def trigger(function: dict[str, Any]) -> str | None:
        for event in function["Properties"].get("Events", {}).values():
            if event["Type"] == "SQS":
                return str(event["Properties"]["Queue"]["Fn::GetAtt"][0])
        return None

    resources = packaged["Resources"]
    functions = {n: trigger(r) for n, r in resources.items() if r["Type"] == "AWS::Serverless::Function"}
    assert functions == FUNCTIONS
