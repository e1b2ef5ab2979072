"""URLs as shown to people (credentials a user put in a URL are never echoed in titles, rows or errors), and
URLs read from documents, which may not parse."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit, urlunsplit


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


def host_of(url: str) -> str | None:
    """The URL's host, lower case ("" when it has none); None when it does not parse (`http://[oops/x`:
    urlsplit raises on a bracket it cannot close), which a document may well hold."""
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return None


def joined(base: str, href: str) -> str:
    """`href` resolved against `base`, or as written when either does not parse (a link in a document is
    kept as its author wrote it, never an error)."""
    try:
        return urljoin(base, href)
    except ValueError:
        return href
