"""Corpus access for the parser tests (read-only files; a missing file skips the test)."""

from pathlib import Path

from project_paths import corpus_bytes

__all__ = ["DATA", "corpus_bytes"]

DATA = Path(__file__).parent / "data"
