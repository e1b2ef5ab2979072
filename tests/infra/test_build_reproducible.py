"""Two builds of one commit give byte-identical artifacts (no build path in the bytecode, fixed timestamps,
sorted entries), so a deploy updates only the functions and layers whose code changed. Slow (two full
builds, ~4 min each): `make test-slow`."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _digests(out: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.suffix == ".zip" or p.name == "sam.json"
    }


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_builds_of_one_commit_are_byte_identical(tmp_path: Path) -> None:
    outs = [tmp_path / "first", tmp_path / "second"]
    for out in outs:
        subprocess.run(
            [sys.executable, "scripts/build_lambda.py", "--out", str(out)], cwd=ROOT, check=True, timeout=1500
        )
    first, second = (_digests(out) for out in outs)
    assert len(first) >= 5 and first == second
