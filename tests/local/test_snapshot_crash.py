"""Issue 27: a crash of `weknora-ingest up` (kill -9 of its processes) loses at most one snapshot interval:
a knowledge base created more than an interval before the crash is there after the restart."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from project_paths import ROOT

KEY = "crash-test-key"
INTERVAL_S = 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(state: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "WEKNORA_STATE_DIR": str(state), "WEKNORA_API_KEY": KEY, "OMP_NUM_THREADS": "1"}
    for name in ("AWS_ENDPOINT_URL", "MOTO_PORT"):  # a test server of this process is not the stack's
        env.pop(name, None)
    command = [sys.executable, "-m", "chalicelib.local.cli", "up", "--port", str(port)]
    command += ["--snapshot-interval", str(INTERVAL_S)]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True
    )


def _call(port: int, method: str, path: str, **kw: Any) -> Any:
    response = requests.request(
        method, f"http://127.0.0.1:{port}/api/v1{path}", headers={"X-API-Key": KEY}, timeout=30, **kw
    )
    response.raise_for_status()
    return response.json()["data"]


def _ready(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            _call(port, "GET", "/knowledge-bases")
            return
        except requests.RequestException:
            time.sleep(0.5)
    raise AssertionError(f"`up` did not answer: {log.read_text(errors='replace')[-3000:]}")


def _crash(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # `up`, its moto server and its workers: no save at exit
    process.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_kb_created_an_interval_before_a_kill_9_is_there_after_the_restart(tmp_path: Path) -> None:
    state, log = tmp_path / "state", tmp_path / "up.log"
    port = _free_port()
    first = _up(state, port, log)
    try:
        _ready(port, first, log)
        kb = _call(port, "POST", "/knowledge-bases", json={"name": "before the crash"})
        time.sleep(3 * INTERVAL_S)  # at least one periodic save after it
    finally:
        _crash(first)
    assert (state / "moto-snapshot" / "state.sqlite").is_file()
    second = _up(state, port, log)
    try:
        _ready(port, second, log)
        names = {k["id"]: k["name"] for k in _call(port, "GET", "/knowledge-bases")}
        assert names.get(kb["id"]) == "before the crash", log.read_text(errors="replace")[-3000:]
    finally:
        second.send_signal(signal.SIGINT)
        try:
            second.wait(timeout=120)
        except subprocess.TimeoutExpired:
            _crash(second)
