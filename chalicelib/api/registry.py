"""The API's operation registry and the helpers every operation uses: each operation is registered with its
body and query models (from which `openapi.build_document` generates the OpenAPI document) and turns every
failure into WeKnora's envelope: an AppError with its status and stable code; anything else is our fault
and a 500 without internals (the traceback goes to the log)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from chalice import Response
from chalice.app import Request
from pydantic import BaseModel

from chalicelib import commands
from chalicelib.api.http import api_key, error_response, json_body
from chalicelib.commands import validate
from chalicelib.domain.api_keys import Scope
from chalicelib.domain.errors import AppError, Forbidden, ServiceUnavailable
from chalicelib.domain.types import Tenant
from chalicelib.observability import logger
from chalicelib.operations import tenants
from chalicelib.ports import Dependencies, IndexUnavailable
from chalicelib.ports.index import IndexRefused
from chalicelib.services import ownership
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
    #: the key scope the route needs, when not the one its HTTP method implies (see `required_scope`)
    scope: Scope | None = None
    #: part of the API (in the OpenAPI document); False for the console's static files under /console/
    api: bool = True
    #: the success answer's `data` (a model in components/schemas), where the document describes it
    response: type[BaseModel] | None = None
    #: further answers (status -> description), each in the error envelope
    errors: tuple[tuple[int, str], ...] = ()

    def required_scope(self, method: str) -> Scope:
        """The one rule: a GET reads, any other method writes, unless the registration says otherwise (a
        search is a POST that reads; the tenant's settings and shares need `admin`)."""
        if self.scope is not None:
            return self.scope
        return Scope.READ if method.upper() in ("GET", "HEAD") else Scope.WRITE


#: view name (the app.py function and this module's function share it) -> what OpenAPI says about it
OPERATIONS: dict[str, Operation] = {}
#: the operation the current request runs (set by the registry's wrapper)
_CURRENT: ContextVar[Operation | None] = ContextVar("weknora_operation", default=None)


def operation(summary: str, tag: str, **kwargs: Any) -> Callable[[R], R]:
    def register(fn: R) -> R:
        op = OPERATIONS[fn.__name__] = Operation(summary, tag, **kwargs)

        @functools.wraps(fn)
        def call(*args: Any, **kw: Any) -> Response:
            current, access = _CURRENT.set(op), ownership.begin_request()
            try:
                return fn(*args, **kw)
            except AppError as error:
                return error_response(error)
            except IndexUnavailable as error:  # a cluster that is down or throttling: the caller retries
                logger.warning("index unavailable", extra={"route": fn.__name__, "error": str(error)})
                return error_response(
                    ServiceUnavailable(
                        "the search index is not answering; try again", code="index_unavailable"
                    )
                )
            except IndexRefused as error:  # the cluster refused the call (its credentials, a bad mapping)
                logger.error("index refused", extra={"route": fn.__name__, "error": str(error)})
                return error_response(
                    ServiceUnavailable("the search index refused the call", code="index_refused")
                )
            except Exception:
                logger.exception("unhandled error", extra={"route": fn.__name__})
                return error_response(AppError("internal error", code="internal_error"))
            finally:
                ownership.end_request(access)
                _CURRENT.reset(current)

        return call  # type: ignore[return-value]

    return register


def caller_tenant(deps: Dependencies, request: Request | None) -> Tenant:
    """The key's tenant, once the key's scope covers the route's (else 403 insufficient_scope); the key's
    knowledge-base limits and the route's scope then bound every ownership check of the request."""
    http = present_request(request)
    tenant, key = tenants.authenticate_key(deps, api_key(http))
    tenants.count_request(deps, tenant)  # every request of a valid key counts, whatever it is allowed
    op = _CURRENT.get()
    required = op.required_scope(http.method) if op is not None else Scope.ADMIN
    scope = key.scope if key is not None else Scope.ADMIN
    if not scope.covers(required):
        raise Forbidden(
            f"this API key's scope is {scope.value}; the route needs {required.value}",
            code="insufficient_scope",
        )
    kb_ids = frozenset(key.kb_ids) if key is not None and key.kb_ids is not None else None
    key_hash = key.key_hash if key is not None else tenant.api_key_hash
    ownership.grant(ownership.Access(tenant.id, required, kb_ids, key_hash))
    if required is Scope.ADMIN and "kb_id" not in (http.uri_params or {}):
        ownership.require_whole_tenant()  # the tenant itself changes: not for a key limited to some KBs
    return tenant


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
