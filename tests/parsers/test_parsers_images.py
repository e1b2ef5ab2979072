"""ImageResolver: every base64 form, parser refs, icons, caps, dedupe and remote images via the safe client."""

import base64
import io

import pytest
from PIL import Image

from chalicelib.net import AllowList, SafeHttpClient
from chalicelib.net.client import FetchError, FetchResponse
from chalicelib.parsers.images import (
    MAX_REMOTE_FETCHES_PER_PASS,
    ImageResolver,
    decode_base64,
    iter_markdown_images,
)
from chalicelib.ports import ParsedImage


def png(width: int = 100, height: int = 80, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), color).save(buf, format="PNG")
    return buf.getvalue()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


class Store:
    def __init__(self) -> None:
        self.saved: list[tuple[bytes, str]] = []

    def __call__(self, data: bytes, ext: str) -> str:
        self.saved.append((data, ext))
        return f"s3://bucket/images/{len(self.saved)}{ext}"


@pytest.fixture
def store() -> Store:
    return Store()


def test_markdown_data_uri(store: Store) -> None:
    img = png()
    result = ImageResolver(store).resolve(f"before ![chart](data:image/png;base64,{b64(img)}) after")
    assert result.markdown == "before ![chart](s3://bucket/images/1.png) after"
    assert store.saved == [(img, ".png")]
    assert result.images[0].mime_type == "image/png"
    assert (result.images[0].width, result.images[0].height) == (100, 80)


def test_html_img_data_uri_and_dedupe(store: Store) -> None:
    img = png()
    md = f'<p><img alt="logo" src="data:image/png;base64,{b64(img)}"></p>\n\n![again](data:image/png;base64,{b64(img)})'
    result = ImageResolver(store).resolve(md)
    assert len(store.saved) == 1  # identical bytes stored once
    assert result.markdown.count("s3://bucket/images/1.png") == 2
    assert "![logo](s3://bucket/images/1.png)" in result.markdown


def test_bare_data_uri_run(store: Store) -> None:
    img = png(90, 90)
    result = ImageResolver(store).resolve(f"text data:image/png;base64,{b64(img)} more")
    assert result.markdown == "text ![](s3://bucket/images/1.png) more"


def test_bare_base64_with_image_magic(store: Store) -> None:
    jpeg = io.BytesIO()
    Image.new("RGB", (120, 100), (0, 90, 0)).save(jpeg, format="JPEG")
    result = ImageResolver(store).resolve(f"see base64,{b64(jpeg.getvalue())} here")
    assert result.markdown == "see ![](s3://bucket/images/1.jpg) here"
    not_image = "base64," + b64(b"plain words " * 40)
    assert ImageResolver(store).resolve(not_image).markdown == not_image


def test_linked_image_unwrapped(store: Store) -> None:
    parsed = ParsedImage(ref="fig1.png", data=png(), page=3)
    result = ImageResolver(store).resolve("[![fig](fig1.png)](https://example.com/big)", [parsed])
    assert result.markdown == "![fig](s3://bucket/images/1.png)"
    assert result.images[0].page == 3
    assert result.images[0].original_ref == "fig1.png"


def test_commonmark_destinations() -> None:
    text = r"""![a](<my image.png> "T") ![b](path/(x).png) ![c](esc\)aped.png 't') ![d]( spaced.png )"""
    found = [(m.alt, m.dest, m.title) for m in iter_markdown_images(text)]
    assert found == [
        ("a", "my image.png", "T"),
        ("b", "path/(x).png", ""),
        ("c", "esc)aped.png", "t"),
        ("d", "spaced.png", ""),
    ]


def test_parser_refs_with_titles_and_brackets(store: Store) -> None:
    images = [
        ParsedImage(ref="my image.png", data=png(70, 70)),
        ParsedImage(ref="p(1).png", data=png(80, 80)),
    ]
    md = '![x](<my image.png> "title") and ![y](p(1).png)'
    result = ImageResolver(store).resolve(md, images)
    assert result.markdown == "![x](s3://bucket/images/1.png) and ![y](s3://bucket/images/2.png)"


def test_relative_html_img_matching_ref(store: Store) -> None:
    result = ImageResolver(store).resolve(
        '<img src="media/a.png" alt="A">', [ParsedImage("media/a.png", png())]
    )
    assert result.markdown == "![A](s3://bucket/images/1.png)"


def test_icon_filter_and_original_exemption(store: Store) -> None:
    icon = ParsedImage(ref="icon.png", data=png(16, 16))
    wide = ParsedImage(ref="wide.png", data=png(300, 20))  # only one side small: kept
    garbage = ParsedImage(ref="junk.png", data=b"\x89PNG not really")
    result = ImageResolver(store).resolve("![](icon.png)![](wide.png)![](junk.png)", [icon, wide, garbage])
    assert result.markdown == "![](s3://bucket/images/1.png)"
    assert result.dropped_icons == 2
    original = ParsedImage(ref="images/tiny.png", data=png(10, 10), is_original=True)
    kept = ImageResolver(store).resolve("![tiny.png](images/tiny.png)", [original])
    assert kept.images and kept.images[0].is_original


def test_size_and_count_caps(store: Store) -> None:
    big = ParsedImage(ref="big.png", data=png(200, 200))
    result = ImageResolver(store, max_bytes=100).resolve("![](big.png)", [big])
    assert result.markdown == "" and result.dropped_over_limit == 1
    refs = [ParsedImage(ref=f"i{i}.png", data=png(70, 70, (i, i, i))) for i in range(35)]
    many = ImageResolver(store).resolve(" ".join(f"![](i{i}.png)" for i in range(35)), refs)
    assert len(many.images) == 30
    assert many.dropped_over_limit == 5


def test_lenient_base64() -> None:
    data = png()
    text = b64(data)
    assert decode_base64(text.rstrip("=")) == data
    assert decode_base64("\n".join(text[i : i + 76] for i in range(0, len(text), 76))) == data
    assert decode_base64(base64.urlsafe_b64encode(data).decode()) == data


def test_unknown_refs_and_remote_without_client_left_alone(store: Store) -> None:
    md = "![](nowhere.png) ![](https://example.com/x.png)"
    assert ImageResolver(store).resolve(md).markdown == md


def test_remote_images_through_safe_client(store: Store, server_factory) -> None:
    srv = server_factory()
    img = png(128, 64)
    srv.body("/pic.png", img, "image/png")
    srv.body("/sniffed", img, "application/octet-stream")
    srv.body("/page", b"<html>not an image</html>", "text/html")
    client = SafeHttpClient(AllowList.parse("127.0.0.0/8:*"), timeout=15, max_redirects=5)
    md = (
        f'![a]({srv.url("/pic.png")}) <img src="{srv.url("/sniffed")}"> ![c]({srv.url("/page")}) '
        "![d](http://169.254.169.254/latest/meta-data/x.png) ![e](https://cdn.keep.example/x.png)"
    )
    result = ImageResolver(store, http=client, keep_url_hosts=["keep.example"]).resolve(md)
    assert result.markdown.count("s3://bucket/images/1.png") == 2  # same bytes: one save
    assert srv.url("/page") in result.markdown  # not an image: left as a link
    assert "169.254.169.254" in result.markdown  # blocked: never fetched, left as is
    assert "https://cdn.keep.example/x.png" in result.markdown
    assert result.failed == 2
    assert len(store.saved) == 1


class CountingClient:
    """Answers every download with a FetchError (a host that does not resolve) or a non-image page."""

    def __init__(self, fail: bool) -> None:
        self.fail = fail
        self.urls: list[str] = []

    timeout = 15.0

    def with_timeout(self, timeout: float) -> "CountingClient":  # the resolver cuts downloads at its budget
        return self

    def get(self, url: str, headers: dict[str, str] | None = None) -> FetchResponse:
        self.urls.append(url)
        if self.fail:
            raise FetchError("could not resolve host", permanent=False)
        return FetchResponse(url=url, status=200, headers={}, body=b"<html>no</html>")


def test_remote_links_stay_text_when_the_source_is_not_markup(store: Store) -> None:
    client = CountingClient(fail=False)
    md = '![a](https://example.com/a.png) <img src="https://example.com/b.png">'
    result = ImageResolver(store, http=client).resolve(md, remote=False)  # type: ignore[arg-type]
    assert result.markdown == md and client.urls == []


def test_a_failed_host_is_asked_once_and_fetches_are_budgeted_per_pass(store: Store) -> None:
    dead = CountingClient(fail=True)
    md = " ".join(f"![x](https://dead.example/{n}.png)" for n in range(500))
    result = ImageResolver(store, http=dead).resolve(md)  # type: ignore[arg-type]
    assert dead.urls == ["https://dead.example/0.png"] and result.failed == 500

    slow = CountingClient(fail=False)  # answers, but never an image: each host once, within the budget
    md = " ".join(f"![x](https://h{n}.example/x.png)" for n in range(500))
    ImageResolver(store, http=slow).resolve(md)  # type: ignore[arg-type]
    assert len(slow.urls) == MAX_REMOTE_FETCHES_PER_PASS


def test_mhtml_embedded_image_round_trip(read, store: Store) -> None:
    from email.mime.image import MIMEImage
    from email.mime.multipart import MIMEMultipart
    from email.mime.text import MIMEText

    msg = MIMEMultipart("related")
    html = MIMEText(
        "<html><head><title>Pic page</title></head><body><h1>Figure</h1>"
        '<img src="pics/a.png" alt="diagram"><p>Caption text.</p></body></html>',
        "html",
    )
    html["Content-Location"] = "https://example.com/page.html"
    msg.attach(html)
    image = MIMEImage(png(120, 90), "png")
    image["Content-Location"] = "https://example.com/pics/a.png"
    msg.attach(image)
    result = read("page.mhtml", data=msg.as_bytes())
    assert result.title == "Pic page"
    assert len(result.images) == 1
    assert f"![diagram]({result.images[0].ref})" in result.markdown
    resolved = ImageResolver(store).resolve(result.markdown, result.images)
    assert "![diagram](s3://bucket/images/1.png)" in resolved.markdown


def test_docx_images_resolved_end_to_end(read, store: Store) -> None:
    result = read("python-docx-having-images.docx")
    resolved = ImageResolver(store).resolve(result.markdown, result.images)
    assert "docx-image-" not in resolved.markdown
    assert len(store.saved) == len(resolved.images) == 3  # five pictures, three distinct images
    assert resolved.markdown.count("s3://bucket/images/") == 5
    assert resolved.dropped_icons == 0


def test_identical_image_saved_once_across_passes(store: Store) -> None:
    resolver = ImageResolver(store)
    first = resolver.resolve("![](a.png)", [ParsedImage("a.png", png())])
    second = resolver.resolve("![](b.png)", [ParsedImage("b.png", png())])
    assert len(store.saved) == 1
    assert first.markdown == second.markdown == "![](s3://bucket/images/1.png)"
