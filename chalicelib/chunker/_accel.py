"""The optional C accelerator (`_native.c`, built by setup.py) and the switch between it and pure Python.

Both paths give identical chunks (tests/chunker/test_chunker_native.py). WEKNORA_CHUNKER_PURE=1 in the
environment forces pure Python; `use_native(False)` does the same at run time (tests, benchmarks).
"""

from __future__ import annotations

import os
from typing import Any

IMPORT_ERROR = ""
_module: Any = None
try:
    from chalicelib.chunker import _native as _module  # type: ignore[attr-defined, no-redef]
except ImportError as exc:  # no compiler at install time: pure Python
    IMPORT_ERROR = str(exc)

native: Any = None if os.environ.get("WEKNORA_CHUNKER_PURE", "") not in ("", "0") else _module


def available() -> bool:
    """True when the C extension was built and imports."""
    return _module is not None


def use_native(on: bool) -> bool:
    """Switch the accelerator on or off; returns whether it was on."""
    global native
    was = native is not None
    native = _module if on else None
    return was
