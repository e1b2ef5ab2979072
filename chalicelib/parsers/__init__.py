"""Docreader engines: `build_docreader()` returns the DocReader the pipeline's docreader stage calls.

Importing the package loads no parser library: functions without them (the API, the uploads and multimodal
workers on Lambda) import `parsers.ocr` and `parsers.asr` for Textract and Transcribe, and the engines load
on first use of the names below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chalicelib.parsers.base import Limits, ParseContext, ParserEngine
    from chalicelib.parsers.engines import ENGINE_CATALOG, BuiltinEngine, MarkItDownEngine
    from chalicelib.parsers.reader import EngineDocReader, engine_rules
    from chalicelib.parsers.simple import SimpleEngine
    from chalicelib.ports import AsrEngine, OcrEngine

_LAZY = {
    "ENGINE_CATALOG": ".engines",
    "BuiltinEngine": ".engines",
    "MarkItDownEngine": ".engines",
    "EngineDocReader": ".reader",
    "engine_rules": ".reader",
    "Limits": ".base",
    "ParseContext": ".base",
    "ParserEngine": ".base",
    "SimpleEngine": ".simple",
}


def build_docreader(
    ocr: OcrEngine | None = None, asr: AsrEngine | None = None, limits: Limits | None = None
) -> EngineDocReader:
    from chalicelib.parsers.engines import build_catalog
    from chalicelib.parsers.reader import EngineDocReader

    return EngineDocReader(build_catalog(), ocr=ocr, asr=asr, limits=limits)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ENGINE_CATALOG",
    "BuiltinEngine",
    "EngineDocReader",
    "Limits",
    "MarkItDownEngine",
    "ParseContext",
    "ParserEngine",
    "SimpleEngine",
    "build_docreader",
    "engine_rules",
]
