"""Fixtures for the index tests: one osmem-server per session (in-memory OpenSearch-compatible)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def osmem_base() -> Iterator[object]:
    """osmem-server on a free 127.0.0.1 port (`--addr 127.0.0.1:0`), stopped after the session.

    The launcher passes our pid (`--parent-pid`) and keeps the server's stdin open, so the server
    also exits if this process dies without running the tear-down."""
    osmem_server = pytest.importorskip("osmem_server")
    server = osmem_server.OsmemServer.start(addr="127.0.0.1:0", freeze=True)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def osmem_url(osmem_base: object) -> Iterator[str]:
    """A fresh copy-on-write clone of the (empty) base for one test, on its own port."""
    clone = osmem_base.clone()  # type: ignore[attr-defined]
    try:
        yield clone.url
    finally:
        clone.close()
