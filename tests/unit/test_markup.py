"""Active content out of the Markdown's HTML (chalicelib/domain/markup.py): what is removed, what stays as written."""

from __future__ import annotations

import pytest

from chalicelib.domain.markup import strip_active_content


@pytest.mark.parametrize(
    ("text", "gone"),
    [
        ("# T\n\n<script>alert(1)</script>\n\nafter", "<script"),
        ("# T\n\n<SCRIPT src=//evil.example/x.js></SCRIPT>\n\nafter", "evil.example"),
        ("text <img src=x onerror=alert(1)> more", "onerror"),
        ('<div onclick="steal()">\nhi\n</div>', "onclick"),
        ('Link <a href="javascript:alert(1)">x</a>', "javascript:"),
        ('Link <a href="vbscript:msgbox(1)">x</a>', "vbscript:"),
        ("inline <script>alert(1)</script> tail", "alert(1)"),
        ('<iframe src="https://evil.example/"></iframe>\n\ntext', "iframe"),
        ("<style>body{display:none}</style>\n\ntext", "display:none"),
        ('<object data="x.swf"></object>\n\ntext', "<object"),
        ("> quote <img src=x\n> onerror=alert(1)>", "onerror=alert(1)>"),  # inert text is left
        ('<a href="data:text/html,<script>alert(1)</script>">x</a>', "data:text/html"),
    ],
)
def test_active_content_is_removed(text: str, gone: str) -> None:
    cleaned = strip_active_content(text)
    assert gone.lower() not in cleaned.lower(), cleaned


@pytest.mark.parametrize(
    "text",
    [
        "# Plain\n\nText with a < b & c > d, and no HTML.",
        "# Code\n\n```html\n<script>alert(1)</script>\n```\n\nuse `<b onclick=x>` inline",
        "| a | b |\n|---|---|\n| <b>1</b> | 2 |",
        "An image ![alt](local://t/k/img.png) and a [link](https://example.com/).",
        "Turn the switch on = off, said the manual.",
    ],
)
def test_text_without_active_content_stays_as_written(text: str) -> None:
    assert strip_active_content(text) == text


def test_the_rest_of_a_document_stays() -> None:
    text = (
        "# Title\n\nIntro <b onclick=x>bold</b> text.\n\n<script>bad()</script>\n\n"
        '| a | b |\n|---|---|\n| 1 | 2 |\n\n<a href="https://ok.example/">ok</a> and <a href="javascript:x">no</a>\n'
    )
    cleaned = strip_active_content(text)
    assert "Intro <b>bold</b> text." in cleaned
    assert "| a | b |\n|---|---|\n| 1 | 2 |" in cleaned
    assert '<a href="https://ok.example/">ok</a>' in cleaned and "<a>no</a>" in cleaned
    assert "bad()" not in cleaned and "onclick" not in cleaned and "javascript" not in cleaned
