"""The docreader stage as a container-image Lambda (functions/docreader/Dockerfile): the same stage code the
local runtime drives, bound to the docreader queue in infra/template.json."""

from __future__ import annotations

from typing import Any

from chalicelib.bootstrap import get_deps
from chalicelib.observability import traced
from chalicelib.stages import docreader


@traced
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    deps = get_deps()
    deps.report_parser_engines()  # the API function, which carries no parser, lists what this image reads
    return docreader.handle(deps, event, context)
