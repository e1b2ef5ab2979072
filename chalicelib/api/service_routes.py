"""The service's own routes, which hold no tenant data and need no key: health, the OpenAPI document,
the interactive docs and every path's CORS preflight."""

from __future__ import annotations

from typing import Any

from chalice import Response
from chalice.app import Request

from chalicelib.api import docs, http
from chalicelib.api.http import ok
from chalicelib.api.openapi import build_document
from chalicelib.api.registry import operation, present_request
from chalicelib.ports import Dependencies
from chalicelib.settings import app_version


@operation(
    "Liveness and readiness: version and whether the table, queues and bucket answer", "service", auth=False
)
def health(deps: Dependencies, request: Request | None) -> Response:
    checks = deps.health.probe()
    healthy = all(checks.values())
    return ok(
        {"status": "ok" if healthy else "degraded", "version": app_version(), "checks": checks},
        200 if healthy else 503,
    )


@operation("This OpenAPI document", "service", auth=False)
def openapi_document(app: Any) -> Response:
    return Response(body=build_document(app), status_code=200, headers={"Content-Type": "application/json"})


def cors_preflight(deps: Dependencies, app: Any) -> Response:
    """OPTIONS on any path (not in the OpenAPI document: it is the browser's, not the API's)."""
    request = app.current_request
    methods = list(app.routes.get(request.context.get("resourcePath", ""), {}))
    return http.with_cors(
        request, http.preflight(request, methods, deps.settings.cors_origins), deps.settings.cors_origins
    )


@operation("Interactive API docs (Swagger UI on this OpenAPI document)", "service", auth=False)
def api_docs(request: Request | None) -> Response:
    return docs.docs_page(present_request(request).context)


@operation("A file of the interactive API docs", "service", auth=False)
def api_docs_asset(request: Request | None, asset: str) -> Response:
    return docs.docs_asset(asset)
