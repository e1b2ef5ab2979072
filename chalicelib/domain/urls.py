"""URLs as shown to people: credentials a user put in a URL are never echoed in titles, rows or errors."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_credentials(url: str) -> str:
    """`https://user:secret@host/p` → `https://***@host/p`; anything unparsable is returned unchanged."""
    if "@" not in url:
        return url
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return url
    if not (parts.username or parts.password) or host is None:
        return url
    netloc = f"***@{f'[{host}]' if ':' in host else host}" + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
