"""The deployable artifact: `chalice package` with the merge template infra/stack.py generates → SAM template
that cfn-lint passes offline (no errors, no warnings), and that declares everything Chalice cannot."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .iam_policy import package_stack

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("package")
    template = package_stack(out)
    lint = subprocess.run(
        [str(BIN / "cfn-lint"), str(out / "sam.json")], capture_output=True, text=True, timeout=300
    )
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
    assert len(sqs_events) == 12
    for name, event in sqs_events:
        assert event["Properties"].get("FunctionResponseTypes") == ["ReportBatchItemFailures"], name


def test_queues_have_dlqs_after_stage_max_receives(packaged: dict[str, Any]) -> None:
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
        "Lifecycle",
        "Wiki",
        "FaqImport",
        "Webhooks",
        "WebhooksSlow",
    }
    for name, queue in main.items():
        redrive = queue["Properties"]["RedrivePolicy"]
        assert redrive["deadLetterTargetArn"]["Fn::GetAtt"][0] == name.replace("Queue", "DeadLetterQueue")
        assert redrive["maxReceiveCount"] == {"Ref": "StageMaxReceives"}
    # 4 tries of the code and room for throttles (tests/infra/test_hardening.py)
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
        "TasksTable",
        "GraphTable",
        "WikiTable",
        "UsageTable",
        "TurnsTable",
        "TagsTable",
        "FaqTable",
        "WebhooksTable",
        "ResourcesTable",
        "RequestCountsTable",
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


def test_docreader_is_a_container_image_function_on_its_queue(packaged: dict[str, Any]) -> None:
    template = packaged["template"]
    functions = resources_of(template, "AWS::Serverless::Function")
    docreader = functions["DocreaderStage"]
    props = docreader["Properties"]
    assert props["PackageType"] == "Image" and props["ImageUri"] == {"Ref": "DocreaderImageUri"}
    assert "Handler" not in props and "Runtime" not in props and "Layers" not in props
    assert docreader["Metadata"]["Dockerfile"] == "functions/docreader/Dockerfile"
    # sam build resolves DockerContext from the template's folder: infra/ here, out/ once packaged
    assert (
        ROOT / "infra" / docreader["Metadata"]["DockerContext"] / "functions/docreader/Dockerfile"
    ).is_file()
    (event,) = props["Events"].values()
    assert event["Type"] == "SQS"
    assert event["Properties"]["Queue"] == {"Fn::GetAtt": ["DocreaderQueue", "Arn"]}
    assert event["Properties"]["BatchSize"] == 1
    assert event["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert (props["Timeout"], props["MemorySize"]) == (900, 3008)
    # its own role; the environment of the Chalice functions (theirs lives in Globals too), and of its own
    # only the URLs of the queues it uses (tests/infra/test_queue_urls.py)
    assert props["Role"] == {"Fn::GetAtt": ["DocreaderStageRole", "Arn"]}
    assert all(
        name.startswith(("WEKNORA_QUEUE_URL_", "WEKNORA_DLQ_URL_"))
        for name in props["Environment"]["Variables"]
    )
    assert "WEKNORA_STORAGE" in template["Globals"]["Function"]["Environment"]["Variables"]


def test_the_chalice_app_keeps_the_api_and_the_light_stages(packaged: dict[str, Any]) -> None:
    functions = resources_of(packaged["template"], "AWS::Serverless::Function")
    chalice = {
        name: f["Properties"]["Handler"] for name, f in functions.items() if "Handler" in f["Properties"]
    }
    assert "app.docreader_stage" not in chalice.values()
    assert chalice["APIHandler"] == "app.app"
    assert set(chalice) == {
        "APIHandler",
        "OnUploadEvent",
        "ChunkingStage",
        "EmbeddingStage",
        "MultimodalTask",
        "PostprocessTask",
        "EnrichmentTask",
        "LifecycleTask",
        "WikiTask",
        "FaqImportTask",
        "WebhookDelivery",
        "WebhookSlowDelivery",
        "Housekeeping",
    }


def dockerfile_package_list(dockerfile: str) -> tuple[str, str, str]:
    """(the list file the Dockerfile copies in, where it puts it, the shell command whose output it gives
    to `apt-get install`)."""
    text = dockerfile.replace("\\\n", " ")
    ((source, target),) = re.findall(r"^COPY (\S*system-packages\.txt) (\S+)$", text, re.MULTILINE)
    (producer,) = re.findall(r"&&\s*(.+?)\s*\|\s*xargs apt-get install -y --no-install-recommends", text)
    return source, target, producer


def test_the_docreader_image_installs_the_list_the_script_installs() -> None:
    dockerfile = (ROOT / "functions" / "docreader" / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert base.startswith("python:3.11-") and "bookworm" in base  # Debian: the list is Debian packages
    assert 'ENTRYPOINT ["/usr/local/bin/python", "-m", "awslambdaric"]' in dockerfile
    source, target, producer = dockerfile_package_list(dockerfile)
    assert source == "functions/docreader/system-packages.txt" and target in producer
    # what the image's apt-get install gets: the Dockerfile's own command, run on the list file
    listed = subprocess.run(
        ["sh", "-c", producer.replace(target, str(ROOT / source))], capture_output=True, text=True, check=True
    ).stdout.split()
    script = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-parser-system-deps.sh"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # the script installs the image's list, then the local-only one (tesseract, poppler: Textract on AWS)
    assert script[: len(listed)] == listed
    assert "libreoffice-writer" in listed and "tesseract-ocr" not in listed
    assert {"tesseract-ocr", "poppler-utils"} <= set(script[len(listed) :])
    assert "awslambdaric" in (ROOT / "functions" / "docreader" / "requirements.txt").read_text()
