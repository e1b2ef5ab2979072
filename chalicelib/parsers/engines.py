"""The engine catalog (WeKnora `D/engines.go`): each engine names its file types and probes whether it
can run here; the reader picks one per file type and falls back to builtin, then simple."""

from __future__ import annotations

import importlib.util
import io
import threading
from collections.abc import Callable
from typing import Any

from chalicelib.domain.filetypes import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS
from chalicelib.domain.parser_engines import PARSER_ENGINE_TYPES
from chalicelib.parsers.base import ParseContext, ParserEngine, is_rtf, parse_failed, unsupported
from chalicelib.parsers.guards import preflight
from chalicelib.parsers.html import parse_epub, parse_html, parse_mhtml
from chalicelib.parsers.libreoffice import convert_with_libreoffice, soffice_path
from chalicelib.parsers.office import parse_docx, parse_spreadsheet, read_doc_natively
from chalicelib.parsers.pdf import parse_pdf
from chalicelib.parsers.ppt import read_ppt_natively
from chalicelib.parsers.simple import SimpleEngine
from chalicelib.parsers.slides import parse_pptx
from chalicelib.ports import ReadRequest, ReadResult

Handler = Callable[[ReadRequest, ParseContext], ReadResult]


def _legacy(target_handler: Handler, target_type: str) -> Handler:
    def handler(request: ReadRequest, ctx: ParseContext) -> ReadResult:
        converted = convert_with_libreoffice(request.data, request.file_type, ctx.limits.convert_timeout_s)
        preflight(converted, target_type, ctx.limits)
        inner = ReadRequest(
            data=converted,
            file_name=request.file_name,
            file_type=target_type,
            engine=request.engine,
            options=request.options,
            url=request.url,
        )
        result = target_handler(inner, ctx)
        result.metadata["converted_by"] = "libreoffice"
        return result

    return handler


def _doc(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    """unword first (milliseconds); LibreOffice for what it cannot read. RTF named .doc (Word's and WordPad's,
    common; base.resolve_file_type lets it through) goes to LibreOffice, which tells it by its content."""
    if is_rtf(request.data):
        if soffice_path() is None:
            raise unsupported(
                "The .doc file is an RTF (Rich Text Format) document; reading RTF needs LibreOffice, "
                "which is not installed on this server. Save it as .docx and upload it again."
            )
        result = _legacy(parse_docx, "docx")(request, ctx)
        result.metadata["content_type"] = "rtf"
        return result
    return read_doc_natively(request) or _legacy(parse_docx, "docx")(request, ctx)


def _ppt(request: ReadRequest, ctx: ParseContext) -> ReadResult:
    """The slides' records read directly first (milliseconds); LibreOffice for what that cannot read."""
    native = read_ppt_natively(request.data, lambda: ctx.check_time("the PowerPoint file"))
    return native or _legacy(parse_pptx, "pptx")(request, ctx)


class BuiltinEngine:
    name = "builtin"
    description = (
        "Fast in-process parsers: pypdfium2 PDF with scanned-page detection, docx and pptx (with notes) "
        "read from their XML with lxml, calamine spreadsheets, lexbor HTML, MHTML, EPUB; doc with unword and ppt "
        "from its records, else through LibreOffice"
    )

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {
            "pdf": parse_pdf,
            "docx": parse_docx,
            "pptx": parse_pptx,
            "xlsx": parse_spreadsheet,
            "xls": parse_spreadsheet,
            "html": parse_html,
            "htm": parse_html,
            "mhtml": parse_mhtml,
            "epub": parse_epub,
            "doc": _doc,
            "ppt": _ppt,
        }
        self._simple = SimpleEngine()
        self.file_types = PARSER_ENGINE_TYPES[self.name]

    def availability(self) -> tuple[bool, str]:
        return True, "" if soffice_path() else "doc/ppt need LibreOffice (not installed)"

    def parse(self, request: ReadRequest, ctx: ParseContext) -> ReadResult:
        handler = self.handlers.get(request.file_type)
        if handler is None:
            return self._simple.parse(request, ctx)
        return handler(request, ctx)


class MarkItDownEngine:
    name = "markitdown"
    description = "Microsoft MarkItDown (pdfminer, mammoth, python-pptx, pandas, BeautifulSoup)"
    file_types = PARSER_ENGINE_TYPES["markitdown"]

    def __init__(self) -> None:
        self._md: Any = None
        self._lock = threading.Lock()

    def availability(self) -> tuple[bool, str]:
        if importlib.util.find_spec("markitdown") is None:
            return False, "markitdown is not installed"
        return True, ""

    def parse(self, request: ReadRequest, ctx: ParseContext) -> ReadResult:
        from markitdown import MarkItDown, StreamInfo

        with self._lock:
            if self._md is None:
                self._md = MarkItDown(enable_plugins=False)
        info = StreamInfo(extension="." + request.file_type, filename=request.file_name)
        try:
            result = self._md.convert_stream(io.BytesIO(request.data), stream_info=info)
        except Exception as exc:  # markitdown wraps converter failures in several exception types
            raise parse_failed(
                f"MarkItDown could not read the file: {str(exc).splitlines()[0][:200]}"
            ) from exc
        return ReadResult(markdown=result.markdown or "", title=(result.title or "")[:300])


# name → engine class, in fallback priority order (builtin, then simple).
ENGINE_CATALOG: dict[str, Callable[[], ParserEngine]] = {
    "builtin": BuiltinEngine,
    "simple": SimpleEngine,
    "markitdown": MarkItDownEngine,
}


def build_catalog() -> dict[str, ParserEngine]:
    return {name: factory() for name, factory in ENGINE_CATALOG.items()}


def default_engine_for(file_type: str) -> str:
    """WeKnora: with no rule, text/csv/json/image/audio go to the in-process reader, the rest to builtin."""
    if file_type in {"md", "markdown", "txt", "csv", "json"} | IMAGE_EXTENSIONS | AUDIO_EXTENSIONS:
        return "simple"
    return "builtin"


__all__ = ["BuiltinEngine", "MarkItDownEngine", "build_catalog", "default_engine_for", "unsupported"]
