"""The DocReader: picks an engine per file type, sniffs the bytes, applies limits, falls back
builtin → simple, and turns every failure into a stage error a user can read."""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from typing import Any

from chalicelib.domain.errors import PermanentStageError, SpanErrorCode, StageError, TransientStageError
from chalicelib.domain.filetypes import AUDIO_EXTENSIONS, IMPORTABLE_EXTENSIONS, file_type_of
from chalicelib.domain.languages import with_languages
from chalicelib.observability import logger
from chalicelib.parsers.asr import with_language
from chalicelib.parsers.base import (
    Limits,
    MarkdownBudget,
    ParseContext,
    ParserEngine,
    parse_failed,
    resolve_file_type,
    sniff,
    unsupported,
)
from chalicelib.parsers.calamine_child import native_panic
from chalicelib.parsers.engines import default_engine_for
from chalicelib.parsers.guards import check_pdf_streams, open_package, preflight
from chalicelib.ports import AsrEngine, OcrEngine, ReadRequest, ReadResult

NO_SPEECH_TEXT = "[No speech was recognised in this audio file.]"
FALLBACK_CHAIN = ("builtin", "simple")


def engine_rules(options: Mapping[str, Any]) -> dict[str, str]:
    """`parser_engine_rules` as {file_type: engine}; accepts a mapping or WeKnora's list of
    {"file_types": [...], "engine": name} rules."""
    raw = options.get("parser_engine_rules") or {}
    rules: dict[str, str] = {}
    if isinstance(raw, Mapping):
        for key, value in raw.items():
            if isinstance(value, str):
                rules[str(key).lower().lstrip(".")] = value
    elif isinstance(raw, list):
        for rule in raw:
            if not isinstance(rule, Mapping):
                continue
            engine = rule.get("engine") or rule.get("parser_engine")
            types = rule.get("file_types") or rule.get("file_type") or []
            for ft in [types] if isinstance(types, str) else types:
                if isinstance(engine, str) and isinstance(ft, str):
                    rules[ft.lower().lstrip(".")] = engine
    return rules


class EngineDocReader:
    def __init__(
        self,
        catalog: dict[str, ParserEngine],
        ocr: OcrEngine | None = None,
        asr: AsrEngine | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.catalog = catalog
        self.ocr = ocr
        self.asr = asr
        self.limits = limits or Limits()

    def engines(self) -> list[dict[str, Any]]:
        out = []
        for engine in self.catalog.values():
            available, reason = engine.availability()
            out.append(
                {
                    "name": engine.name,
                    "description": engine.description,
                    "file_types": sorted(engine.file_types),
                    "available": available,
                    "reason": reason,
                }
            )
        return out

    def choose(self, file_type: str, requested: str, options: Mapping[str, Any]) -> tuple[ParserEngine, str]:
        """(engine, note) — the note says why a fallback happened."""
        wanted = requested or engine_rules(options).get(file_type) or default_engine_for(file_type)
        notes: list[str] = []
        for name in (wanted, *FALLBACK_CHAIN):
            engine = self.catalog.get(name)
            if engine is None:
                notes.append(f"engine '{name}' is unknown")
                continue
            if file_type not in engine.file_types:
                notes.append(f"engine '{name}' does not take .{file_type}")
                continue
            available, reason = engine.availability()
            if not available:
                notes.append(f"engine '{name}' is unavailable: {reason}")
                continue
            return engine, "; ".join(notes)
        raise unsupported(f"No parser engine can read .{file_type} files.")

    def page_count(self, request: ReadRequest) -> int | None:
        """A PDF's pages when the engine that would parse it can parse page ranges (builtin); else None."""
        file_type = (request.file_type or file_type_of(request.file_name)).lower().lstrip(".")
        if file_type != "pdf" or resolve_file_type(request.data, file_type) != "pdf":
            return None
        options = dict(request.options or {})
        engine, _ = self.choose("pdf", request.engine, options)
        if engine.name != "builtin":
            return None
        from chalicelib.parsers.pdf import count_pages

        check_pdf_streams(request.data, self._limits(options))  # before pdfium opens it
        return count_pages(request.data, options.get("pdf_password") or None)

    def _limits(self, options: Mapping[str, Any]) -> Limits:
        return Limits.from_options(dict(options)) if "limits" in options else self.limits

    def read(self, request: ReadRequest) -> ReadResult:
        options = dict(request.options or {})
        limits = self._limits(options)
        file_type = (request.file_type or file_type_of(request.file_name)).lower().lstrip(".")
        if file_type not in IMPORTABLE_EXTENSIONS:
            raise unsupported(f"Files of type .{file_type or '(none)'} cannot be imported.")
        if len(request.data) > limits.max_input_bytes:
            raise parse_failed(f"The file is larger than {limits.max_input_bytes // (1024 * 1024)} MB.")
        listing: list[zipfile.ZipInfo] = []  # a zip's central directory, read once (type check, preflight)
        if file_type in AUDIO_EXTENSIONS:
            family = sniff(request.data)
            if family == "empty":
                raise parse_failed("The file is empty.")
            if family not in ("audio", "binary"):
                raise unsupported(f"The file is named .{file_type} but does not contain audio.")
            actual = file_type
        else:
            actual = resolve_file_type(request.data, file_type, listing)
        # the `ocr_languages` / `asr_language` settings
        ocr = with_languages(self.ocr, options.get("ocr_languages"))
        asr = with_language(self.asr, options.get("asr_language"))
        # Before any engine runs: the limits bind every engine a rule or override may pick.
        # A docx/pptx: the central directory's claims now, each member checked as it is read (the builtin
        # reader never inflates the theme, fonts, layouts...); any other engine gets every member checked first.
        engine, note = self.choose(actual, request.engine, options)  # a lookup: nothing parsed yet
        # the parse budget's clock starts here: the preflight (an EPUB's chapters, a page's nesting measured)
        # is part of the parse and checks it too
        ctx = ParseContext(ocr=ocr, asr=asr, limits=limits, options=options)
        package = open_package(request.data, actual, limits, listing)
        # an xlsx's sheets as the preflight measured them, for the builtin reader's sparse sheets
        sheets: dict[str, tuple[int, int, int]] | None = {} if actual == "xlsx" else None
        if package is not None:
            measured: dict[str, Any] = {
                "uncompressed_bytes": sum(i.file_size for i in package.infos.values())
            }
        else:
            # a page range's source was measured whole when its plan was made (page_count), not per range;
            # a sheet's extent binds the engines that build its whole grid, the builtin reader its cells
            measured = preflight(
                request.data,
                actual,
                limits,
                listing=listing,
                streams_checked="page_range" in options,
                sheets_by_extent=engine.name != "builtin",
                sheet_measures=sheets,
                check_time=ctx.check_time,
            )
        ctx.package_parts, ctx.sheet_measures = package, sheets
        if package is not None and engine.name != "builtin":
            package.check_rest(ctx.check_time)
        inner = ReadRequest(
            data=request.data,
            file_name=request.file_name,
            file_type=actual,
            engine=engine.name,
            options=options,
            url=request.url,
        )
        try:
            result = engine.parse(inner, ctx)
        except StageError:
            raise
        except MemoryError as exc:
            raise parse_failed("The file needs more memory to parse than this worker allows.") from exc
        except RecursionError as exc:
            raise parse_failed("The file is nested too deeply to parse.") from exc
        except (TimeoutError, ConnectionError) as exc:
            raise TransientStageError(
                f"The parser timed out or lost a connection: {exc}", code=SpanErrorCode.DOCREADER_UNAVAILABLE
            ) from exc
        except Exception as exc:  # a parser library failing on this input will fail the same way again
            logger.warning("parser failed", extra={"engine": engine.name}, exc_info=True)
            raise parse_failed(
                f"The .{actual} file could not be parsed ({type(exc).__name__}: {str(exc)[:160]})."
            ) from exc
        except BaseException as exc:
            if not native_panic(exc):  # KeyboardInterrupt, SystemExit: not the file's doing
                raise
            logger.warning("parser library panicked", extra={"engine": engine.name}, exc_info=True)
            raise parse_failed(
                f"The .{actual} file is damaged: its reader stopped on it ({exc!s:.160})."
            ) from exc
        MarkdownBudget(limits).add(result.markdown)  # the engines that do not count as they go
        ctx.check_time()
        if result.is_audio:  # speech recognition happens here, and only here
            if asr is None:
                raise PermanentStageError(
                    "Audio needs a speech-recognition engine, and none is configured.",
                    code=SpanErrorCode.DOCREADER_UNAVAILABLE,
                )
            transcript = asr.transcribe(result.audio, request.file_name).strip()
            result.markdown = transcript or NO_SPEECH_TEXT
        if not result.markdown.strip() and not result.images and not result.is_audio:
            raise PermanentStageError(
                "No text could be extracted from the file (it may be empty or image-only).",
                code=SpanErrorCode.DOCREADER_PARSE_FAILED,
            )
        for key, value in measured.items():
            result.metadata.setdefault(key, value)
        result.metadata.setdefault("engine", engine.name)
        result.metadata.setdefault("file_type", actual)
        if actual != file_type:
            result.metadata["declared_file_type"] = file_type
        if note:
            result.metadata["engine_fallback"] = note
        return result
