"""HTTP plumbing for app.py: the WeKnora envelope, API-key auth, multipart parsing and body limits."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from email.message import Message
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from chalice import Response
from chalice.app import Request

from .bootstrap import Services
from .domain.errors import AppError, BadRequest, PayloadTooLarge, Unauthorized
from .domain.types import Tenant

log = logging.getLogger(__name__)


def ok(data: Any, status: int = 200, message: str | None = None) -> Response:
    body: dict[str, Any] = {"success": True, "data": data}
    if message:
        body["message"] = message
    return Response(body=body, status_code=status, headers={"Content-Type": "application/json"})


def error_response(error: AppError) -> Response:
    body: dict[str, Any] = {"success": False, "error": {"code": error.code, "message": error.message}}
    if error.data is not None:
        # WeKnora's 409 carries the existing row as `data`, with `code` and `message` beside it.
        body.update({"data": error.data, "code": error.code, "message": error.message})
    return Response(body=body, status_code=error.status, headers={"Content-Type": "application/json"})


def endpoint(fn: Callable[..., Response]) -> Callable[..., Response]:
    """Turns AppErrors into envelopes; anything else is our fault and a 500 without internals."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Response:
        try:
            return fn(*args, **kwargs)
        except AppError as error:
            return error_response(error)
        except Exception:
            log.exception("unhandled error in %s", fn.__name__)
            return error_response(AppError("internal error", code="internal_error"))

    return wrapper


def authenticate(svc: Services, request: Request) -> Tenant:
    headers: Any = request.headers or {}
    key = str(headers.get("x-api-key", ""))
    if not key:
        raise Unauthorized("missing X-API-Key header", code="missing_api_key")
    tenant = svc.tenants.by_api_key(key)
    if tenant is None:
        raise Unauthorized("invalid API key", code="invalid_api_key")
    return tenant


def check_body_size(svc: Services, request: Request) -> bytes:
    raw = request.raw_body
    data = raw if isinstance(raw, bytes) else raw.encode()
    if len(data) > svc.settings.api_max_body:
        raise PayloadTooLarge(
            f"request body is {len(data)} bytes; bodies over {svc.settings.api_max_body} bytes exceed the API "
            "payload limit: POST /knowledge-bases/{id}/knowledge/upload-url and PUT the file to the returned URL",
            code="use_presigned_upload",
        )
    return data


def json_body(request: Request) -> dict[str, Any]:
    raw = request.raw_body
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise BadRequest("the body must be JSON", code="invalid_json") from error
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    return body


class MultipartForm:
    def __init__(self, fields: dict[str, str], files: dict[str, tuple[str, bytes]]):
        self.fields = fields
        self.files = files


def parse_multipart(content_type: str, body: bytes) -> MultipartForm:
    if not content_type.lower().startswith("multipart/form-data") or "boundary=" not in content_type:
        raise BadRequest("expected multipart/form-data with a boundary", code="invalid_multipart")
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message: Message = BytesParser(policy=HTTP).parsebytes(head + body)
    if not message.is_multipart():
        raise BadRequest("could not parse the multipart body", code="invalid_multipart")
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for part in message.iter_parts():  # type: ignore[attr-defined]
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        payload = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        if filename is not None:
            files[str(name)] = (str(filename), payload)
        else:
            charset = part.get_content_charset() or "utf-8"
            fields[str(name)] = payload.decode(charset, errors="replace")
    return MultipartForm(fields, files)


def form_bool(value: str | None) -> bool | None:
    if value is None or value == "":
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


def query_int(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    params: Any = request.query_params or {}
    raw = params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as error:
        raise BadRequest(f"{name} must be an integer", code="invalid_query") from error
    if not lo <= value <= hi:
        raise BadRequest(f"{name} must be from {lo} to {hi}", code="invalid_query")
    return value
