"""The link rewriter a move across backends (and a clone) uses: one pass, the longest link first, through
strings and JSON values alike."""

from __future__ import annotations

from chalicelib.tasks.move_across import relinker


def test_links_are_rewritten_in_one_pass_longest_first() -> None:
    links = {
        "storage://tc/t/k/a.png": "s3://files/t/c/images/1f.png",  # a clone's copy keys
        "storage://tc/t/k/a.png2": "s3://files/t/c/images/2e.png",  # begins with the one above
        "s3://files/t/k/b.png": "storage://tc/t/k/b.png",  # an old link equal to no new one's start
    }
    relink = relinker(links)
    text = "![](storage://tc/t/k/a.png2) ![](storage://tc/t/k/a.png) s3://files/t/k/b.png"
    assert (
        relink(text)
        == "![](s3://files/t/c/images/2e.png) ![](s3://files/t/c/images/1f.png) storage://tc/t/k/b.png"
    )
    value = {"images": [{"url": "storage://tc/t/k/a.png", "n": 1}], "note": None}
    assert relink(value) == {"images": [{"url": "s3://files/t/c/images/1f.png", "n": 1}], "note": None}
    assert relinker({})("storage://tc/x") == "storage://tc/x"
