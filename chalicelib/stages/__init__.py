"""One module per queue or state machine task, named as the queue and its app.py handler are. Each exposes
`handle(deps, event, context)` (the handler's one line) and `run(deps, message)` (the work).

Submodules load on first use (`stages.docreader.handle(...)`), so a function only imports its own stage:
the API function's cold start never pays for the workers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chalicelib.stages import (  # noqa: F401
        chunking,
        docreader,
        embedding,
        enrichment,
        faq_import,
        housekeeping,
        lifecycle,
        multimodal,
        postprocess,
        uploads,
        webhooks,
        wiki,
    )

STAGES = (
    "chunking",
    "docreader",
    "embedding",
    "enrichment",
    "faq_import",
    "housekeeping",
    "lifecycle",
    "multimodal",
    "postprocess",
    "uploads",
    "webhooks",
    "wiki",
)


def __getattr__(name: str) -> Any:
    if name in STAGES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = list(STAGES)
