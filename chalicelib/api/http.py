"""HTTP plumbing: WeKnora's envelope, the API key, body limits, JSON and multipart bodies, query values."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from chalice import Response
from chalice.app import Request, handle_extra_types

from chalicelib.domain import strict_json
from chalicelib.domain.charsets import encodable, text_codec
from chalicelib.domain.errors import AppError, BadRequest, PayloadTooLarge
from chalicelib.domain.request_limits import TenantRateLimited

#: every JSON answer: tenant data is never kept by a browser's or a proxy's cache (a shared machine, a key
#: signed out), and never read as anything but JSON
JSON_HEADERS: dict[str, str | list[str]] = {
    "Content-Type": "application/json",
    "Cache-Control": "no-store",
    "X-Content-Type-Options": "nosniff",
}
#: deeper JSON than this is never a legitimate body here; the parser itself would hit its recursion limit
MAX_JSON_DEPTH = 64


def ok(data: Any, status: int = 200, message: str | None = None) -> Response:
    body: dict[str, Any] = {"success": True, "data": data}
    if message:
        body["message"] = message
    return Response(body=body, status_code=status, headers=dict(JSON_HEADERS))


def ok_page(items: list[Any], next_cursor: str | None) -> Response:
    """A page of a listing whose `data` is the list older clients read: `next_cursor` (None on the last page)
    and `has_more` beside it."""
    response = ok(items)
    response.body.update(next_cursor=next_cursor, has_more=next_cursor is not None)
    return response


def error_response(error: AppError) -> Response:
    detail: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.details is not None:
        detail["details"] = error.details
    body: dict[str, Any] = {"success": False, "error": detail}
    if error.data is not None:
        body["data"] = error.data  # WeKnora's 409 carries the existing row
    headers = dict(JSON_HEADERS)
    if isinstance(error, TenantRateLimited):
        headers["Retry-After"] = str(error.retry_after)
    return Response(body=body, status_code=error.status, headers=headers)


#: Chalice's own answers (a wrong method, an unsupported media type, ...) and what they are in the envelope
_CHALICE_CODES = {
    "MethodNotAllowedError": ("method_not_allowed", "this route does not take the {method} method"),
    "UnsupportedMediaType": ("unsupported_media_type", "this route does not take a {content_type} body"),
    "BadRequest": ("bad_request", "send an Accept header that matches the answer's binary type"),
    "InternalServerError": ("internal_error", "internal error"),
}
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")
#: a media type as RFC 6838 names one (`type/subtype`, each at most 127 characters of a restricted set)
_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/[a-z0-9][a-z0-9!#$&^_.+-]{0,126}")


def _media_type(content_type: str) -> str:
    """A Content-Type header's media type, to name in an answer: the header is the client's text (control
    characters, markup, any length), so only a well-formed media type is repeated, never its parameters."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type if _MEDIA_TYPE.fullmatch(media_type) else "malformed media type"


def in_envelope(request: Request | None, response: Response) -> Response:
    """Every answer in one shape: Chalice's own errors (`{"Code", "Message"}`) become the API's envelope
    with a lower-case code, and JSON goes out as UTF-8 (CJK text unescaped), compact."""
    body = response.body
    if isinstance(body, dict) and set(body) == {"Code", "Message"} and response.status_code >= 400:
        headers: Any = request.headers if request is not None and request.headers else {}
        known = _CHALICE_CODES.get(str(body["Code"]))
        code = known[0] if known else _CAMEL.sub("_", str(body["Code"])).lower()
        message = (
            known[1].format(
                method=request.method if request is not None else "",
                content_type=_media_type(str(headers.get("content-type", "application/json"))),
            )
            if known
            else str(body["Message"])
        )
        body = {"success": False, "error": {"code": code, "message": message}}
        response.headers = {**response.headers, **JSON_HEADERS}
    content_type = str(response.headers.get("Content-Type", response.headers.get("content-type", "")))
    if isinstance(body, dict | list) and content_type.startswith("application/json"):
        response.body = json.dumps(
            body, ensure_ascii=False, separators=(",", ":"), default=handle_extra_types
        )
    return response


#: what a browser page of an allowed origin may send and read (CORS)
CORS_ALLOW_HEADERS = "Content-Type, X-API-Key, X-Operator-Key"
CORS_EXPOSE_HEADERS = "Content-Length, Content-Type, Retry-After"
CORS_MAX_AGE_SECONDS = 600


def with_cors(request: Request | None, response: Response, origins: tuple[str, ...]) -> Response:
    """Lets the request's origin read the answer when it is one of the configured origins (and says that
    the answer varies by origin); any other origin gets no CORS header, so its browser refuses."""
    headers: Any = request.headers if request is not None and request.headers else {}
    origin = str(headers.get("origin", ""))
    if origins and origin in origins:
        response.headers = {
            **response.headers,
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": CORS_EXPOSE_HEADERS,
            "Vary": "Origin",
        }
    return response


def preflight(request: Request | None, methods: list[str], origins: tuple[str, ...]) -> Response:
    """A browser's CORS preflight (OPTIONS): the path's methods and the headers the API takes, to an allowed
    origin; to any other, nothing it can use."""
    headers: dict[str, str | list[str]] = {}
    if origins:
        headers = {
            "Access-Control-Allow-Methods": ", ".join(sorted(m for m in methods if m != "OPTIONS")),
            "Access-Control-Allow-Headers": CORS_ALLOW_HEADERS,
            "Access-Control-Max-Age": str(CORS_MAX_AGE_SECONDS),
        }
    return Response(body="", status_code=204, headers=headers)


def envelope_middleware(
    request: Request | None, get_response: Callable[[Any], Response], cors_origins: tuple[str, ...] = ()
) -> Response:
    return with_cors(request, in_envelope(request, get_response(request)), cors_origins)


def api_key(request: Request) -> str:
    headers: Any = request.headers or {}
    return str(headers.get("x-api-key", ""))


def _body_bytes(request: Request) -> bytes:
    raw = request.raw_body
    return raw if isinstance(raw, bytes) else raw.encode()


def raw_body(request: Request, limit: int) -> bytes:
    """An upload's body: one too large for the API is sent to S3 instead (413 says how)."""
    data = _body_bytes(request)
    if len(data) > limit:
        raise PayloadTooLarge(
            f"request body is {len(data)} bytes; bodies over {limit} bytes exceed the API payload limit: "
            "POST /knowledge-bases/{id}/knowledge/upload-url and PUT the file to the returned URL",
            code="use_presigned_upload",
        )
    return data


def json_body(request: Request, limit: int) -> dict[str, Any]:
    """The body as a JSON object (an empty body is `{}`)."""
    data = _body_bytes(request)
    if len(data) > limit:  # no file to upload elsewhere: the upload advice would mislead
        raise PayloadTooLarge(
            f"request body is {len(data)} bytes; the API takes bodies of at most {limit} bytes",
            code="body_too_large",
        )
    if not data.strip():
        return {}
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest("the body must be UTF-8 JSON", code="invalid_json") from error
    if strict_json.nests_deeper_than(text, MAX_JSON_DEPTH):
        raise BadRequest(f"the body is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")
    try:
        body = strict_json.loads(text)
    except strict_json.DuplicateKey as error:  # which value counts is undefined: neither is guessed at
        raise BadRequest(f"the body is ambiguous: {error}", code="invalid_json") from error
    except ValueError as error:
        raise BadRequest("the body must be JSON", code="invalid_json") from error
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_json")
    try:  # JSON can spell lone surrogates (\ud800) that no storage or model can take
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as error:
        raise BadRequest("the body contains unpaired surrogate characters", code="invalid_json") from error
    return body


class MultipartForm:
    def __init__(self, fields: dict[str, str], files: dict[str, tuple[str, bytes]]):
        self.fields = fields
        self.files = files


class _Part:
    def __init__(self) -> None:
        self.headers: dict[str, bytes] = {}
        self.data = bytearray()


def _extended_file_name(disposition: bytes) -> str | None:
    """A part's `filename*` (RFC 5987 encoding), which RFC 6266 prefers over `filename` and python-multipart
    does not read: .NET's HttpClient sends a non-ASCII name only there (its `filename` is then a MIME
    encoded-word, `=?utf-8?B?…?=`, which has no extension)."""
    if b"filename*" not in disposition.lower():
        return None
    import email.message  # only for the rare part that has one: not on the API's cold start
    import email.utils

    header = email.message.Message()
    header["content-disposition"] = disposition.decode("latin-1")
    for param, value in header.get_params(header="content-disposition") or []:
        if param == "filename" and isinstance(value, tuple):  # how the email package hands back `name*`
            try:
                return email.utils.collapse_rfc2231_value(value, errors="replace", fallback_charset="utf-8")
            # a codec that takes no "replace" (idna) or refuses the bytes; a name the lookup refuses (a NUL)
            except (UnicodeError, ValueError) as error:
                raise BadRequest(
                    "a file part's filename* cannot be decoded in its charset", code="invalid_multipart"
                ) from error
    return None


def _text(data: bytes, charset: str, what: str) -> str:
    """A part's text in its charset, which must name a text charset (`domain.charsets`)."""
    codec = text_codec(charset)
    if codec is None:
        raise BadRequest(f"{what} has an unknown charset", code="invalid_multipart")
    try:
        text = data.decode(codec, errors="replace")
    except UnicodeError as error:  # not expected of a text charset with "replace"; a 400 all the same
        raise BadRequest(f"{what} cannot be decoded in its charset", code="invalid_multipart") from error
    if not encodable(text):
        raise BadRequest(f"{what} holds unpaired surrogate characters", code="invalid_multipart")
    return text


def parse_multipart(content_type: str, body: bytes) -> MultipartForm:
    """A multipart/form-data body, parsed by python-multipart. File bytes are kept exactly as sent,
    whatever Content-Type or Content-Transfer-Encoding a part declares (`message/rfc822`,
    `multipart/related`, base64, ...): an uploaded file is data, never something to interpret."""
    from python_multipart.exceptions import MultipartParseError
    from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

    kind, params = parse_options_header(content_type)
    boundary = params.get(b"boundary", b"")
    if kind.lower() != b"multipart/form-data" or not boundary:
        raise BadRequest("expected multipart/form-data with a boundary", code="invalid_multipart")
    parts: list[_Part] = []
    header_name = bytearray()
    header_value = bytearray()

    def on_part_begin() -> None:
        parts.append(_Part())

    def on_header_field(data: bytes, start: int, end: int) -> None:
        header_name.extend(data[start:end])

    def on_header_value(data: bytes, start: int, end: int) -> None:
        header_value.extend(data[start:end])

    def on_header_end() -> None:
        parts[-1].headers[bytes(header_name).decode("latin-1").lower()] = bytes(header_value)
        header_name.clear()
        header_value.clear()

    def on_part_data(data: bytes, start: int, end: int) -> None:
        parts[-1].data.extend(data[start:end])

    callbacks: Any = {
        "on_part_begin": on_part_begin,
        "on_header_field": on_header_field,
        "on_header_value": on_header_value,
        "on_header_end": on_header_end,
        "on_part_data": on_part_data,
    }
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(body)
        parser.finalize()
    except (MultipartParseError, ValueError) as error:
        raise BadRequest("could not parse the multipart body", code="invalid_multipart") from error
    if parser.state != MultipartState.END:  # the closing boundary never came: the body was cut short
        raise BadRequest("the multipart body is truncated", code="invalid_multipart")
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}
    for part in parts:
        raw_disposition = part.headers.get("content-disposition", b"")
        _, disposition = parse_options_header(raw_disposition)
        name = disposition.get(b"name", b"").decode("utf-8", "replace")
        if not name:
            continue
        if name in fields or name in files:  # one would silently replace the other: an upload lost
            raise BadRequest(f"the form has more than one {name!r} part", code="duplicate_form_part")
        extended = _extended_file_name(raw_disposition)
        if extended is not None or b"filename" in disposition:
            plain = disposition.get(b"filename", b"").decode("utf-8", "replace")
            if extended is not None and not encodable(extended):  # unicode_escape spells lone surrogates
                raise BadRequest(
                    f"part {name!r}'s filename* holds unpaired surrogate characters", code="invalid_multipart"
                )
            files[name] = (plain if extended is None else extended, bytes(part.data))
            continue
        _, type_params = parse_options_header(part.headers.get("content-type", b"text/plain"))
        charset = type_params.get(b"charset", b"utf-8").decode("latin-1")
        fields[name] = _text(bytes(part.data), charset, f"form field {name!r}")
    return MultipartForm(fields, files)


def query(request: Request) -> dict[str, str]:
    """The query string's parameters, each given at most once: no route takes a list, and a repeated one
    (`limit=1&limit=500`) would otherwise count with its last value, silently."""
    params = request.query_params
    if params is None:
        return {}
    values: dict[str, str] = {}
    for name in params:
        given = params.getlist(name)
        if len(given) > 1:
            shown = repr(name) if len(name) <= 64 else repr(name[:64]) + "…"  # repr: no control characters
            raise BadRequest(
                f"query parameter {shown} is given {len(given)} times: give it once", code="invalid_query"
            )
        values[str(name)] = str(given[0]) if given else ""
    return values


#: the base of `make run` (chalice local), for a request that names no Host
LOCAL_BASE_URL = "http://127.0.0.1:8000"


def public_base_url(configured: str, request: Request) -> str:
    """The API's public base URL, which download links start with: the configured one
    (WEKNORA_PUBLIC_BASE_URL: a custom domain, a proxy) or else the request's own, from its Host and
    X-Forwarded-Proto; on API Gateway's own domain (`*.execute-api.*.amazonaws.com`) with the stage
    after it, as its URLs have."""
    if configured:
        return configured.rstrip("/")
    headers: Any = request.headers or {}
    host = str(headers.get("host", "")).strip()
    if not host or any(ch in host for ch in "/\\@ \t\r\n?#"):
        return LOCAL_BASE_URL
    on_gateway = ".execute-api." in host and host.endswith(".amazonaws.com")
    proto = str(headers.get("x-forwarded-proto", "")).split(",")[0].strip().lower()
    scheme = proto if proto in ("http", "https") else ("https" if on_gateway else "http")
    stage = str((request.context or {}).get("stage", "")) if on_gateway else ""
    return f"{scheme}://{host}" + (f"/{stage}" if stage and stage.isidentifier() else "")
