"""`weknora-ingest up` (make run) gives every function the operator key as a plain environment variable, as
before the key moved to SSM on AWS: WEKNORA_OPERATOR_KEY, else `local-operator-key`, or `--param
OperatorKey=...` (the template parameter it used to be)."""

from __future__ import annotations

import io
import os
import socket
import sys
import threading
import time
import types
from pathlib import Path

import pytest
import requests
from rich.console import Console

from chalicelib.local import cli

APP = (
    "import os\n"
    "from chalice import Chalice\n"
    "app = Chalice(app_name='operatorkeytest')\n"
    "@app.route('/api/v1/key')\n"
    "def key():\n"
    "    return {'success': True, 'data': {\n"
    "        'key': os.environ.get('WEKNORA_OPERATOR_KEY'),\n"
    "        'parameter': os.environ.get('WEKNORA_OPERATOR_KEY_PARAMETER')}}\n"
)


def served_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> tuple[dict[str, str], str]:
    """What a function of the local stack sees, and what `up` printed."""
    fixtures = Path(__file__).parent / "fixtures"
    (tmp_path / "infra").mkdir(parents=True)
    for name in ("template.json", "flow.asl.json"):
        (tmp_path / "infra" / name).write_text((fixtures / name).read_text())
    (tmp_path / "app.py").write_text(APP)
    monkeypatch.setitem(sys.modules, "chalicelib.bootstrap", types.SimpleNamespace())
    monkeypatch.delitem(sys.modules, "app", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WEKNORA_STATE_DIR", raising=False)
    saved_env = dict(os.environ)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    args = cli.build_parser().parse_args(["up", "--port", str(port), *argv])
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cli.cmd_up(args, console, stop)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while "weknora-ingest up" not in buf.getvalue() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        data = requests.get(f"http://127.0.0.1:{port}/api/v1/key", timeout=10).json()["data"]
        out = buf.getvalue()
    finally:
        stop.set()
        thread.join(20)
        sys.modules.pop("app", None)
        os.environ.clear()
        os.environ.update(saved_env)
    assert result == [0]
    return data, out


def test_the_local_stack_keeps_the_operator_key_in_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEKNORA_OPERATOR_KEY", "op-from-env")
    seen, out = served_key(tmp_path, monkeypatch)
    assert seen == {"key": "op-from-env", "parameter": None}  # no parameter store locally
    assert "op-from-env" in out


def test_the_default_and_the_old_template_parameter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WEKNORA_OPERATOR_KEY", raising=False)
    seen, _ = served_key(tmp_path / "default", monkeypatch)
    assert seen["key"] == cli.DEFAULT_OPERATOR_KEY
    seen, _ = served_key(tmp_path / "param", monkeypatch, "--param", "OperatorKey=op-from-param")
    assert seen["key"] == "op-from-param"
