import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
sys.path.insert(0, str(Path(__file__).parent))

from loopback import LoopbackServer  # noqa: E402


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
