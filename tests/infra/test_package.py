"""The deployable artifact: `chalice package --merge-template infra/template.json` → SAM template that
cfn-lint passes offline, and that declares everything Chalice cannot."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("package")
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1"}
    env.pop("AWS_ENDPOINT_URL", None)
    subprocess.run(
        [
            str(BIN / "chalice"),
            "package",
            "--stage",
            "dev",
            "--merge-template",
            "infra/template.json",
            str(out),
        ],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=900,
    )
    lint = subprocess.run(
        [str(BIN / "cfn-lint"), str(out / "sam.json")], capture_output=True, text=True, timeout=300
    )
    template = json.loads((out / "sam.json").read_text())
    return {"template": template, "lint": lint, "out": out}


def test_cfn_lint_passes_on_the_merged_template(packaged: dict[str, Any]) -> None:
    lint = packaged["lint"]
    assert lint.returncode == 0, lint.stdout + lint.stderr


def resources_of(template: dict[str, Any], kind: str) -> dict[str, Any]:
    return {k: v for k, v in template["Resources"].items() if v.get("Type") == kind}


def test_every_sqs_trigger_reports_batch_item_failures(packaged: dict[str, Any]) -> None:
    functions = resources_of(packaged["template"], "AWS::Serverless::Function")
    sqs_events = [
        (name, event)
        for name, fn in functions.items()
        for event in fn["Properties"].get("Events", {}).values()
        if event["Type"] == "SQS"
    ]
    assert len(sqs_events) == 7
    for name, event in sqs_events:
        assert event["Properties"].get("FunctionResponseTypes") == ["ReportBatchItemFailures"], name


def test_queues_have_dlqs_with_four_tries(packaged: dict[str, Any]) -> None:
    template = packaged["template"]
    queues = resources_of(template, "AWS::SQS::Queue")
    main = {k: v for k, v in queues.items() if not k.endswith("DeadLetterQueue")}
    assert {k.removesuffix("Queue") for k in main} == {
        "Uploads",
        "Docreader",
        "Chunking",
        "Embedding",
        "Multimodal",
        "Postprocess",
        "Enrichment",
    }
    for name, queue in main.items():
        redrive = queue["Properties"]["RedrivePolicy"]
        assert redrive["deadLetterTargetArn"]["Fn::GetAtt"][0] == name.replace("Queue", "DeadLetterQueue")
        assert redrive["maxReceiveCount"] == {"Ref": "StageMaxReceives"}
    assert template["Parameters"]["StageMaxReceives"]["Default"] == 4


def test_tables_bucket_notification_state_machine_and_schedule(packaged: dict[str, Any]) -> None:
    template = packaged["template"]
    tables = resources_of(template, "AWS::DynamoDB::Table")
    assert set(tables) == {
        "TenantsTable",
        "KnowledgeBasesTable",
        "KnowledgeTable",
        "DedupeTable",
        "ChunksTable",
        "SpansTable",
        "EmbeddingCacheTable",
    }
    bucket = template["Resources"]["FilesBucket"]["Properties"]
    notification = bucket["NotificationConfiguration"]["QueueConfigurations"][0]
    assert notification["Queue"] == {"Fn::GetAtt": ["UploadsQueue", "Arn"]}
    assert notification["Filter"]["S3Key"]["Rules"][0]["Value"] == "uploads/"
    machine = template["Resources"]["KnowledgeStateMachine"]["Properties"]
    assert machine["DefinitionUri"] == "statemachine/knowledge.asl.json"
    housekeeping = template["Resources"]["Housekeeping"]["Properties"]["Events"]
    assert [e["Properties"]["Schedule"] for e in housekeeping.values()] == ["rate(5 minutes)"]


def test_asl_substitutions_are_all_provided(packaged: dict[str, Any]) -> None:
    asl = (ROOT / "infra" / "statemachine" / "knowledge.asl.json").read_text()
    json.loads(asl)  # valid JSON as deployed and as run locally
    wanted = set(re.findall(r"\$\{(\w+)\}", asl))
    given = set(
        packaged["template"]["Resources"]["KnowledgeStateMachine"]["Properties"]["DefinitionSubstitutions"]
    )
    assert wanted == given
    assert "lambda:invoke" not in asl and ".waitForTaskToken" in asl


def test_the_lambda_code_fits_the_250_mb_unzipped_limit(packaged: dict[str, Any]) -> None:
    import zipfile

    total = 0
    for name in ("deployment.zip", "layer-deployment.zip"):
        path = packaged["out"] / name
        if path.exists():
            with zipfile.ZipFile(path) as archive:
                total += sum(info.file_size for info in archive.infolist())
    assert 0 < total < 250 * 1024 * 1024, f"{total / 1e6:.0f} MB unzipped"
