"""The fresh-machine run (`make test-without-tools`, CI's first suite) really hides the optional tools: under
it, `shutil.which` finds none of them, and the list covers every tool a test marker probes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "without_system_tools.py"


def _script():
    spec = importlib.util.spec_from_file_location("without_system_tools", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_optional_tools_are_hidden_and_the_rest_is_not() -> None:
    probe = (
        "import json, os, shutil; "
        "print(json.dumps({'found': [t for t in ('tesseract', 'soffice', 'libreoffice', 'pdftotext', 'pdftoppm',"
        " 'ffmpeg') if shutil.which(t)], 'sh': shutil.which('sh') is not None,"
        " 'require': os.environ.get('WEKNORA_REQUIRE_SYSTEM_DEPS')}))"
    )
    done = subprocess.run(
        [sys.executable, str(SCRIPT), sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "WEKNORA_REQUIRE_SYSTEM_DEPS": "1"},
    )
    seen = json.loads(done.stdout)
    assert seen == {"found": [], "sh": True, "require": None}


def test_the_hidden_list_covers_every_tool_a_marker_probes() -> None:
    hidden = _script().hidden_tools()
    # the binaries tests/optional_tools.py looks for (tesseract; soffice or libreoffice)
    assert {"tesseract", "soffice", "libreoffice"} <= hidden
    # and what the code runs by name (chalicelib/parsers: tesseract, soffice) and the benchmarks (pdftotext)
    assert {"pdftotext", "pdftoppm"} <= hidden
