"""A vision model's refusal is recognised in the languages captions are asked in (the caption prompt asks for
the knowledge base's caption language), and text an image shows that only opens like one is kept."""

from __future__ import annotations

import pytest

from chalicelib.enrich.images import declined


@pytest.mark.parametrize(
    "reply",
    [
        "I'm sorry, but I can't help with identifying people in images.",
        "Unfortunately, I am unable to view the image you provided.",
        "Lo siento, no puedo describir esta imagen.",
        "Désolé, je ne peux pas décrire cette image.",
        "Malheureusement, je ne suis pas en mesure d'identifier les personnes sur cette image.",
        "Je suis désolé, mais je ne peux pas décrire cette image.",
        "Je suis désolée, je ne peux pas identifier cette personne.",
        "Tut mir leid, ich kann das Bild nicht beschreiben.",
        "Perdón, no puedo describir esta imagen.",
        "Disculpa, no puedo identificar a esta persona.",
        "作为一个AI助手，我无法识别图片中的人物。",
        "作为一个大型语言模型，我无法识别图片中的人物。",
        "作为一名AI助手，我无法描述这张图片。",
        "作为视觉语言模型，我无法识别图片中的人物。",
        "Leider kann ich dieses Bild nicht beschreiben.",
        "Es tut mir leid, aber ich kann bei dieser Anfrage nicht helfen.",
        "抱歉，我无法识别图片中的人物。",
        "很抱歉，我不能描述这张图片。",
        "對不起，我無法描述這張圖片。",
        "申し訳ありませんが、この画像を説明することはできません。",
        "すみません、この画像の文字は読み取ることができません。",
        "죄송하지만 이 이미지를 설명할 수 없습니다.",
        "죄송합니다. 이미지 속 인물은 식별할 수 없습니다.",
    ],
)
def test_a_refusal_is_declined_in_every_caption_language(reply: str) -> None:
    assert declined(reply)


@pytest.mark.parametrize(
    "reply",
    [
        "Sorry, we're closed",
        "I can't believe it's not butter: the label of a margarine tub.",
        "A bar chart of monthly sales.",
        "Lo siento, cerrado por vacaciones.",
        "Leider geschlossen.",
        "抱歉，暂停营业。",
        "作为公共场所，本馆不能提供饮用水。",
        "申し訳ございませんが、カードはご利用できません。",
        "죄송합니다. 오늘은 영업하지 않습니다.",
        "一张显示每月销售额的柱状图。",
        "월별 매출을 보여 주는 막대 그래프.",
        # a long text an image shows is its text, whatever its first words
        "申し訳ありませんが、説明できません。" + "この製品の取扱説明書です。" * 30,
    ],
)
def test_text_that_only_opens_like_a_refusal_is_kept(reply: str) -> None:
    assert not declined(reply)
