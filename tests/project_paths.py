"""Where the tests find the project and the dev corpus: one definition for every test folder.

A plain module rather than `tests/conftest.py`, because every conftest.py outside a package is imported
under the one name `conftest`: `from conftest import ...` would get whichever conftest pytest loaded last.
The `corpus` fixture in `tests/conftest.py` is built on this module.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from chalicelib.settings import default_corpus

ROOT = Path(__file__).resolve().parents[1]
#: the dev corpus (read-only): WEKNORA_CORPUS, else the nearest `shared/corpus` above the project root
CORPUS = default_corpus(ROOT)


def corpus_missing(name: str = "") -> str:
    what = f"corpus file {name}" if name else "the dev corpus"
    return f"{what} not found under {CORPUS} (set WEKNORA_CORPUS to the corpus directory)"


def corpus_bytes(name: str) -> bytes:
    """One corpus file's bytes; skips the calling test (or, at import time, its module) when it is absent."""
    path = CORPUS / name
    if not path.is_file():
        pytest.skip(corpus_missing(name), allow_module_level=True)
    return path.read_bytes()
