"""The parser engines by name and the file types each takes: one table that the docreader's engine catalog
is built from and that every body naming an engine (`parser_engine_rules`) is checked against, so a rule
that cannot be honoured is a 400 at the API, never a silent fallback in the docreader."""

from __future__ import annotations

from collections.abc import Mapping

from chalicelib.domain.filetypes import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS

TEXT_TYPES = frozenset({"txt", "md", "markdown"})
SIMPLE_TYPES = TEXT_TYPES | {"csv", "json"} | IMAGE_EXTENSIONS | AUDIO_EXTENSIONS
#: what the builtin engine parses itself (anything else it hands to the simple engine)
BUILTIN_OWN_TYPES = frozenset(
    {"pdf", "docx", "pptx", "xlsx", "xls", "html", "htm", "mhtml", "epub", "doc", "ppt"}
)
MARKITDOWN_TYPES = frozenset(
    {"pdf", "docx", "pptx", "xlsx", "xls", "html", "htm", "csv", "json", "txt", "md", "markdown", "epub"}
)

PARSER_ENGINE_TYPES: dict[str, frozenset[str]] = {
    "builtin": BUILTIN_OWN_TYPES | SIMPLE_TYPES,
    "simple": SIMPLE_TYPES,
    "markitdown": MARKITDOWN_TYPES,
}


def engine_rule_problems(rules: Mapping[str, str]) -> list[str]:
    """Why each rule (file type -> engine) cannot be honoured; empty when all can."""
    problems = []
    for file_type, engine in rules.items():
        kind = file_type.lower().lstrip(".")
        takes = PARSER_ENGINE_TYPES.get(engine)
        if takes is None:
            problems.append(
                f"parser engine {engine!r} is unknown (known: {', '.join(sorted(PARSER_ENGINE_TYPES))})"
            )
        elif kind not in takes:
            problems.append(f"parser engine {engine!r} does not parse .{kind}")
    return problems
