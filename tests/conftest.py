"""Shared test setup: loopback servers, the dev corpus, and the skip (or, in CI, failure) of tests whose
optional tool is missing (`optional_tools`).

Numeric libraries are pinned to one thread: these machines have two cores.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "ORT_NUM_THREADS"):
    os.environ.setdefault(_name, "1")
os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "weknora-ingest-tests")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# One in-process embedding model (the local runtime would start one worker process per core).
os.environ.setdefault("WEKNORA_EMBED_WORKERS", "1")


# Loopback HTTP servers for the network and parser tests (one definition for both folders).
import sys  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "net"))
from loopback import LoopbackServer  # noqa: E402
from project_paths import CORPUS, corpus_missing  # noqa: E402

pytest_plugins = ("optional_tools", "pytester")


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The dev corpus directory (read-only files + MANIFEST.tsv); skips the test when it is absent."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        pytest.skip(corpus_missing())
    return CORPUS


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def server_factory() -> Iterator[Callable[[], LoopbackServer]]:
    made: list[LoopbackServer] = []

    def make() -> LoopbackServer:
        made.append(LoopbackServer())
        return made[-1]

    try:
        yield make
    finally:
        for srv in made:
            srv.close()
