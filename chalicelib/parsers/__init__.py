"""Docreader engines: `build_docreader()` returns the DocReader the pipeline's docreader stage calls."""

from __future__ import annotations

from ..ports import AsrEngine, OcrEngine
from .base import Limits, ParseContext, ParserEngine
from .engines import ENGINE_CATALOG, BuiltinEngine, MarkItDownEngine, build_catalog
from .reader import EngineDocReader, engine_rules
from .simple import SimpleEngine


def build_docreader(
    ocr: OcrEngine | None = None, asr: AsrEngine | None = None, limits: Limits | None = None
) -> EngineDocReader:
    return EngineDocReader(build_catalog(), ocr=ocr, asr=asr, limits=limits)


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
