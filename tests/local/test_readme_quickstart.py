"""The README's quickstart runs as written (issue 26, "docs that teach"): `make run` in the project folder,
then every command of the quickstart's other blocks, from the same folder, as a person types them. Only the
port and the state folder are moved (environment variables the README documents), so a developer's own
stack and state are left alone, and the one placeholder (`KNOWLEDGE_ID`) takes the id `ingest` printed.

Marked `readme` (`make test-readme`, run by CI after `make test`): it installs nothing, but it starts the
whole local stack and embeds two real documents, which takes a minute or two on a shared machine.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
from project_paths import ROOT

pytestmark = pytest.mark.readme


def quickstart_blocks() -> list[list[str]]:
    """The commands of each `sh` block of the README's quickstart, in order (comments and blanks left out)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("\n## Quickstart") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [
        [
            line.split("  #", 1)[0].strip()
            for line in block.splitlines()
            if line.strip() and not line.startswith("#")
        ]
        for block in blocks
    ]


@pytest.fixture(scope="module")
def environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    state = tmp_path_factory.mktemp("quickstart") / ".weknora"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WEKNORA_", "AWS_"))}
    return {**env, "WEKNORA_PORT": str(port), "WEKNORA_STATE_DIR": str(state), "COLUMNS": "120"}


@pytest.fixture(scope="module")
def stack(environment: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    (start,) = quickstart_blocks()[0]
    assert start == "make run", "the quickstart starts with `make run`"
    process = subprocess.Popen(
        start.split(),
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + 300
    for line in process.stdout:  # the panel's last line says the stack is up
        seen.append(line)
        if "Ctrl-C to stop" in line or time.monotonic() > deadline:
            break
    assert any("Ctrl-C to stop" in line for line in seen), "".join(seen)
    yield process
    os.killpg(process.pid, signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)


def run(command: str, environment: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, (command, done.stdout, done.stderr)
    return done.stdout


def test_the_quickstart_runs_as_written(stack: subprocess.Popen[str], environment: dict[str, str]) -> None:
    _, ingest, watch, search = quickstart_blocks()[:4]

    (command,) = ingest
    out = run(command, environment)
    assert "all 2 file(s) completed" in out, out
    (architecture_id,) = set(re.findall(r"ARCHITECTURE\.md ([0-9a-f-]{36}):", out))

    status, listing = watch
    out = run(status.replace("KNOWLEDGE_ID", architecture_id), environment)
    assert f"{architecture_id} attempt 1 parse_status=completed" in out and "cost: $" in out, out
    out = run(listing, environment)
    assert "2 document(s)" in out and out.count("completed") == 2, out

    (command,) = search
    out = run(command, environment)
    hits = re.findall(r"#\d score=([0-9.]+) (\S+)", out)
    assert len(hits) == 2 and all(float(score) > 0 for score, _ in hits), out
    ranked = run(command.replace(" search ", " search --json "), environment)
    assert "Big documents" in out, ranked  # the section the question is about
