"""ImageResolver (WeKnora `D/image_resolver.go`): finds every image a parse left in the Markdown
(data URIs in Markdown and HTML, bare base64 runs, parser refs, remote URLs), drops icons, stores the
rest through `save(data, ext) -> url` once per content, and rewrites the Markdown to the stored URLs."""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from chalicelib.domain.urls import host_of
from chalicelib.net.client import FetchError, SafeHttpClient
from chalicelib.net.ssrf import AllowList
from chalicelib.parsers.base import image_kind, md_image_alt
from chalicelib.ports import ParsedImage, ResolvedImages, StoredImage
from chalicelib.services.deadline import out_of_time, stage_deadline

MAX_IMAGE_BYTES = 10 * 1024 * 1024
MAX_IMAGES_PER_PASS = 30
#: remote downloads a pass may try, successful or not: WeKnora caps saved images only, so a document of
#: thousands of links to a host that never answers held a worker for 15 s each
MAX_REMOTE_FETCHES_PER_PASS = 2 * MAX_IMAGES_PER_PASS
ICON_MAX_SIDE = 64
ICON_UNDECODABLE_BYTES = 512
#: one remote image's whole exchange (redirects included) and the redirects it may take
REMOTE_TIMEOUT_S = 15.0
REMOTE_MAX_REDIRECTS = 5
#: wall time all of a pass's remote downloads may take together; past it (or past the stage's Lambda
#: deadline) the remaining images stay links. 60 fetches of 15 s would be the whole 900 s Lambda; 120 s
#: fits after the longest parse (300 s) and the URL's own download (60 s) with room to store and hand over,
#: and still takes 60 images answered in 2 s each
REMOTE_PASS_BUDGET_S = 120.0

# The patterns below cannot run past the next `[`, `(` or `>` where a later start of the same pattern could
# begin: an unclosed one otherwise scans to the end of the line or text once per start (minutes on a few KB).
_LINKED_IMAGE = re.compile(r"\[(!\[[^\[\]\n]*\]\([^()\n]*\))\]\([^)\n]*\)")
# a whole tag, its src read inside it (_HTML_SRC): a `>` in an attribute value ends the tag here
_HTML_IMG = re.compile(r"<img\b[^>]*+>", re.IGNORECASE)
_HTML_SRC = re.compile(r"\bsrc\s*=\s*([\"'])(.*?)\1", re.IGNORECASE | re.DOTALL)
_HTML_ALT = re.compile(r"\balt\s*=\s*([\"'])(.*?)\1", re.IGNORECASE | re.DOTALL)
_DATA_URI = re.compile(r"data:(image/[\w.+-]+)?(?:;[\w=.-]+)*;base64,([A-Za-z0-9+/=_\-\s]*)", re.IGNORECASE)
_BARE_DATA_URI = re.compile(r"data:image/[\w.+-]+;base64,([A-Za-z0-9+/_-]{100,}={0,2})", re.IGNORECASE)
_BARE_BASE64 = re.compile(r"base64,([A-Za-z0-9+/]{200,}={0,2})")
_EXT_BY_MIME = {
    "image/png": "png",
    "image/jpeg": "jpg",
    "image/gif": "gif",
    "image/webp": "webp",
    "image/bmp": "bmp",
    "image/tiff": "tiff",
}
SaveFn = Callable[[bytes, str], str]


def remote_image_client(allow_list: AllowList) -> SafeHttpClient:
    """The SSRF-safe client for a document's remote images, with the image limits."""
    return SafeHttpClient(
        allow_list, max_bytes=MAX_IMAGE_BYTES, timeout=REMOTE_TIMEOUT_S, max_redirects=REMOTE_MAX_REDIRECTS
    )


@dataclass
class MdImage:
    start: int
    end: int
    alt: str
    dest: str
    title: str


def decode_base64(payload: str) -> bytes | None:
    """Lenient: whitespace ignored, padding repaired, URL-safe alphabet accepted."""
    text = re.sub(r"\s+", "", payload)
    if not text:
        return None
    text += "=" * (-len(text) % 4)
    try:
        if "-" in text or "_" in text:
            return base64.urlsafe_b64decode(text)
        return base64.b64decode(text)
    except (binascii.Error, ValueError):
        try:
            return base64.b64decode(text.rstrip("=")[: len(text.rstrip("=")) // 4 * 4])
        except (binascii.Error, ValueError):
            return None


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\n":
        i += 1
    return i


#: characters iter_markdown_images may read beyond the text's own length: a start that is no image (`![`
#: never closed, a destination never ended) is read to the end of its paragraph or line, so thousands of
#: them in one line read it thousands of times; past the budget the rest is left as it is
MARKDOWN_SCAN_EXTRA = 1_000_000


def iter_markdown_images(text: str) -> Iterator[MdImage]:
    """CommonMark-style inline images: `<dest>`, balanced parentheses, backslash escapes, titles."""
    pos = 0
    budget = len(text) + MARKDOWN_SCAN_EXTRA
    while budget > 0:
        start = text.find("![", pos)
        if start < 0:
            return
        image, reached = _markdown_image_at(text, start)
        budget -= reached - start
        if image is None:
            pos = start + 2
            continue
        yield image
        pos = image.end


def _markdown_image_at(text: str, start: int) -> tuple[MdImage | None, int]:
    """The image whose `![` is at `start` (None when there is none) and how far the text was read."""
    n = len(text)
    i = start + 2
    depth = 1
    while i < n and depth:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "\n" and i + 1 < n and text[i + 1] == "\n":
            break
        i += 1
    if depth or i >= n or text[i] != "(":
        return None, i
    alt = text[start + 2 : i - 1]
    i = _skip_ws(text, i + 1)
    dest_chars: list[str] = []
    if text.startswith("data:", i):
        m = _DATA_URI.match(text, i)
        if m:
            dest_chars.append(m.group(0).rstrip())
            i = m.end()
            while i > 0 and text[i - 1] in " \t\n" and i - 1 >= m.start():
                i -= 1
    elif i < n and text[i] == "<":
        close = text.find(">", i + 1)
        if close < 0 or "\n" in text[i + 1 : close]:
            return None, n if close < 0 else close
        dest_chars.append(text[i + 1 : close])
        i = close + 1
    else:
        parens = 0
        while i < n:
            ch = text[i]
            if ch == "\\" and i + 1 < n and text[i + 1] in "()\\ ":
                dest_chars.append(text[i + 1])
                i += 2
                continue
            if ch in " \t\n":
                break
            if ch == "(":
                parens += 1
            elif ch == ")":
                if parens == 0:
                    break
                parens -= 1
            dest_chars.append(ch)
            i += 1
    i = _skip_ws(text, i)
    title = ""
    if i < n and text[i] in "\"'(":
        closer = ")" if text[i] == "(" else text[i]
        close = text.find(closer, i + 1)
        if close < 0:
            return None, n
        title = text[i + 1 : close]
        i = _skip_ws(text, close + 1)
    if i >= n or text[i] != ")":
        return None, i
    return MdImage(start, i + 1, alt, "".join(dest_chars), title), i + 1


def image_size(data: bytes) -> tuple[int, int] | None:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as img:
            return int(img.width), int(img.height)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError):
        return None


class ImageResolver:
    def __init__(
        self,
        save: SaveFn,
        *,
        http: SafeHttpClient | None = None,
        fetch_remote: bool = True,
        max_bytes: int = MAX_IMAGE_BYTES,
        max_images: int = MAX_IMAGES_PER_PASS,
        keep_url_hosts: Sequence[str] = (),
        remote_budget_s: float = REMOTE_PASS_BUDGET_S,
    ) -> None:
        self.save = save
        self.http = http
        self.fetch_remote = fetch_remote
        self.max_bytes = max_bytes
        self.max_images = max_images
        self.remote_budget_s = remote_budget_s
        self.keep_url_hosts = tuple(h.lower() for h in keep_url_hosts)
        self.saved_by_hash: dict[str, str] = {}  # content hash → URL, kept across passes

    def resolve(
        self, markdown: str, images: Sequence[ParsedImage] = (), *, remote: bool = True
    ) -> ResolvedImages:
        """``remote=False``: http(s) image links stay as they are (the source's text, not its markup: a PDF
        that shows ``<img src=...>`` as text keeps that text)."""
        run = _Run(self, images, remote=remote and self.fetch_remote and self.http is not None)
        text = _LINKED_IMAGE.sub(lambda m: m.group(1), markdown)
        text = run.markdown_images(text, data_only=True)
        text = run.html_images(text, data_only=True)
        text = _BARE_DATA_URI.sub(
            lambda m: run.replace_bytes(decode_base64(m.group(1)), "", "data-uri"), text
        )
        text = _BARE_BASE64.sub(run.bare_base64, text)
        text = run.markdown_images(text, data_only=False)
        text = run.html_images(text, data_only=False)
        run.result.markdown = re.sub(r"\n{3,}", "\n\n", text)
        return run.result


class _Run:
    """State of one resolve pass: the save cache, the per-pass budget and the result."""

    def __init__(self, resolver: ImageResolver, images: Sequence[ParsedImage], *, remote: bool) -> None:
        self.r = resolver
        self.remote = remote
        self.fetches = 0
        self.remote_ends: float | None = None  # monotonic end of the remote budget, from the first download
        self.failed_hosts: set[str] = set()  # a host that failed once is not asked again in this pass
        self.by_ref = {img.ref: img for img in images}
        self.by_hash = resolver.saved_by_hash
        self.saved = 0
        self.result = ResolvedImages(markdown="")

    # -- storing

    def store(self, data: bytes, ref: str, parsed: ParsedImage | None = None) -> str | None:
        """The stored URL, or None when the image is dropped (icon, too big, over budget, undecodable)."""
        original = bool(parsed and parsed.is_original)
        if len(data) > self.r.max_bytes:
            self.result.dropped_over_limit += 1
            return None
        kind = image_kind(data)
        size = image_size(data)
        if not original:
            if size is None:
                if len(data) < ICON_UNDECODABLE_BYTES or kind is None:
                    self.result.dropped_icons += 1
                    return None
            elif size[0] < ICON_MAX_SIDE and size[1] < ICON_MAX_SIDE:
                self.result.dropped_icons += 1
                return None
        digest = hashlib.sha256(data).hexdigest()
        if digest in self.by_hash:
            return self.by_hash[digest]
        if self.saved >= self.r.max_images:
            self.result.dropped_over_limit += 1
            return None
        ext, mime = kind if kind else ("bin", parsed.mime_type if parsed else "application/octet-stream")
        url = self.r.save(data, "." + ext)
        self.saved += 1
        self.by_hash[digest] = url
        self.result.images.append(
            StoredImage(
                url=url,
                original_ref=ref,
                mime_type=mime,
                page=parsed.page if parsed else None,
                width=size[0] if size else None,
                height=size[1] if size else None,
                tag=parsed.tag if parsed else "",
                is_original=original,
                size=len(data),
            )
        )
        return url

    def replace_bytes(self, data: bytes | None, alt: str, ref: str) -> str:
        if data is None:
            self.result.failed += 1
            return ""
        url = self.store(data, ref)
        return f"![{alt}]({url})" if url else ""

    def bare_base64(self, m: re.Match[str]) -> str:
        data = decode_base64(m.group(1))
        if data is None or image_kind(data[:16]) is None:
            return m.group(0)
        return self.replace_bytes(data, "", "base64")

    def fetch_time_left(self) -> float:
        """Seconds the next download may take: the least of what is left of the pass's remote budget and of
        the stage's Lambda time (0 once either is spent)."""
        now = time.monotonic()
        if self.remote_ends is None:
            self.remote_ends = now + self.r.remote_budget_s
        if out_of_time():  # the stage must finish (or hand over) now: no download may start
            return 0.0
        ends = self.remote_ends
        stage_ends = stage_deadline.get()
        if stage_ends is not None:  # a download started before the deadline ends with it
            ends = min(ends, stage_ends)
        return max(0.0, ends - now)

    def fetch(self, url: str) -> bytes | None:
        """The image's bytes, or None (the link stays as it is): a failed host, the fetch count or the time
        budget spent, a failed download or no image."""
        host = host_of(url)
        if (
            host is None
            or self.r.http is None
            or host in self.failed_hosts
            or self.fetches >= MAX_REMOTE_FETCHES_PER_PASS
        ):
            self.result.failed += 1
            return None
        time_left = self.fetch_time_left()
        if time_left <= 0:
            self.result.failed += 1
            return None
        self.fetches += 1
        # one image never takes more than REMOTE_TIMEOUT_S, whatever client was handed in, nor runs past the budget
        client = self.r.http.with_timeout(min(self.r.http.timeout, REMOTE_TIMEOUT_S, time_left))
        try:
            resp = client.get(url, headers={"Accept": "image/*"})
        except FetchError:
            self.failed_hosts.add(host)
            self.result.failed += 1
            return None
        if not (resp.content_type.startswith("image/") or image_kind(resp.body[:16])):
            self.result.failed += 1
            return None
        return resp.body

    # -- rewriting

    def target(self, dest: str, alt: str) -> str | None:
        """Replacement Markdown for an image destination; None leaves the original text as it is."""
        if dest.startswith("data:"):
            m = _DATA_URI.match(dest)
            return self.replace_bytes(decode_base64(m.group(2)) if m else None, alt, "data-uri")
        parsed = self.by_ref.get(dest)
        if parsed is not None:
            url = self.store(parsed.data, dest, parsed)
            return f"![{alt}]({url})" if url else ""
        if dest.startswith(("http://", "https://")):
            host = host_of(dest)
            if host is None:  # a link that does not parse stays as written
                self.result.failed += 1
                return None
            if any(host == h or host.endswith("." + h) for h in self.r.keep_url_hosts):
                return None
            if not self.remote:
                return None
            data = self.fetch(dest)
            if data is None:
                return None
            url = self.store(data, dest)
            return f"![{alt}]({url})" if url else ""
        return None

    def markdown_images(self, text: str, *, data_only: bool) -> str:
        out: list[str] = []
        last = 0
        for img in iter_markdown_images(text):
            if data_only != img.dest.startswith("data:"):
                continue
            replacement = self.target(img.dest, img.alt)
            if replacement is None:
                continue
            out.append(text[last : img.start])
            out.append(replacement)
            last = img.end
        out.append(text[last:])
        return "".join(out)

    def html_images(self, text: str, *, data_only: bool) -> str:
        def sub(m: re.Match[str]) -> str:
            tag = m.group(0)
            src_m = _HTML_SRC.search(tag)
            if src_m is None:
                return tag
            src = src_m.group(2).strip()
            if data_only != src.startswith("data:"):
                return tag
            alt_m = _HTML_ALT.search(tag)
            alt = md_image_alt(alt_m.group(2)) if alt_m else ""
            replacement = self.target(src, alt)
            return tag if replacement is None else replacement

        # no tag closes after the last ">": each `<img` there would be scanned to the end of the text
        closed = text.rfind(">") + 1
        return _HTML_IMG.sub(sub, text[:closed]) + text[closed:]
