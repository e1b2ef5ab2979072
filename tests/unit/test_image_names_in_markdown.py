"""An image document's name in its Markdown: the simple engine wrote `![name](images/name)`, so a name holding
`](` (an upload's name, a URL import's path or redirect target) ended the link early: the image was never
stored and the text kept a link the name chose. The link is ours now; the name is only the alt text."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from chalicelib.parsers.base import ParseContext, md_image_alt
from chalicelib.parsers.images import ImageResolver
from chalicelib.parsers.simple import SimpleEngine
from chalicelib.ports import ReadRequest


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (30, 20), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


@pytest.mark.parametrize(
    "name",
    ["chart.png", "chart](https:evil.example).png", "a[b]c.png", "back\\.png", "two\nlines.png", "[.png"],
)
def test_the_original_image_is_stored_and_linked_whatever_its_name(name: str) -> None:
    result = SimpleEngine().parse(ReadRequest(data=_png(), file_name=name, file_type="png"), ParseContext())
    saved: list[str] = []

    def save(data: bytes, ext: str) -> str:
        saved.append(ext)
        return f"s3://b/img{len(saved)}{ext}"

    resolved = ImageResolver(save, fetch_remote=False).resolve(result.markdown, result.images, remote=False)
    assert saved == [".png"]
    assert resolved.markdown == f"![{md_image_alt(name)}](s3://b/img1.png)\n"
    assert "evil" not in resolved.markdown.split("](", 1)[1]


def test_an_alt_text_keeps_its_words_without_what_ends_it() -> None:
    assert md_image_alt("chart](x).png") == "chart(x).png"
    assert md_image_alt(" a [b]\n\\c ") == "a b c"
    assert md_image_alt("") == ""
