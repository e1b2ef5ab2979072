"""The packaged stack's hardening (out/sam.json as `make package` writes it): tries that a throttle cannot use
up, the API's error responses in every deployment, the index kept and watched, the files bucket TLS-only,
versioned and CORS-bound, the uploads queue bound to the account, no hard-coded partition, quiet
housekeeping retries and the state machine's error log."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from .iam_policy import package_stack

ROOT = Path(__file__).resolve().parents[2]
ASL = ROOT / "infra" / "statemachine" / "knowledge.asl.json"


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def resources(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v.get("Type") == kind}


def resolve_if(value: Any, conditions: dict[str, bool]) -> Any:
    """`value` with each Fn::If taken by `conditions`."""
    if isinstance(value, dict):
        if set(value) == {"Fn::If"}:
            name, when_true, when_false = value["Fn::If"]
            return resolve_if(when_true if conditions[name] else when_false, conditions)
        return {k: resolve_if(v, conditions) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_if(v, conditions) for v in value]
    return value


def test_the_stage_tries_default_is_the_specifications_and_the_codes(template: dict[str, Any]) -> None:
    """1 try + 3 retries (the specification); a throttle spending a receive is met by make deploy's warning
    on an account whose concurrency limit is under the triggers' sum (test_deploy_script)."""
    from chalicelib.settings import Settings, load_settings

    default = template["Parameters"]["StageMaxReceives"]["Default"]
    assert default == 4
    assert load_settings({}).stage_max_receives == default
    assert Settings().stage_max_receives == default


def test_the_api_error_responses_are_part_of_the_api(template: dict[str, Any]) -> None:
    """Separate GatewayResponse resources change without a new deployment of the stage (cfn-lint W3660);
    in the API's GatewayResponses they are in its definition, so every deployment carries them."""
    assert resources(template, "AWS::ApiGateway::GatewayResponse") == {}
    api = template["Resources"]["RestAPI"]["Properties"]
    responses = api["GatewayResponses"]
    assert {kind: r.get("StatusCode") for kind, r in responses.items()} == {
        "MISSING_AUTHENTICATION_TOKEN": "404",
        "THROTTLED": "429",
        "REQUEST_TOO_LARGE": "413",
        "INTEGRATION_TIMEOUT": "504",
        "DEFAULT_5XX": None,
    }
    for kind, response in responses.items():
        assert response["ResponseParameters"] == {"Headers": {"Content-Type": "'application/json'"}}, kind
        body = json.loads(response["ResponseTemplates"]["application/json"])
        assert body["success"] is False and body["error"]["code"], kind
    # the merge kept what Chalice generates
    assert {"DefinitionBody", "StageName", "EndpointConfiguration", "MethodSettings"} <= set(api)
    assert api["DefinitionBody"]["paths"]


def test_the_search_domain_outlives_the_stack(template: dict[str, Any]) -> None:
    domain = template["Resources"]["OpenSearchDomain"]
    table = template["Resources"]["KnowledgeTable"]
    assert domain["DeletionPolicy"] == table["DeletionPolicy"] == "RetainExceptOnCreate"
    assert domain["UpdateReplacePolicy"] == "Retain"


def _search_alarms(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for alarm in resources(template, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        metrics = [m["MetricStat"]["Metric"] for m in properties.get("Metrics", []) if "MetricStat" in m]
        for metric in metrics or [properties]:
            if metric["Namespace"] == "AWS/ES":
                assert metric["Dimensions"] == [
                    {"Name": "DomainName", "Value": {"Ref": "OpenSearchDomain"}},
                    {"Name": "ClientId", "Value": {"Ref": "AWS::AccountId"}},
                ]
                found[metric["MetricName"]] = alarm
    return found


def test_the_search_domain_has_the_recommended_alarms(template: dict[str, Any]) -> None:
    alarms = _search_alarms(template)
    assert set(alarms) == {
        "ClusterStatus.red",
        "ClusterIndexWritesBlocked",
        "FreeStorageSpace",
        "OldGenJVMMemoryPressure",
    }
    for metric, alarm in alarms.items():
        assert alarm["Condition"] == "HasOpenSearch", metric  # only where the stack has the domain
        properties = alarm["Properties"]
        assert properties["AlarmActions"] == properties["OKActions"] == [{"Ref": "AlarmTopic"}], metric
    for metric in ("ClusterStatus.red", "ClusterIndexWritesBlocked"):
        properties = alarms[metric]["Properties"]
        assert (properties["Statistic"], properties["Threshold"]) == ("Maximum", 1)
        assert properties["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    memory = alarms["OldGenJVMMemoryPressure"]["Properties"]
    assert memory["Threshold"] == 80 and memory["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    # FreeStorageSpace is MiB per node: the alarm is on its share of the node's volume (a parameter, in GiB)
    storage = alarms["FreeStorageSpace"]["Properties"]
    assert storage["Threshold"] == 25 and storage["ComparisonOperator"] == "LessThanOrEqualToThreshold"
    (expression,) = [m for m in storage["Metrics"] if m.get("ReturnData")]
    (raw,) = [m for m in storage["Metrics"] if "MetricStat" in m]
    assert raw["MetricStat"]["Stat"] == "Minimum"  # the fullest node
    assert expression["Expression"] == {"Fn::Sub": f"100 * {raw['Id']} / (${{OpenSearchVolumeGiB}} * 1024)"}


def test_the_files_bucket_takes_only_tls(template: dict[str, Any]) -> None:
    (policy,) = resources(template, "AWS::S3::BucketPolicy").values()
    properties = policy["Properties"]
    assert properties["Bucket"] == {"Ref": "FilesBucket"}
    denials = [s for s in properties["PolicyDocument"]["Statement"] if s["Effect"] == "Deny"]
    assert any(
        s["Principal"] == "*"
        and s["Action"] == "s3:*"
        and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        and {"Fn::GetAtt": ["FilesBucket", "Arn"]} in s["Resource"]
        and {"Fn::Sub": "${FilesBucket.Arn}/*"} in s["Resource"]
        for s in denials
    )


def test_the_files_bucket_keeps_overwritten_and_deleted_objects_for_a_while(template: dict[str, Any]) -> None:
    bucket = template["Resources"]["FilesBucket"]["Properties"]
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    rules = bucket["LifecycleConfiguration"]["Rules"]
    # the bucket-wide rule (the upload prefixes keep old versions a day: the test below)
    (noncurrent,) = [r for r in rules if "NoncurrentVersionExpiration" in r and "Prefix" not in r]
    assert noncurrent["Status"] == "Enabled" and "Prefix" not in noncurrent and "Filter" not in noncurrent
    assert 1 <= noncurrent["NoncurrentVersionExpiration"]["NoncurrentDays"] <= 90
    assert noncurrent["ExpiredObjectDeleteMarker"] is True  # no delete markers left behind alone


def test_what_a_tenant_can_overwrite_outside_its_quota_keeps_no_old_version_past_a_day(
    template: dict[str, Any],
) -> None:
    """A presigned upload form or URL may be used again until it expires, and the bucket keeps a replaced or
    deleted object's old version (30 days by the bucket's rule): under the prefixes a tenant writes outside
    its quota (document uploads before they are accepted, FAQ import uploads) old versions go after a day."""
    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    by_prefix = {r.get("Prefix"): r for r in rules}
    for prefix in ("uploads/", "faq-imports/"):
        assert by_prefix[prefix]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}, prefix


def test_a_report_refreshs_checkpoints_expire_with_their_old_versions(template: dict[str, Any]) -> None:
    """A big knowledge base's report refresh keeps its walk in objects under reports/ between slices and
    deletes them when it ends; one that ends otherwise (failed, given up, a duplicate delivery's copy) would
    leave them for good, and every save leaves an old version (the bucket keeps them 30 days)."""
    from chalicelib.operations.kb_report_refresh import CHECKPOINTS

    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    (rule,) = [r for r in rules if r.get("Prefix") == f"{CHECKPOINTS}/"]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] <= 2


def test_a_moves_kept_tag_names_expire(template: dict[str, Any]) -> None:
    """A move item keeps its document's tag names under move-tags/ while the row crosses and deletes them once
    used; an item abandoned in between (a task given up) would leave them for good."""
    from chalicelib.tasks.move_clone import TAG_NAMES_PREFIX

    rules = template["Resources"]["FilesBucket"]["Properties"]["LifecycleConfiguration"]["Rules"]
    (rule,) = [r for r in rules if r.get("Prefix") == TAG_NAMES_PREFIX]
    assert rule["Status"] == "Enabled" and rule["ExpirationInDays"] <= 7
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}


def test_the_files_bucket_cors_follows_the_cors_origins_parameter(template: dict[str, Any]) -> None:
    """Not "*": the console's own origin (the API's execute-api host: the bucket cannot name the API itself,
    whose functions name the bucket) and the CorsOrigins; an empty parameter gives no empty origin."""
    assert template["Conditions"]["HasCorsOrigins"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "CorsOrigins"}, ""]}]
    }
    (rule,) = template["Resources"]["FilesBucket"]["Properties"]["CorsConfiguration"]["CorsRules"]
    console = {"Fn::Sub": "https://*.execute-api.${AWS::Region}.${AWS::URLSuffix}"}
    assert resolve_if(rule["AllowedOrigins"], {"HasCorsOrigins": False}) == [console]
    with_origins = resolve_if(rule["AllowedOrigins"], {"HasCorsOrigins": True})
    assert with_origins == {
        "Fn::Split": [
            ",",
            {"Fn::Sub": "https://*.execute-api.${AWS::Region}.${AWS::URLSuffix},${CorsOrigins}"},
        ]
    }
    assert "*" not in json.dumps(rule["AllowedOrigins"]).replace("https://*.execute-api", "")
    # the console uploads documents with a presigned PUT and FAQ import files with a presigned form (POST)
    assert set(rule["AllowedMethods"]) == {"GET", "PUT", "POST"}


def test_only_this_accounts_bucket_may_send_to_the_uploads_queue(template: dict[str, Any]) -> None:
    (statement,) = template["Resources"]["UploadsQueuePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert "aws:SourceArn" in statement["Condition"]["ArnLike"]


def test_no_arn_names_a_partition_literally(template: dict[str, Any]) -> None:
    """GovCloud and China are other partitions: every ARN takes ${AWS::Partition} (the state machine's
    definition through its `Partition` substitution)."""
    literal = re.compile(r"arn:aws:")
    assert literal.findall(json.dumps(template)) == []
    assert literal.findall(ASL.read_text(encoding="utf-8")) == []
    machine = template["Resources"]["KnowledgeStateMachine"]["Properties"]
    assert machine["DefinitionSubstitutions"]["Partition"] == {"Ref": "AWS::Partition"}
    tasks = re.findall(r'"Resource": "([^"]+)"', ASL.read_text(encoding="utf-8"))
    assert tasks and all(t.startswith("arn:${Partition}:states:::") for t in tasks)


def test_a_failed_housekeeping_sweep_is_not_retried_by_lambda(template: dict[str, Any]) -> None:
    """The schedule's next tick sweeps again: Lambda's two asynchronous retries would only pile sweeps up."""
    housekeeping = template["Resources"]["Housekeeping"]["Properties"]
    assert housekeeping["EventInvokeConfig"]["MaximumRetryAttempts"] == 0
    assert [e["Type"] for e in housekeeping["Events"].values()] == ["Schedule"]


def test_the_state_machine_logs_its_errors_without_execution_data(template: dict[str, Any]) -> None:
    machine = template["Resources"]["KnowledgeStateMachine"]["Properties"]
    logging = machine["Logging"]
    assert logging["Level"] == "ERROR" and logging["IncludeExecutionData"] is False
    (destination,) = logging["Destinations"]
    group = destination["CloudWatchLogsLogGroup"]["LogGroupArn"]["Fn::GetAtt"][0]
    log_group = template["Resources"][group]
    assert log_group["Type"] == "AWS::Logs::LogGroup"
    assert log_group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    statements = [s for policy in machine["Policies"] for s in policy["Statement"]]
    delivery = [s for s in statements if "logs:CreateLogDelivery" in s["Action"]]
    assert len(delivery) == 1 and delivery[0]["Resource"] == "*"
    for action in ("logs:GetLogDelivery", "logs:PutResourcePolicy", "logs:DescribeLogGroups"):
        assert action in delivery[0]["Action"]


@pytest.mark.parametrize(
    ("value", "allowed"),
    [
        ("", True),
        ("https://a.com", True),
        ("https://a.com,http://localhost:3000", True),
        ("https://a.com, https://b.com", False),  # the bucket would get " https://b.com"
        ("https://a.com/", False),
        ("https://a.com,", False),
        ("a.com", False),
        ("https://a.com/app", False),
    ],
)
def test_the_cors_origins_parameter_takes_only_what_the_bucket_and_the_api_read_alike(
    template: dict[str, Any], value: str, allowed: bool
) -> None:
    """The bucket's CORS rule splits CorsOrigins on "," as written, while the app strips spaces and a
    trailing "/": a value both read alike is all the parameter accepts (CloudFormation matches the whole
    value, as fullmatch does), so the API cannot allow an origin whose presigned PUT the bucket refuses."""
    from chalicelib.settings import load_settings

    parameter = template["Parameters"]["CorsOrigins"]
    assert parameter["Default"] == "" and parameter["ConstraintDescription"]
    assert (re.fullmatch(parameter["AllowedPattern"], value) is not None) is allowed
    if allowed:
        settings = load_settings({"AWS_REGION": "us-east-1", "WEKNORA_CORS_ORIGINS": value})
        assert settings.cors_origins == tuple(o for o in value.split(",") if o)
