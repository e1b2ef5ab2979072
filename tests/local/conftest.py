"""Fixtures for the local runtime tests: one moto server per test session, reset between tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chalicelib.local.moto_server import MotoServer, shared_moto_server

FIXTURES = Path(__file__).parent / "fixtures"
TEMPLATE = FIXTURES / "template.json"


@pytest.fixture(scope="module")
def moto_server() -> Iterator[MotoServer]:
    # The runtime points AWS_ENDPOINT_URL etc. at moto; give other test modules their environment back.
    saved = dict(os.environ)
    server = shared_moto_server()
    yield server
    os.environ.clear()
    os.environ.update(saved)
