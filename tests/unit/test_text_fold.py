"""text_fold: the one folding that the keyword index (documents and queries) and the FAQ hash share."""

from __future__ import annotations

import pytest

from chalicelib.domain import faq_normalise
from chalicelib.domain.text_fold import fold, to_simplified


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("ＨＥＬＬＯ　Ｗｏｒｌｄ１２３", "hello world123"),  # full width -> half width, case
        ("ﾊﾟｯｹｰｼﾞ", "パッケージ"),  # half-width katakana -> full width
        ("尊嚴和權利", "尊严和权利"),  # traditional -> simplified (OpenCC t2s)
        ("電腦軟體", "电脑软体"),
        ("已经是简体", "已经是简体"),
        ("①국회의원", "1국회의원"),  # compatibility forms
        ("Straße", "straße"),
        ("", ""),
    ],
)
def test_fold(text: str, folded: str) -> None:
    assert fold(text) == folded


def test_text_without_han_skips_opencc() -> None:
    assert to_simplified("대한민국 헌법 abc") == "대한민국 헌법 abc"


def test_faq_normalisation_uses_the_same_converter() -> None:
    assert faq_normalise.to_simplified is to_simplified
