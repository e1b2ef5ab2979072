"""The browser console: static files (package data in `static/`) served by the API itself under
`/console/`, locally and under the API's stage on AWS. The files hold no data: the page talks to the public
API with the key the user gives it, so these routes need no key. Every answer carries a strict
Content-Security-Policy (no inline script or style, nothing from another origin but the storage the
presigned links point at), `nosniff` and `no-referrer`."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from urllib.parse import urlsplit

from chalice import Response

STATIC = Path(__file__).parent / "static"
#: the only files served, by suffix: anything else in the folder (or asked for) is a 404
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


@cache
def assets() -> dict[str, tuple[str, str]]:
    """name -> (text, content type) of every servable file, read once per cold start."""
    return {
        path.name: (path.read_text(encoding="utf-8"), CONTENT_TYPES[path.suffix])
        for path in sorted(STATIC.iterdir())
        if path.is_file() and path.suffix in CONTENT_TYPES
    }


def storage_origins(endpoint_url: str, buckets: list[str], region: str) -> list[str]:
    """Where presigned links point (uploads PUT there, the parsed Markdown is read from there): the one
    endpoint locally (moto), the buckets' virtual-host origins on AWS."""
    if endpoint_url:
        parts = urlsplit(endpoint_url)
        return [f"{parts.scheme}://{parts.netloc}"]
    return [
        origin
        for bucket in buckets
        for origin in (f"https://{bucket}.s3.{region}.amazonaws.com", f"https://{bucket}.s3.amazonaws.com")
    ]


#: an origin as a CSP source: scheme, host (an IPv6 literal in brackets) and port, nothing that could end the
#: directive or add a source (a `;`, a space, a `*`), whatever an operator's endpoint or bucket name holds
CSP_ORIGIN = re.compile(
    r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^https?://\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$"
)


def backend_origins(endpoint: str, bucket: str, path_style: bool, region: str) -> list[str]:
    """Where a named storage backend's presigned links point (the console reads a document's parsed Markdown
    from there): its endpoint (path style, and botocore's fallback for a bucket name that cannot be a host
    label), the bucket's virtual host on it, or the bucket's AWS origins when the SDK resolves the endpoint
    (an `s3` backend without one)."""
    if not endpoint:
        return storage_origins("", [bucket], region)
    parts = urlsplit(endpoint)
    origin = f"{parts.scheme}://{parts.netloc}"
    return [origin] if path_style else [f"{parts.scheme}://{bucket}.{parts.netloc}", origin]


def security_headers(connect_origins: list[str]) -> dict[str, str]:
    origins = dict.fromkeys(o for o in connect_origins if CSP_ORIGIN.match(o))
    connect = " ".join(["'self'", *origins])
    return {
        "Content-Security-Policy": (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
            f"connect-src {connect}; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "X-Frame-Options": "DENY",
        "Cache-Control": "no-cache",
    }


def serve(name: str, connect_origins: list[str], request_path: str | None = None) -> Response:
    """One console file; `index.html` for the console's root. `request_path` is the path the browser
    asked for: the root without its trailing slash is redirected to it, so relative URLs resolve under
    `/console/` (the stage prefix included)."""
    headers = security_headers(connect_origins)
    if name == "index.html" and request_path is not None and not request_path.endswith("/"):
        last = request_path.rstrip("/").rsplit("/", 1)[-1] or "console"
        return Response(body="", status_code=308, headers={**headers, "Location": f"{last}/"})
    found = assets().get(name)
    if found is None:
        return Response(
            body="not found\n",
            status_code=404,
            headers={**headers, "Content-Type": "text/plain; charset=utf-8"},
        )
    data, content_type = found
    return Response(body=data, status_code=200, headers={**headers, "Content-Type": content_type})
