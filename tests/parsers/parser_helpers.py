"""Corpus access for the parser tests (read-only files; a missing file skips the test)."""

import os
from pathlib import Path

import pytest

CORPUS = Path(os.environ.get("WEKNORA_CORPUS", "/work/shared/corpus"))
DATA = Path(__file__).parent / "data"


def corpus_bytes(name: str) -> bytes:
    path = CORPUS / name
    if not path.exists():
        pytest.skip(f"corpus file {name} not available")
    return path.read_bytes()
