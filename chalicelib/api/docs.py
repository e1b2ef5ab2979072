"""The interactive API docs (`GET /api/v1/docs`): Swagger UI, vendored from its package with its licence
(scripts/vendor_swagger_ui.py), served by the API itself with a strict Content-Security-Policy, on the
served OpenAPI document. Nothing is fetched from a CDN; the page has no inline script."""

from __future__ import annotations

import functools
import html
from importlib import resources
from typing import Any

from chalice import Response

from chalicelib.domain.errors import NotFound

#: the files the page loads, and their types (nothing else under /docs/ is served)
ASSETS = {
    "swagger-ui-bundle.js": ("swagger-ui", "text/javascript; charset=utf-8"),
    "swagger-ui.css": ("swagger-ui", "text/css; charset=utf-8"),
    "LICENSE": ("swagger-ui", "text/plain; charset=utf-8"),
    "init.js": ("docs", "text/javascript; charset=utf-8"),
}
#: Swagger UI sets style attributes from script, hence 'unsafe-inline' for styles only
DOCS_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>weknora-ingest API</title>
<link rel="stylesheet" href="{base}docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui" data-openapi="{base}openapi.json"></div>
<script src="{base}docs/swagger-ui-bundle.js"></script>
<script src="{base}docs/init.js"></script>
</body>
</html>
"""


def api_base(context: dict[str, Any] | None, route_suffix: str) -> str:
    """The path the API's version prefix is served under, stage included on AWS (`/dev/api/v1/`), from the
    request's own path with `route_suffix` (the route's part after the prefix) taken off."""
    path = str((context or {}).get("path") or "")
    if path.endswith("/"):
        path = path[:-1]
    return path[: -len(route_suffix)] if route_suffix and path.endswith(route_suffix) else "/api/v1/"


def docs_page(context: dict[str, Any] | None) -> Response:
    body = _PAGE.format(base=html.escape(api_base(context, "docs"), quote=True))
    return Response(
        body=body, status_code=200, headers={"Content-Type": "text/html; charset=utf-8", **SECURITY_HEADERS}
    )


def docs_asset(name: str) -> Response:
    if name not in ASSETS:
        raise NotFound("no such file of the API docs", code="asset_not_found")
    folder, content_type = ASSETS[name]
    return Response(
        body=_read(folder, name),
        status_code=200,
        headers={"Content-Type": content_type, "Cache-Control": "public, max-age=86400", **SECURITY_HEADERS},
    )


@functools.cache
def _read(folder: str, name: str) -> str:
    return (resources.files("chalicelib.api") / "static" / folder / name).read_text(encoding="utf-8")
