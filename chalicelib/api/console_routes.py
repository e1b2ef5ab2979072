"""The console's routes: its page and its static files (chalicelib/console), public by design (they hold no
data; the page calls the API with the key the user gives it) and kept out of the OpenAPI document."""

from __future__ import annotations

from chalice import Response
from chalice.app import Request

from chalicelib import console
from chalicelib.api.registry import operation
from chalicelib.settings import Settings


def _connect_origins(settings: Settings) -> list[str]:
    """The files bucket's origins and every configured storage backend's: a document of a knowledge base
    bound to a backend has its download links (the parsed Markdown the page reads) signed by that backend."""
    origins = console.storage_origins(settings.aws_endpoint_url, [settings.files_bucket], settings.region)
    for backend in settings.storage_backends:
        if not backend.keeps_nothing:
            origins += console.backend_origins(
                backend.resolved_endpoint(),
                backend.bucket,
                backend.resolved_path_style(),
                backend.region_or(settings.region),
            )
    return origins


@operation("The browser console", "console", auth=False, api=False)
def console_page(settings: Settings, request: Request | None) -> Response:
    path = (request.context or {}).get("path") if request is not None else None
    return console.serve("index.html", _connect_origins(settings), path if isinstance(path, str) else None)


@operation("One of the console's static files", "console", auth=False, api=False)
def console_asset(settings: Settings, request: Request | None, asset: str) -> Response:
    return console.serve(asset, _connect_origins(settings))
