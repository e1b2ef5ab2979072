"""provision(): the template fixture's resources exist in moto with the properties the template gives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import boto3
import pytest

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.provision import TemplateError, provision

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "template.json"


@pytest.fixture
def server(moto_server: MotoServer) -> MotoServer:
    moto_server.reset()
    return moto_server


def test_provision_creates_every_supported_resource(server: MotoServer) -> None:
    res = provision(TEMPLATE, {"Prefix": "pv"})
    assert set(res) == {"Flow", "DocsTable", "Uploads", "IngestQueue", "WorkQueue", "WorkDLQ", "TaskQueue"}
    # Skipped types are not reported as created.
    assert "FlowRole" not in res and "IngestQueuePolicy" not in res

    ddb: Any = boto3.client("dynamodb")
    table = ddb.describe_table(TableName="pv-docs")["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["gsi1"]
    assert {k["AttributeName"] for k in table["KeySchema"]} == {"pk", "sk"}
    ttl = ddb.describe_time_to_live(TableName="pv-docs")["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expires_at"}
    assert res["DocsTable"].as_dict() == {"name": "pv-docs", "arn": table["TableArn"], "url": None}

    sqs: Any = boto3.client("sqs")
    work = res["WorkQueue"]
    assert work.url == work["url"] == sqs.get_queue_url(QueueName="pv-work")["QueueUrl"]
    attrs = sqs.get_queue_attributes(QueueUrl=work.url, AttributeNames=["All"])["Attributes"]
    assert attrs["QueueArn"] == work.arn
    assert attrs["VisibilityTimeout"] == "30" and attrs["MessageRetentionPeriod"] == "3600"
    redrive = json.loads(attrs["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == res["WorkDLQ"].arn
    assert int(redrive["maxReceiveCount"]) == 3

    s3: Any = boto3.client("s3")
    assert res["Uploads"].name == "pv-uploads-123456789012"  # Fn::Join with AWS::AccountId
    notif = s3.get_bucket_notification_configuration(Bucket=res["Uploads"].name)["QueueConfigurations"]
    assert notif[0]["QueueArn"] == res["IngestQueue"].arn
    assert notif[0]["Events"] == ["s3:ObjectCreated:*"]
    assert notif[0]["Filter"]["Key"]["FilterRules"] == [{"Name": "prefix", "Value": "incoming/"}]

    sfn: Any = boto3.client("stepfunctions")
    sm = sfn.describe_state_machine(stateMachineArn=res["Flow"].arn)
    assert sm["name"] == "pv-flow"
    asl = json.loads(sm["definition"])
    assert asl["States"]["Work"]["Parameters"]["QueueUrl"] == res["TaskQueue"].url
    assert asl["States"]["Record"]["Parameters"]["TableName"] == "pv-docs"

    # What SAM puts into every function's environment.
    assert res.function_env == {
        "DOCS_TABLE": "pv-docs",
        "WORK_QUEUE_URL": work.url,
        "FLOW_ARN": res["Flow"].arn,
    }


def test_the_queue_url_variables_name_each_queue_and_its_redrive_target(server: MotoServer) -> None:
    """What the local runtime puts in the environment, so the adapter sends with no GetQueueUrl as on AWS."""
    res = provision(TEMPLATE, {"Prefix": "pv"})
    env = res.queue_url_env({"work": "pv-work", "ingest": "pv-ingest", "other": "pv-missing"})
    assert env == {
        "WEKNORA_QUEUE_URL_WORK": res["WorkQueue"].url,
        "WEKNORA_DLQ_URL_WORK": res["WorkDLQ"].url,  # its RedrivePolicy's target
        "WEKNORA_QUEUE_URL_INGEST": res["IngestQueue"].url,  # no dead-letter queue: no variable
    }


def test_reprovision_is_idempotent_and_sends_no_second_test_event(server: MotoServer) -> None:
    first = provision(TEMPLATE)
    second = provision(TEMPLATE)
    assert {k: v.as_dict() for k, v in first.items()} == {k: v.as_dict() for k, v in second.items()}
    sqs: Any = boto3.client("sqs")
    msgs = sqs.receive_message(QueueUrl=first["IngestQueue"].url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["Event"] for m in msgs] == ["s3:TestEvent"]


def test_s3_put_reaches_the_notification_queue_with_a_url_encoded_key(server: MotoServer) -> None:
    res = provision(TEMPLATE)
    s3: Any = boto3.client("s3")
    sqs: Any = boto3.client("sqs")
    url = res["IngestQueue"].url
    sqs.purge_queue(QueueUrl=url)  # drop the s3:TestEvent
    s3.put_object(Bucket=res["Uploads"].name, Key="incoming/my report.pdf", Body=b"%PDF")
    s3.put_object(Bucket=res["Uploads"].name, Key="elsewhere/x.pdf", Body=b"%PDF")  # prefix filter
    msgs = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)["Messages"]
    assert len(msgs) == 1
    record = json.loads(msgs[0]["Body"])["Records"][0]
    assert record["eventName"] == "ObjectCreated:Put"
    assert record["s3"]["bucket"]["name"] == res["Uploads"].name
    raw_key = record["s3"]["object"]["key"]
    # moto URL-encodes the key ("/" included, unlike AWS): consumers must unquote_plus.
    assert raw_key != "incoming/my report.pdf"
    assert unquote_plus(raw_key) == "incoming/my report.pdf"


def test_unknown_types_are_skipped_and_missing_parameters_fail(server: MotoServer, tmp_path: Path) -> None:
    tpl = {
        "Parameters": {"Needed": {"Type": "String"}},
        "Resources": {
            "Fn": {"Type": "AWS::Serverless::Function", "Properties": {"Handler": "app.app"}},
            "Q": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::Sub": "${Needed}-q"}}},
        },
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tpl))
    with pytest.raises(TemplateError, match="Needed"):
        provision(path)
    res = provision(path, {"Needed": "abc"})
    assert list(res) == ["Q"] and res["Q"].name == "abc-q"


def test_reference_to_an_undefined_resource_is_an_error(server: MotoServer, tmp_path: Path) -> None:
    tpl = {"Resources": {"Q": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Ref": "Nope"}}}}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tpl))
    with pytest.raises(TemplateError, match="Nope"):
        provision(path)


def test_dependency_cycle_is_reported(server: MotoServer, tmp_path: Path) -> None:
    tpl = {
        "Resources": {
            "A": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::GetAtt": ["B", "QueueName"]}}},
            "B": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::GetAtt": ["A", "QueueName"]}}},
        }
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tpl))
    with pytest.raises(TemplateError, match="cycle"):
        provision(path)


def test_conditions_merge_fragments_and_allowed_values(server: MotoServer, tmp_path: Path) -> None:
    tpl = {
        "Parameters": {
            "Search": {"Type": "String", "Default": "false", "AllowedValues": ["true", "false"]},
            "Prefix": {"Type": "String", "Default": "cx", "AllowedPattern": "[a-z]{2,5}"},
            "Receives": {"Type": "Number", "Default": 4},
        },
        "Conditions": {
            "HasSearch": {"Fn::Equals": [{"Ref": "Search"}, "true"]},
            "NoSearch": {"Fn::Not": [{"Condition": "HasSearch"}]},
        },
        "Globals": {
            "Function": {
                "Environment": {
                    "Variables": {
                        "ENGINE": {"Fn::If": ["HasSearch", "opensearch", "embedded"]},
                        "URL": {"Fn::If": ["HasSearch", {"Fn::Sub": "https://${Domain.DomainEndpoint}"}, ""]},
                    }
                }
            }
        },
        "Resources": {
            "OnUpload": {"Properties": {"Events": {}}},  # a merge fragment for a Chalice function
            "Domain": {"Type": "AWS::OpenSearchService::Domain", "Condition": "HasSearch", "Properties": {}},
            "Dlq": {"Type": "AWS::SQS::Queue", "Properties": {"QueueName": {"Fn::Sub": "${Prefix}-dlq"}}},
            "Q": {
                "Type": "AWS::SQS::Queue",
                "Condition": "NoSearch",
                "Properties": {
                    "QueueName": {"Fn::Sub": "${Prefix}-q"},
                    "RedrivePolicy": {
                        "deadLetterTargetArn": {"Fn::GetAtt": "Dlq.Arn"},
                        "maxReceiveCount": {"Ref": "Receives"},
                    },
                },
            },
        },
    }
    path = tmp_path / "t.json"
    path.write_text(json.dumps(tpl))
    res = provision(path)
    assert sorted(res) == ["Dlq", "Q"]
    assert res.function_env == {"ENGINE": "embedded", "URL": ""}
    sqs: Any = boto3.client("sqs")
    attrs = sqs.get_queue_attributes(QueueUrl=res["Q"].url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(attrs["RedrivePolicy"])["maxReceiveCount"] == 4
    with pytest.raises(TemplateError, match="not one of"):
        provision(path, {"Search": "yes"})
    with pytest.raises(TemplateError, match="does not match"):
        provision(path, {"Prefix": "TOO-LONG-1"})


def test_the_projects_template_provisions(server: MotoServer) -> None:
    template = Path(__file__).resolve().parents[2] / "infra" / "template.json"
    if not template.is_file():
        pytest.skip("infra/template.json not written yet")
    res = provision(template)
    assert res.queues and res.state_machines
    sqs: Any = boto3.client("sqs")
    for q in res.queues:
        assert sqs.get_queue_url(QueueName=q.name)["QueueUrl"] == q.url
