"""The API's operation registry and the helpers every operation uses: each operation is registered with its
body and query models (from which `openapi.build_document` generates the OpenAPI document) and turns every
failure into WeKnora's envelope: an AppError with its status and stable code; anything else is our fault
and a 500 without internals (the traceback goes to the log)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from chalice import Response
from chalice.app import Request
from pydantic import BaseModel

from chalicelib import commands
from chalicelib.api.http import api_key, error_response, json_body
from chalicelib.commands import validate
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Tenant
from chalicelib.observability import logger
from chalicelib.operations import tenants
from chalicelib.ports import Dependencies
from chalicelib.services.offered import check_models

R = TypeVar("R", bound=Callable[..., Response])


@dataclass(frozen=True)
class Operation:
    summary: str
    tag: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    status: int = 200
    auth: bool = True
    multipart: bool = False
    #: behind the operator key (X-Operator-Key) instead of a tenant's API key
    operator: bool = False


#: view name (the app.py function and this module's function share it) -> what OpenAPI says about it
OPERATIONS: dict[str, Operation] = {}


def operation(summary: str, tag: str, **kwargs: Any) -> Callable[[R], R]:
    def register(fn: R) -> R:
        OPERATIONS[fn.__name__] = Operation(summary, tag, **kwargs)

        @functools.wraps(fn)
        def call(*args: Any, **kw: Any) -> Response:
            try:
                return fn(*args, **kw)
            except AppError as error:
                return error_response(error)
            except Exception:
                logger.exception("unhandled error", extra={"route": fn.__name__})
                return error_response(AppError("internal error", code="internal_error"))

        return call  # type: ignore[return-value]

    return register


def caller_tenant(deps: Dependencies, request: Request | None) -> Tenant:
    return tenants.authenticate(deps, api_key(present_request(request)))


def present_request(request: Request | None) -> Request:
    if request is None:  # Chalice sets current_request for every HTTP invocation
        raise AppError("no current request", code="internal_error")
    return request


def validated_body(deps: Dependencies, request: Request | None, model: type[commands.B]) -> commands.B:
    return offered_models_only(
        deps, validate(model, json_body(present_request(request), deps.settings.api_max_body))
    )


def offered_models_only(deps: Dependencies, body: commands.B) -> commands.B:
    """Every model a body names (a knowledge base's, an upload's or a reparse's process_config) must be one
    the operator offers: one catalog check for every route, before any operation runs."""
    for kind, name in commands.named_models(body):
        check_models(deps.settings, **{kind: name})
    return body
