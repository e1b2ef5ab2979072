"""OCR language selection (issue 13): the `ocr_languages` setting beats per-page script detection
(tesseract OSD), detection picks the language data of the page's script, the setting is checked against
an allow-list, and Japanese / Chinese pages read close to their truth."""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from page_images import turned_png
from PIL import Image, ImageDraw

from chalicelib.domain.errors import BadRequest
from chalicelib.domain.languages import check_asr_language, check_ocr_languages, with_languages
from chalicelib.domain.process_config import check_enrichment, resolve
from chalicelib.domain.types import KnowledgeBase
from chalicelib.parsers import ocr as ocr_module
from chalicelib.parsers.ocr import (
    OWN_SCRIPT_ALONE,
    SCRIPT_CHARACTERS,
    OcrWord,
    PageOsd,
    TesseractOcr,
    _normalise_image,
    _upscale_factor,
    clean_ocr_text,
    doubtful_latin,
    parse_osd,
    prefer_own_script,
    prefers_alternative,
    remove_rules,
    script_share,
    word_separators,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ocr"


class ScriptedTesseract(TesseractOcr):
    """TesseractOcr whose installed languages are given (no binary needed)."""

    def installed(self) -> tuple[str, ...]:
        return ("chi_sim", "chi_tra", "eng", "jpn", "kor", "osd")


def _scripted(languages: Sequence[str] | None = None) -> ScriptedTesseract:
    return ScriptedTesseract(languages, binary="/usr/bin/tesseract")


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("Japanese", ("jpn",)),
        ("Han", ("chi_sim",)),
        ("Korean", ("kor", "eng")),
        ("Hangul", ("kor", "eng")),
        ("Latin", ("eng",)),
        ("Cyrillic", ("eng", "kor")),  # no data installed for it: the defaults
        ("", ("eng", "kor")),  # OSD found too little text
    ],
)
def test_detection_picks_the_language_data_of_the_script(script: str, expected: tuple[str, ...]) -> None:
    engine = _scripted()
    assert engine.choose_languages(PageOsd(script, 2.0)) == (expected, script)


def test_the_setting_beats_detection() -> None:
    engine = _scripted()
    chosen = with_languages(engine, ["kor"])
    assert isinstance(chosen, TesseractOcr)
    assert chosen.choose_languages(PageOsd("Japanese", 2.0)) == (("kor",), "")
    assert with_languages(engine, []) is engine and with_languages(engine, None) is engine


def test_with_languages_leaves_engines_that_cannot_choose_alone() -> None:
    class Other:
        name = "textract"

    other = Other()
    assert with_languages(other, ["jpn"]) is other


def test_parse_osd() -> None:
    out = "Page number: 0\nOrientation in degrees: 0\nRotate: 0\nOrientation confidence: 21.12\nScript: Japanese\nScript confidence: 1.85\n"
    assert parse_osd(out) == PageOsd("Japanese", 1.85, 0)
    turned = "Orientation in degrees: 270\nRotate: 90\nOrientation confidence: 0.99\nScript: Han\nScript confidence: x\n"
    assert parse_osd(turned) == PageOsd("Han", 0.0, 90)
    assert parse_osd("Rotate: 45\n").rotate == 0  # never anything but a right angle
    assert parse_osd("Too few characters. Skipping this page\n") == PageOsd()


class TurnedPageTesseract(ScriptedTesseract):
    """OSD answers given in order; the images OSD was asked about are kept."""

    def __init__(self, *answers: PageOsd) -> None:
        super().__init__(binary="/usr/bin/tesseract")
        self.answers = list(answers)
        self.asked: list[tuple[int, int]] = []

    def detect(self, data: bytes) -> PageOsd:
        with Image.open(io.BytesIO(data)) as img:
            self.asked.append(img.size)
        return self.answers.pop(0)


def _png(size: tuple[int, int], mark: tuple[int, int, int, int] | None = None) -> bytes:
    img = Image.new("L", size, 255)
    if mark:
        ImageDraw.Draw(img).rectangle(mark, fill=0)
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def test_a_page_osd_finds_turned_is_turned_when_osd_then_finds_it_upright() -> None:
    engine = TurnedPageTesseract(PageOsd("Latin", 0.7, 90), PageOsd("Latin", 4.6, 0))
    assert engine.upright(_png((300, 200))) == (90, PageOsd("Latin", 4.6, 0))
    assert engine.asked == [(300, 200), (200, 300)]  # the second OSD saw the page turned


def test_a_turn_osd_does_not_confirm_on_the_turned_page_is_not_taken() -> None:
    first = PageOsd("Latin", 0.4, 180)
    engine = TurnedPageTesseract(first, PageOsd("Latin", 0.3, 180))
    assert engine.upright(_png((300, 200))) == (0, first)
    upright = TurnedPageTesseract(PageOsd("Korean", 1.0, 0))
    assert upright.upright(_png((300, 200))) == (0, PageOsd("Korean", 1.0, 0))
    assert len(upright.asked) == 1  # an upright page costs one OSD run


def test_normalise_turns_the_page_clockwise() -> None:
    page = _png((300, 200), mark=(0, 0, 29, 19))  # ink in the top-left corner
    for turn, corner in [(90, (190, 10)), (180, (290, 190)), (270, (10, 290)), (0, (10, 10))]:
        with Image.open(io.BytesIO(_normalise_image(page, greyscale=True, turn=turn))) as out:
            assert out.size == ((300, 200) if turn in (0, 180) else (200, 300))
            assert out.getpixel(corner) == 0, turn


@pytest.mark.requires_tesseract
@pytest.mark.parametrize(("turned", "languages"), [(90, None), (180, ["jpn"])])
def test_a_turned_page_is_read_upright_with_or_without_the_setting(
    turned: int, languages: list[str] | None
) -> None:
    name = "udhr-art1-4.ja.png"
    page = turned_png((FIXTURES / name).read_bytes(), turned)  # counter-clockwise
    reading = with_languages(TesseractOcr(), languages).read(page)
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    assert reading.turned == turned  # turned back clockwise by as much
    assert _cer(reading.text, truth) <= 0.05, reading.text


def test_clean_ocr_text_joins_cjk_but_keeps_hangul_and_latin_spaces() -> None:
    assert clean_ocr_text("人 人 生 而 自 由 、 在 尊 严\x0c") == "人人生而自由、在尊严"
    assert clean_ocr_text("す べ て の 人 間 は") == "すべての人間は"
    assert clean_ocr_text("유니코드 문서 작성하기") == "유니코드 문서 작성하기"
    assert clean_ocr_text("2022 年 11 月") == "2022 年 11 月"  # a digit-ideograph space stays


@pytest.mark.parametrize(
    ("size", "dpi", "factor"),
    [
        ((1275, 1650), 150.0, 2.0),  # a 150 dpi scan with its tag: to 300 dpi
        ((2550, 3300), 300.0, 1.0),  # already 300 dpi
        ((1275, 1650), None, 2.0),  # page-sized, untagged: taken as 150 dpi
        ((756, 567), None, 2.0),  # a slide or screenshot: doubled
        ((1708, 2377), None, 1.0),  # a photo of a page, or a 200 dpi render: as it is
        ((5000, 7000), None, 1.0),  # large: as it is
        ((600, 800), 100.0, 3.0),  # 100 dpi: tripled, the most it is enlarged
    ],
)
def test_upscale_factor(size: tuple[int, int], dpi: float | None, factor: float) -> None:
    assert _upscale_factor(*size, dpi) == pytest.approx(factor)


def test_upscale_never_exceeds_the_pixel_limit() -> None:
    assert _upscale_factor(4000, 4000, 100.0) ** 2 * 16_000_000 <= 40_000_001


def test_normalised_image_is_greyscale_and_upscaled() -> None:
    buf = io.BytesIO()
    Image.new("RGBA", (300, 200), (0, 0, 0, 0)).save(buf, format="PNG")
    with Image.open(io.BytesIO(_normalise_image(buf.getvalue(), upscale=True, greyscale=True))) as out:
        assert out.mode == "L" and out.size == (600, 400)
        assert out.getpixel((10, 10)) == 255  # transparency flattened on white, not black


def test_ocr_languages_are_checked_against_the_allow_list() -> None:
    assert check_ocr_languages(["jpn", "eng", "jpn"]) == ["jpn", "eng"]
    for bad in (["klingon"], ["eng", "ja"], ["eng+jpn"], ["eng", "kor", "jpn", "chi_sim", "chi_tra"]):
        with pytest.raises(BadRequest) as caught:
            check_ocr_languages(bad)
        assert caught.value.code == "invalid_ocr_languages"
    assert check_asr_language("") == "" and check_asr_language("ko") == "ko"
    with pytest.raises(BadRequest) as caught:
        check_asr_language("korean")
    assert caught.value.code == "invalid_asr_language"


def test_the_upload_setting_beats_the_knowledge_base_and_is_checked() -> None:
    kb = KnowledgeBase(id="kb", tenant_id="t", name="n", ocr_languages=["kor"], asr_language="ko")
    assert resolve(kb, {}).ocr_languages == ["kor"]
    assert resolve(kb, {"ocr_languages": ["jpn", "eng"]}).ocr_languages == ["jpn", "eng"]
    assert resolve(kb, {"asr_language": "ja"}).asr_language == "ja"
    with pytest.raises(BadRequest) as caught:
        check_enrichment(resolve(kb, {"ocr_languages": ["jp"]}), ocr_available=True)
    assert caught.value.code == "invalid_ocr_languages"


# ---------------------------------------------------------------- real tesseract on the fixtures


def _cer(hypothesis: str, truth: str) -> float:
    from rapidfuzz.distance import Levenshtein

    h, t = re.sub(r"\s+", "", hypothesis), re.sub(r"\s+", "", truth)
    return Levenshtein.distance(h, t) / max(len(t), 1)


@pytest.mark.requires_tesseract
@pytest.mark.parametrize(
    ("name", "script", "languages", "max_cer"),
    [
        ("udhr-art1-4.ja.png", "Japanese", ("jpn",), 0.05),
        # Japanese with English words: every English word kept by the Japanese data alone
        ("manual-en.ja.png", "Japanese", ("jpn",), 0.05),
        ("python-en.ja.png", "Japanese", ("jpn",), 0.05),
        # Chinese: two readings each (simplified and traditional data), ~6 s on a loaded box
        pytest.param("polyglossia-zh-hans.png", "Han", ("chi_sim",), 0.05, marks=pytest.mark.slow),
        pytest.param("polyglossia-zh-hant.png", "Han", ("chi_tra",), 0.05, marks=pytest.mark.slow),
        pytest.param("udhr-art2-5.zh-hans.png", "Han", ("chi_sim",), 0.07, marks=pytest.mark.slow),
        pytest.param("udhr-art2-5.zh-hant.png", "Han", ("chi_tra",), 0.07, marks=pytest.mark.slow),
        pytest.param("taohuayuan.zh-hans.png", "Han", ("chi_sim",), 0.10, marks=pytest.mark.slow),
        pytest.param("manual.zh-hant.png", "Han", ("chi_tra",), 0.10, marks=pytest.mark.slow),
    ],
)
def test_a_cjk_page_is_detected_and_read_close_to_its_truth(
    name: str, script: str, languages: tuple[str, ...], max_cer: float
) -> None:
    reading = TesseractOcr().read((FIXTURES / name).read_bytes())
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    assert (reading.script, reading.languages) == (script, languages)
    assert _cer(reading.text, truth) <= max_cer, reading.text


def _words(tokens: str) -> list[OcrWord]:
    """OcrWords from space-separated "text:confidence" tokens, side by side on one line."""
    return [
        OcrWord(text, 40 * i, 0, 30, 30, float(confidence))
        for i, (text, confidence) in enumerate(token.rsplit(":", 1) for token in tokens.split())
    ]


#: tesseract's words for the simplified paragraph of polyglossia-zh-hans.png enlarged 1.9× (chi_sim and
#: chi_tra readings, with eng): chi_tra writes every simplified form as its traditional one
SIMPLIFIED_PAGE_READ_AS = {
    "chi_sim": _words(
        "人:97 人:91 生:89 而:88 自由:90 、:93 在:92 尊严:80 和:97 权利:97 上:97 一:93 律:93 平:81 等:93 。:92 "
        "他:92 们:93 赋:0 有:82 理性:96 和:97 良心:92 、:93 并:93 应:96 以:97 兄弟:96 关系:96 的:97 "
        "精神:97 相对:93 待:92 。:93 2022:90 年:87 11:92 月:93 29:93 日:72 "
    ),
    "chi_tra": _words(
        "人:96 人:96 生:96 而:96 自:96 由:93 、:93 在:91 尊嚴:55 和:97 權利:96 上:97 一:93 律:93 平等:93 "
        "。:93 他:89 們:90 賦:71 有:92 理性:97 和:97 良心:91 、:93 並:70 應:96 以:97 兄弟:96 關係:65 "
        "的:97 精神:97 相:97 對:93 待:92 。:45 2022:90 年:89 11:93 月:93 29:93 日:92 "
    ),
}
#: …and for the traditional paragraph of polyglossia-zh-hant.png enlarged 2×: chi_sim writes the
#: simplified forms it knows and misreads the rest
TRADITIONAL_PAGE_READ_AS = {
    "chi_sim": _words(
        "人:96 人:92 生:91 而:86 自由:93 、:89 在:85 尊:82 岂:0 和:9 权利:96 上:97 一:93 律:92 平等:93 "
        "。:88 他:92 们:93 和:32 马:0 有:82 理性:93 和:97 良心:90 、:88 东:16 应:10 以:92 兄弟:92 "
        "关:12 休:16 的:55 精神:97 相对:92 待:92 。:68 "
    ),
    "chi_tra": _words(
        "人:97 人:97 生:96 而:94 自:97 由:93 、:93 在:92 尊嚴:94 和:97 權利:96 上:97 一:93 律:92 平:93 "
        "等:93 。:93 他:92 們:89 賦:87 有:93 理性:96 和:97 良心:93 、:93 並:92 應:97 以:97 兄弟:95 "
        "關係:94 的:96 精神:97 相:97 對:93 待:92 。:93 "
    ),
}


def _mean_confidence(words: Sequence[OcrWord]) -> float:
    return sum(w.confidence for w in words) / len(words)


def test_the_chinese_character_set_is_decided_where_the_two_readings_differ() -> None:
    han = SCRIPT_CHARACTERS["Han"]
    simplified, traditional = SIMPLIFIED_PAGE_READ_AS["chi_sim"], SIMPLIFIED_PAGE_READ_AS["chi_tra"]
    # the case that flipped: over all words the traditional reading of a simplified page is the surer…
    assert _mean_confidence(traditional) > _mean_confidence(simplified)
    # …but not on the characters where the readings differ (严/嚴, 们/們, 并/並, 关系/關係…)
    assert not prefers_alternative(simplified, traditional, han)
    assert prefers_alternative(TRADITIONAL_PAGE_READ_AS["chi_sim"], TRADITIONAL_PAGE_READ_AS["chi_tra"], han)


def test_readings_that_agree_or_differ_only_outside_the_script_keep_the_usual_data() -> None:
    han = SCRIPT_CHARACTERS["Han"]
    same = _words("人人:90 生而自由:80")
    assert not prefers_alternative(same, _words("人人:99 生而自由:99"), han)  # surer, but of the same text
    assert not prefers_alternative(_words("2022:10 年:90"), _words("2O22:99 年:90"), han)  # not Han
    assert not prefers_alternative(_words("们:80"), _words("們:80"), han)  # a tie: the usual data
    assert prefers_alternative(_words("们:60"), _words("們:80"), han)


@pytest.mark.requires_tesseract
@pytest.mark.parametrize("factor", [1.9, 2.04])  # the mean confidence chose chi_tra at both
def test_a_simplified_page_is_read_as_simplified_whatever_the_enlargement(
    factor: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ocr_module, "_upscale_factor", lambda width, height, dpi: factor)
    reading = TesseractOcr().read((FIXTURES / "polyglossia-zh-hans.png").read_bytes())
    assert (reading.script, reading.languages) == ("Han", ("chi_sim",))
    for simplified in ("尊严", "权利", "他们", "关系"):
        assert simplified in reading.text, reading.text


@pytest.mark.requires_tesseract
def test_the_setting_reads_a_japanese_page_with_the_given_languages() -> None:
    engine = with_languages(TesseractOcr(), ["jpn"])
    reading = engine.read((FIXTURES / "udhr-art1-4.ja.png").read_bytes())
    assert (reading.script, reading.languages) == ("", ("jpn",))
    assert "すべての人間は" in reading.text


def test_leader_dots_read_as_a_repeated_hangul_syllable_are_dropped() -> None:
    assert clean_ocr_text("1.2 첫번째 문서 . . . 2 이이 이이이이이이 3") == "1.2 첫번째 문서 . . . 2 3"
    assert clean_ocr_text("이이 문서") == "이이 문서"  # two in a row can be a word


# ---------------------------------------------------------------- ruling lines and frames


def _page_with(
    draw_on: Callable[[ImageDraw.ImageDraw], None], size: tuple[int, int] = (900, 300)
) -> np.ndarray:
    img = Image.new("L", size, 255)
    draw_on(ImageDraw.Draw(img))
    return np.asarray(img, dtype=np.uint8)


def _glyph(draw: ImageDraw.ImageDraw, x: int, y: int) -> None:
    """A stand-in for a glyph: strokes shorter than any rule (an "H" 40 px tall)."""
    draw.rectangle((x, y, x + 5, y + 40), fill=0)
    draw.rectangle((x + 25, y, x + 30, y + 40), fill=0)
    draw.rectangle((x, y + 18, x + 30, y + 23), fill=0)


def test_a_frame_around_a_word_is_painted_white_and_the_word_kept() -> None:
    def framed(draw: ImageDraw.ImageDraw) -> None:
        draw.rectangle((100, 100, 400, 170), outline=76, width=3)  # a red hyperlink frame, in greyscale
        for x in range(120, 380, 45):
            _glyph(draw, x, 115)
        draw.rectangle((385, 103, 388, 167), fill=0)  # a stroke as tall as the frame ("ㅣ"), touching it

    page = _page_with(framed)
    out = remove_rules(page)
    assert (out[104:167, 385:389] == 0).all()  # it meets the rules away from their ends: not a side
    for rule in (out[99:103], out[168:172]):  # top and bottom, but where the tall stroke touches them
        assert (rule[:, 100:384] == 255).all() and (rule[:, 390:401] == 255).all()
    assert (out[100:171, 99:104] == 255).all() and (out[100:171, 397:402] == 255).all()  # both sides
    glyphs = page[104:167, 110:390] < 128
    assert ((out[104:167, 110:390] < 128) == glyphs).all()  # not one glyph pixel lost


def test_a_rule_touching_glyphs_is_removed_but_the_glyphs_are_not() -> None:
    def underlined(draw: ImageDraw.ImageDraw) -> None:
        for x in range(100, 600, 45):
            _glyph(draw, x, 100)
        draw.rectangle((90, 141, 650, 143), fill=0)  # an underline the glyphs stand on

    page = _page_with(underlined)
    out = remove_rules(page)
    assert (out[141:144, 90:100] == 255).all() and (out[141:144, 627:651] == 255).all()  # before, after
    assert (out[141:144, 106:125] == 255).all()  # and between the strokes standing on it
    assert (out[100:139, 100:600] < 128).sum() == (page[100:139, 100:600] < 128).sum()  # glyphs whole


def test_filled_areas_short_strokes_and_dot_leaders_are_kept() -> None:
    def kept(draw: ImageDraw.ImageDraw) -> None:
        draw.rectangle((50, 20, 850, 80), fill=0)  # a dark band (inverse text is in such bands)
        draw.rectangle((50, 120, 180, 125), fill=0)  # a dash or a heading stroke, shorter than a rule
        for x in range(50, 850, 20):
            draw.rectangle((x, 200, x + 4, 204), fill=0)  # dot leaders: text the truth counts

    page = _page_with(kept)
    assert (remove_rules(page) == page).all()


def test_an_image_without_rules_is_returned_as_it_is() -> None:
    page = _page_with(lambda draw: _glyph(draw, 100, 100))
    assert remove_rules(page) is page


def test_the_engine_paints_rules_white_before_tesseract_reads_the_page() -> None:
    def framed(draw: ImageDraw.ImageDraw) -> None:
        draw.rectangle((40, 40, 300, 90), outline=(255, 0, 0), width=2)

    img = Image.new("RGB", (400, 150), (255, 255, 255))
    framed(ImageDraw.Draw(img))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    with Image.open(
        io.BytesIO(_normalise_image(buf.getvalue(), upscale=True, greyscale=True, rules=True))
    ) as out:
        assert out.size == (800, 300) and int(np.asarray(out).min()) > 200  # no ink left: the frame is gone
    with Image.open(io.BytesIO(_normalise_image(buf.getvalue(), upscale=True, greyscale=True))) as out:
        assert int(np.asarray(out).min()) < 128  # without `rules` the frame stays
    assert TesseractOcr().rules and not TesseractOcr(rules=False).with_languages(["kor"]).rules


# ---------------------------------------------------------------- Korean words the eng model took


def _word(text: str, left: int, confidence: float, top: int = 100, width: int = 90) -> OcrWord:
    return OcrWord(text, left, top, width, 40, confidence)


def test_word_separators_follow_the_text_output() -> None:
    words = [_word("같은", 0, 90), _word("양", 100, 90), _word("식을", 150, 90), _word("가지고", 300, 90)]
    assert word_separators(words, "같은 양식을\n\n가지고\n") == ["", " ", "", "\n\n"]
    assert word_separators(words, "같은 양식이 가지고") is None  # not the same run: no separators


def test_a_korean_word_read_as_latin_takes_the_korean_reading() -> None:
    mixed = [_word("같은", 0, 92), _word("SAS", 100, 41), _word("section", 200, 90), _word("HES", 300, 30)]
    alone = [
        _word("같은", 0, 93),
        _word("양", 100, 90, width=30),  # the Korean model splits a word into syllables…
        _word("식을", 135, 88, width=55),
        _word("560000", 200, 22),  # …and reads a Latin word as digits, unsure
        _word("별", 300, 95, width=40),
        _word("도로", 345, 40, width=45),  # mean 67.5: above the floor, above the Latin word's 30
    ]
    text = prefer_own_script(mixed, ["", " ", " ", " "], alone, OWN_SCRIPT_ALONE["kor"])
    assert text == "같은 양식을 section 별도로"


def test_an_unsure_korean_reading_or_a_mixed_one_leaves_the_latin_word() -> None:
    mixed = [_word("TeX", 0, 50), _word("dhucs", 100, 45), _word("BAS", 200, 70)]
    alone = [
        _word("테스", 0, 40),  # below OWN_SCRIPT_MIN_CONFIDENCE
        _word("dh", 100, 90, width=40),  # part Latin: not the script alone
        _word("형식", 145, 90, width=45),
        _word("형식을", 200, 65),  # surer than the floor, less sure than the Latin word
    ]
    text = prefer_own_script(mixed, ["", " ", " "], alone, OWN_SCRIPT_ALONE["kor"])
    assert text == "TeX dhucs BAS"


@pytest.mark.requires_tesseract
@pytest.mark.slow  # two readings of a full page, ~15 s on a loaded box
def test_a_korean_page_keeps_its_hangul_words() -> None:
    name = "kotex-utf-doc-p14.ko.png"
    reading = TesseractOcr().read((FIXTURES / name).read_bytes())
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    assert reading.languages == ("kor", "eng")
    assert "같은 양식을 가지고" in reading.text and "별도로 kotex-sections" in reading.text, reading.text

    def hangul(text: str) -> str:
        return "".join(re.findall("[\uac00-\ud7a3]", text))

    assert _cer(hangul(reading.text), hangul(truth)) <= 0.08  # 10.4% with the mixed reading alone


@pytest.mark.requires_tesseract
@pytest.mark.parametrize("name", ["manual-en.ja.png", "python-en.ja.png"])
def test_a_japanese_page_keeps_its_english_words(name: str) -> None:
    reading = TesseractOcr().read((FIXTURES / name).read_bytes())
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    latin = re.findall(r"[A-Za-z][A-Za-z0-9.\-]*[A-Za-z0-9]", truth)
    assert latin and [word for word in latin if word not in reading.text] == [], reading.text


#: what eng makes of python-en.zh-hans.png at ×1 (OSD: "Latin", 3.20): the English words sure, the Chinese
#: runs between them Latin noise under 50
CHINESE_PAGE_READ_AS_ENGLISH = _words(
    "Python:96 ff:40 Guido:96 van:96 Rossum:95 F#XW9EIR:21 SS,:30 SMA:35 1991:95 ERT,:28 CMINERHE:15 "
    "datetime,:93 json:95 fil:47 pathlib:94 Shik,:22 B=:10 e-F:18 HA:45 LAA:31 pip:96 install:96"
)


def test_an_english_reading_is_doubted_when_much_of_it_is_unsure() -> None:
    assert doubtful_latin(CHINESE_PAGE_READ_AS_ENGLISH)
    assert not doubtful_latin(
        _words("The:96 quick:95 brown:93 fox:91 jumps:40 over:92 the:96 lazy:95 dog:94")
    )
    assert not doubtful_latin([])


def test_script_share_counts_characters_not_words() -> None:
    han = SCRIPT_CHARACTERS["Han"]
    assert script_share(_words("Python:90 是由:90 Guido:90"), han) == pytest.approx(2 / 13)
    assert script_share(_words("人人生而自由:90"), han) == 1.0
    assert script_share([], han) == 0.0


def _png_page() -> bytes:
    buf = io.BytesIO()
    Image.new("L", (200, 100), 255).save(buf, format="PNG")
    return buf.getvalue()


class _CountingTesseract(ScriptedTesseract):
    """A Latin page whose eng reading is `eng`; counts the runs a read makes."""

    def __init__(self, eng: list[OcrWord], chi_sim_tsv: str = "") -> None:
        super().__init__(None, binary="/usr/bin/tesseract")
        self.eng, self.chi_sim_tsv = eng, chi_sim_tsv
        self.runs: list[tuple[str, ...]] = []

    def upright(self, image: bytes) -> tuple[int, PageOsd]:
        return 0, PageOsd("Latin", 2.0)

    def _recognize_with_words(self, data: bytes, languages: Sequence[str]) -> tuple[str, list[OcrWord]]:
        self.runs.append(tuple(languages))
        return " ".join(w.text for w in self.eng), self.eng

    def _recognize(self, data: bytes, languages: Sequence[str], *, tsv: bool = False) -> str:
        self.runs.append(tuple(languages))
        return self.chi_sim_tsv


def test_a_sure_english_page_is_read_once() -> None:
    engine = _CountingTesseract(_words("The:96 quick:95 brown:93 fox:91 jumps:90"))
    reading = engine.read(_png_page())
    assert (reading.script, reading.languages, engine.runs) == ("Latin", ("eng",), [("eng",)])


def test_a_doubtful_english_reading_with_little_han_in_the_chinese_one_stays_english() -> None:
    header = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n"
    latin_tsv = header + "5\t1\t1\t1\t1\t1\t0\t0\t30\t30\t40\tx=y_1-y_2\n"
    engine = _CountingTesseract(CHINESE_PAGE_READ_AS_ENGLISH, latin_tsv)
    reading = engine.read(_png_page())
    assert (reading.script, reading.languages) == ("Latin", ("eng",))
    assert engine.runs == [("eng",), ("chi_sim",)]
    assert reading.text.startswith("Python ff Guido")


@pytest.mark.requires_tesseract
@pytest.mark.parametrize(
    ("name", "languages"),
    [
        ("python-en.zh-hans.png", ("chi_sim",)),  # OSD: Latin, 3.20
        ("manual-en.zh-hant.png", ("chi_tra",)),  # OSD: Latin, 1.43
        ("manual-en.zh-hans.png", ("chi_sim",)),  # OSD: Han (as the others of this kind)
        ("python-en.zh-hant.png", ("chi_tra",)),
    ],
)
def test_a_chinese_page_with_english_words_is_read_as_chinese_with_its_english(
    name: str, languages: tuple[str, ...]
) -> None:
    reading = TesseractOcr().read((FIXTURES / name).read_bytes())
    truth = (FIXTURES / f"{name}.truth.txt").read_text(encoding="utf-8")
    assert (reading.script, reading.languages) == ("Han", languages)
    assert _cer(reading.text, truth) <= 0.06, reading.text
    for word in (
        ("Python", "Guido", "datetime", "pathlib") if "python" in name else ("USB", "Settings", "Linux")
    ):
        assert word in reading.text.replace(" ", ""), reading.text  # "Settin gs": a space is no loss


@pytest.mark.requires_tesseract
def test_a_chinese_page_whose_english_reading_is_less_unsure_is_still_doubted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 2.08× the eng reading of python-en.zh-hans.png left 32% of its characters under 50 (42% at 2×)."""
    monkeypatch.setattr(ocr_module, "_upscale_factor", lambda width, height, dpi: 2.08)
    reading = TesseractOcr().read((FIXTURES / "python-en.zh-hans.png").read_bytes())
    assert (reading.script, reading.languages) == ("Han", ("chi_sim",))
    assert "标准库" in reading.text, reading.text
