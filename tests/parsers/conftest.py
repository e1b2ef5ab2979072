import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "net"))

from parser_helpers import corpus_bytes

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_THREAD_LIMIT"):
    os.environ.setdefault(_var, "1")


@pytest.fixture(scope="session")
def reader():
    from chalicelib.parsers import build_docreader

    return build_docreader()


@pytest.fixture
def read(reader):
    from chalicelib.ports import ReadRequest

    def _read(name: str, file_type: str | None = None, data: bytes | None = None, **options):
        ft = file_type or name.rsplit(".", 1)[-1].lower()
        payload = corpus_bytes(name) if data is None else data
        return reader.read(ReadRequest(data=payload, file_name=name, file_type=ft, options=options))

    return _read
