"""The per-key request limit in front of the API stage's throttle: a WAF web ACL on the stage with a rate-based
rule keyed on the X-API-Key header. The API's own per-tenant limit refuses in the Lambda, after API Gateway
has spent the stage's allowance (the whole API's) on the request, so one noisy tenant still throttled the
others; WAF refuses before the stage counts. `TenantRequestsPerMinute` 0 leaves the web ACL out."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from chalicelib.adapters.memory import memory_settings

from .iam_policy import package_stack, stack_module

PARAMETER = "TenantRequestsPerMinute"
WAF_RESOURCES = {"AWS::WAFv2::WebACL", "AWS::WAFv2::WebACLAssociation"}


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def _value(node: Any, parameters: dict[str, str]) -> Any:
    """The few intrinsics a condition uses, with parameters as CloudFormation passes them (strings)."""
    if isinstance(node, dict) and len(node) == 1:
        ((name, argument),) = node.items()
        if name == "Ref":
            return parameters[argument]
        if name == "Fn::Equals":
            left, right = (str(_value(a, parameters)) for a in argument)
            return left == right
        if name == "Fn::Not":
            (inner,) = argument
            return not _value(inner, parameters)
        raise AssertionError(f"an intrinsic the test does not evaluate: {name}")
    return node


def _deployed(template: dict[str, Any], parameters: dict[str, str]) -> set[str]:
    """The WAF resources a deploy with these parameters creates (each must carry a condition)."""
    return {
        name
        for name, resource in template["Resources"].items()
        if resource["Type"] in WAF_RESOURCES
        and _value(template["Conditions"][resource["Condition"]], parameters)
    }


def _web_acl(template: dict[str, Any]) -> dict[str, Any]:
    (acl,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::WAFv2::WebACL"]
    properties: dict[str, Any] = acl["Properties"]
    return properties


def _sub(node: Any, parameters: dict[str, str]) -> str:
    text = node["Fn::Sub"] if isinstance(node, dict) else node
    return re.sub(r"\$\{(\w+)\}", lambda m: parameters[m.group(1)], text)


def test_the_web_acl_and_its_association_exist_when_the_parameter_is_above_0_and_not_at_0(
    packaged: dict[str, Any],
) -> None:
    parameter = packaged["Parameters"][PARAMETER]
    assert parameter["Type"] == "String"
    allowed = re.compile(parameter["AllowedPattern"])
    # WAF's rate limit is 10 to 2,000,000,000: 1-9 would fail the web ACL and roll the stack back
    assert [v for v in ("0", "10", "1800", "999999999") if not allowed.fullmatch(v)] == []
    assert [v for v in ("1", "9", "010", "-5", "1.5", "", "2000000001") if allowed.fullmatch(v)] == []
    both = {"ApiWebAcl", "ApiWebAclAssociation"}
    assert _deployed(packaged, {PARAMETER: str(parameter["Default"])}) == both
    assert _deployed(packaged, {PARAMETER: "10"}) == both
    assert _deployed(packaged, {PARAMETER: "0"}) == set()


def test_the_rule_counts_each_x_api_key_in_60_s_and_limits_it_to_the_parameter(
    packaged: dict[str, Any],
) -> None:
    acl = _web_acl(packaged)
    assert acl["Scope"] == "REGIONAL"
    assert acl["DefaultAction"] == {"Allow": {}}
    (rule,) = acl["Rules"]
    statement = rule["Statement"]["RateBasedStatement"]
    assert statement["AggregateKeyType"] == "CUSTOM_KEYS"
    assert statement["CustomKeys"] == [
        {"Header": {"Name": "x-api-key", "TextTransformations": [{"Priority": 0, "Type": "NONE"}]}}
    ]
    assert statement["EvaluationWindowSec"] == 60
    assert statement["Limit"] == {"Ref": PARAMETER}
    assert "ScopeDownStatement" not in statement  # every request with a key counts
    for visibility in (acl["VisibilityConfig"], rule["VisibilityConfig"]):
        assert visibility["CloudWatchMetricsEnabled"] is True
        assert visibility["SampledRequestsEnabled"] is True


def test_a_blocked_request_is_429_tenant_rate_limited_in_the_api_envelope_with_retry_after(
    packaged: dict[str, Any],
) -> None:
    acl = _web_acl(packaged)
    (rule,) = acl["Rules"]
    response = rule["Action"]["Block"]["CustomResponse"]
    assert response["ResponseCode"] == 429
    (retry_after,) = [h for h in response["ResponseHeaders"] if h["Name"].lower() == "retry-after"]
    assert int(retry_after["Value"]) >= statement_window(rule)
    body = acl["CustomResponseBodies"][response["CustomResponseBodyKey"]]
    assert body["ContentType"] == "APPLICATION_JSON"
    default = str(packaged["Parameters"][PARAMETER]["Default"])
    envelope = json.loads(_sub(body["Content"], {PARAMETER: default}))
    assert envelope["success"] is False
    assert envelope["error"]["code"] == "tenant_rate_limited"
    assert default in envelope["error"]["message"]
    # the same envelope as the stage's own 429 (a gateway response of the API)
    throttled = packaged["Resources"]["RestAPI"]["Properties"]["GatewayResponses"]["THROTTLED"]
    stage_429 = json.loads(throttled["ResponseTemplates"]["application/json"])
    assert set(envelope) == set(stage_429)
    assert set(envelope["error"]) == set(stage_429["error"])


def statement_window(rule: dict[str, Any]) -> int:
    window: int = rule["Statement"]["RateBasedStatement"]["EvaluationWindowSec"]
    return window


def test_the_association_puts_the_web_acl_on_the_packaged_stage_after_the_stage_exists(
    packaged: dict[str, Any],
) -> None:
    stage = packaged["Resources"]["RestAPI"]["Properties"]["StageName"]
    association = packaged["Resources"]["ApiWebAclAssociation"]
    assert association["Type"] == "AWS::WAFv2::WebACLAssociation"
    assert association["Condition"] == packaged["Resources"]["ApiWebAcl"]["Condition"]
    assert association["DependsOn"] == f"RestAPI{stage}Stage"  # SAM's name of the API's stage resource
    properties = association["Properties"]
    assert properties["WebACLArn"] == {"Fn::GetAtt": ["ApiWebAcl", "Arn"]}
    assert properties["ResourceArn"] == {
        "Fn::Sub": f"arn:${{AWS::Partition}}:apigateway:${{AWS::Region}}::/restapis/${{RestAPI}}/stages/{stage}"
    }


def test_a_stage_name_sam_would_rename_is_refused() -> None:
    packaged = {"Resources": {"RestAPI": {"Properties": {"StageName": "my-stage"}}}}
    with pytest.raises(ValueError, match="alphanumeric"):
        stack_module().associate_web_acl(packaged)


def test_the_defaults_put_waf_above_the_tenant_rate_and_the_stage_well_above_both(
    packaged: dict[str, Any],
) -> None:
    per_tenant = memory_settings().tenant_requests_per_second
    parameters = packaged["Parameters"]
    waf_per_minute = int(parameters[PARAMETER]["Default"])
    stage_rate = parameters["ApiThrottleRate"]["Default"]
    # a tenant within its own rate never meets WAF; WAF is above its minimum (10)
    assert per_tenant * 60 < waf_per_minute
    # one key at WAF's limit leaves most of the stage to the others
    assert waf_per_minute / 60 <= stage_rate / 2
    assert stage_rate >= 5 * per_tenant
    assert parameters["ApiThrottleBurst"]["Default"] >= stage_rate
