"""URL import: a link to an importable file is downloaded as that file; any other page becomes its main
content as Markdown, titled by the page (WeKnora's isFileURL routing + trafilatura extraction)."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit

from chalicelib.domain.errors import BadRequest, ServiceUnavailable
from chalicelib.domain.filetypes import IMPORTABLE_EXTENSIONS, file_type_of, is_importable
from chalicelib.domain.storage_keys import safe_file_name
from chalicelib.net.client import (
    DEFAULT_MAX_BYTES,
    DEFAULT_TIMEOUT,
    FetchError,
    FetchResponse,
    SafeHttpClient,
)
from chalicelib.net.ssrf import AllowList, HostUnresolved, Resolver, URLBlocked, validate_url
from chalicelib.ports import FetchedDocument

PAGE_TYPES = frozenset({"html", "htm", "mhtml"})
CONTENT_TYPE_TO_EXT = {
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
    "application/vnd.ms-excel": "xls",
    "application/epub+zip": "epub",
    "text/csv": "csv",
    "application/json": "json",
    "text/markdown": "md",
    "text/plain": "txt",
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "audio/mpeg": "mp3",
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/flac": "flac",
    "audio/ogg": "ogg",
    "audio/mp4": "m4a",
}


def url_file_type(url: str) -> str:
    """The importable extension of the URL's path ('' when it names no importable file)."""
    path = unquote(urlsplit(url).path)
    ext = posixpath.splitext(path)[1].lower().lstrip(".")
    return ext if ext in IMPORTABLE_EXTENSIONS else ""


def is_file_url(url: str) -> bool:
    file_type = url_file_type(url)
    return bool(file_type) and file_type not in PAGE_TYPES


def _file_name(url: str, file_type: str) -> str:
    base = posixpath.basename(unquote(urlsplit(url).path)) or urlsplit(url).hostname or "download"
    base = re.sub(r"[\x00-\x1f/\\]+", "_", base)[:200]
    if not base.lower().endswith("." + file_type):
        base = f"{posixpath.splitext(base)[0] or 'download'}.{file_type}"
    return base


def fetch_url_document(
    url: str,
    allow_list: AllowList | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    timeout: float = DEFAULT_TIMEOUT,
    *,
    resolver: Resolver | None = None,
    named_type: str = "",
    named_file: str = "",
) -> tuple[str, str, bytes, str]:
    """(file_name, file_type, data, title). `named_type` / `named_file`: what the tenant named the download;
    a named type decides (the parser checks the bytes against it, as an upload's), with neither the URL's
    extension, the Content-Type nor the bytes deciding. Raises FetchError (permanent for
    blocked/oversize/4xx)."""
    client = SafeHttpClient(allow_list, max_bytes=max_bytes, timeout=timeout, resolver=resolver)
    resp = client.get(url)
    if not resp.body:
        raise FetchError("the URL returned an empty document", permanent=True)
    named_type = (named_type or file_type_of(named_file)).lower().lstrip(".")
    if is_importable(named_type):  # WeKnora's download mode: the file is what the tenant said it is
        name = safe_file_name(named_file) if named_file else _file_name(resp.url, named_type)
        return name, named_type, resp.body, ""
    file_type = url_file_type(resp.url) if is_file_url(resp.url) else ""
    if not file_type:
        file_type = CONTENT_TYPE_TO_EXT.get(resp.content_type, "")
    served = _binary_type(resp.body, file_type)
    if served is not None:  # a download served as octet-stream (or as text/html): its bytes say what it is
        name = _file_name(resp.url, served) if served else "download"
        return name, served, resp.body, ""
    if file_type and file_type not in PAGE_TYPES:
        return _file_name(resp.url, file_type), file_type, resp.body, ""
    return _page_document(resp)


def _binary_type(body: bytes, named: str) -> str | None:
    """The type of a binary document the URL named as nothing, or as text or a page: `pdf`, `docx`, `png`…,
    '' for binary data of no importable type (refused as unsupported, never read as a page), None when the
    bytes are text (the named type stands). A type named as binary stands too: the parser checks it."""
    import io
    import zipfile

    from chalicelib.parsers.base import (
        TEXT_TYPES,
        ZIP_DIRECTORY_ERRORS,
        image_kind,
        sniff,
        zip_office_kind,
    )
    from chalicelib.parsers.magic import audio_kind, ole_kind

    if named and named not in TEXT_TYPES:
        return None
    family = sniff(body)
    if family in ("text", "empty"):
        return None
    if family == "pdf":  # `%PDF-` near the start; a page that merely mentions it starts with markup
        return None if body.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<") else "pdf"
    if family == "zip":
        try:
            with zipfile.ZipFile(io.BytesIO(body)) as archive:
                return zip_office_kind(archive)
        except ZIP_DIRECTORY_ERRORS:
            return ""
    image = image_kind(body) if family == "image" else None
    kinds = {"image": image[0] if image else "", "audio": audio_kind(body), "ole": ole_kind(body)}
    kind = kinds.get(family, "")
    if kind and is_importable(kind):
        return kind
    # other binary: a page or nothing named is refused; a named text type is the parser's call (it says so)
    return "" if not named or named in PAGE_TYPES else None


def _page_document(resp: FetchResponse) -> tuple[str, str, bytes, str]:
    from chalicelib.domain.errors import PermanentStageError
    from chalicelib.domain.storage_keys import one_line
    from chalicelib.parsers.base import Limits
    from chalicelib.parsers.guards import HtmlDepth
    from chalicelib.parsers.html import decode_html, html_to_markdown, page_title

    try:  # before lxml (trafilatura) or lexbor build a tree: deep nesting costs minutes of CPU in both
        HtmlDepth(Limits().max_html_depth).feed(resp.body)
    except PermanentStageError as error:
        raise FetchError(error.message, permanent=True) from error
    html = decode_html(resp.body, resp.charset)
    # the server's words, shown as the document's title (its spans, its heading): one line of printable
    # text, as a title a tenant sends must be (no ESC sequence, bidirectional override, line break)
    title = one_line(page_title(html))
    markdown = ""
    try:
        import trafilatura

        markdown = (
            trafilatura.extract(
                html,
                url=resp.url,
                output_format="markdown",
                include_tables=True,
                include_links=True,
                include_images=True,
                favor_recall=True,
            )
            or ""
        )
    except Exception as error:  # a third-party best-effort extractor: the full-page converter reads the page
        from chalicelib.observability import logger  # Powertools (and botocore): off the API's import path

        logger.warning("trafilatura failed on a page", extra={"error": type(error).__name__})
        markdown = ""
    if len(markdown.strip()) < 40:
        markdown = html_to_markdown(html, base_url=resp.url).markdown
    if not markdown.strip():
        raise FetchError("the page has no readable text", permanent=True)
    title = title or urlsplit(resp.url).hostname or resp.url
    if not markdown.lstrip().startswith("#"):
        markdown = f"# {title}\n\n{markdown.strip()}\n"
    slug = re.sub(r"[^\w.-]+", "-", title, flags=re.UNICODE).strip("-")[:80] or "page"
    return f"{slug}.md", "md", markdown.encode("utf-8"), title


class SafeUrlImporter:
    """The UrlImporter port: the SSRF gate and the pinned-address download, with the operator's allow-list."""

    def __init__(
        self, allow_list: AllowList, *, max_bytes: int = DEFAULT_MAX_BYTES, resolver: Resolver | None = None
    ) -> None:
        self.allow_list = allow_list
        self.max_bytes = max_bytes  # the download stops here (`file_too_large`): WEKNORA_MAX_FILE_SIZE
        self.resolver = resolver

    def check(self, url: str) -> None:
        try:
            validate_url(url, self.allow_list, resolver=self.resolver)
        except HostUnresolved as error:  # a DNS failure (a typo, a private zone), not a forbidden target
            if error.transient:  # the resolver could not answer now: the same URL may work in a moment
                raise ServiceUnavailable(
                    f"could not resolve the URL's host now: {error.reason}; try again", code="dns_unavailable"
                ) from error
            raise BadRequest(f"URL rejected: {error.reason}", code=error.code) from error
        except URLBlocked as error:
            raise BadRequest(f"URL rejected: {error.reason}", code=error.code) from error

    def fetch(self, url: str, *, file_type: str = "", file_name: str = "") -> FetchedDocument:
        file_name, file_type, data, title = fetch_url_document(
            url,
            allow_list=self.allow_list,
            max_bytes=self.max_bytes,
            resolver=self.resolver,
            named_type=file_type,
            named_file=file_name,
        )
        return FetchedDocument(file_name, file_type, data, title)
