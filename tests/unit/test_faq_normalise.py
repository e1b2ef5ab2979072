"""FAQ normalisation: spellings of one question hash equal (WeKnora's `T/faq` hash invariances)."""

from __future__ import annotations

import pytest

from chalicelib.domain.faq_normalise import content_hash, normalise


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("How do I reset my password?", "  how do I reset my password  "),  # trim, case, edge punctuation
        ("How do I reset it? https://example.com/help?a=1", "how do i reset it"),  # URLs
        ("「如何重设密码」", "如何重设密码"),  # CJK edge punctuation
        ("如何重設密碼？", "如何重设密码"),  # traditional vs simplified (OpenCC t2s)
        ("ＨＯＷ　ＴＯ　ＬＯＧＩＮ１２３", "how to login123"),  # full width -> half width
        ("如何 重设 密码", "如何重设密码"),  # spaces between CJK characters dropped
        ("忘記 密碼 怎麼辦？ https://help.example.cn", "忘记密码怎么办"),  # all at once
    ],
)
def test_spellings_normalise_and_hash_equal(first: str, second: str) -> None:
    assert normalise(first) == normalise(second)
    assert content_hash(first, [], [], ["ok"]) == content_hash(second, [], [], ["ok"])


def test_spaces_between_latin_words_are_kept() -> None:
    assert normalise("reset  my   password") == "reset my password"
    assert normalise("reset password") != normalise("resetpassword")


def test_hash_sorts_lists_and_covers_every_part() -> None:
    base = content_hash("Q", ["b", "a"], ["n2", "n1"], ["y", "x"])
    assert base == content_hash("q", ["A", "B"], ["N1", "n2"], ["X", "y"])
    assert base != content_hash("Q", ["a"], ["n1", "n2"], ["x", "y"])
    assert base != content_hash("Q", ["a", "b"], ["n1"], ["x", "y"])
    assert base != content_hash("Q", ["a", "b"], ["n1", "n2"], ["x"])
    assert base != content_hash("Q2", ["a", "b"], ["n1", "n2"], ["x", "y"])
    # a similar question is not a negative one: moving it changes the hash
    assert content_hash("Q", ["a"], [], ["x"]) != content_hash("Q", [], ["a"], ["x"])


@pytest.mark.parametrize(
    ("marked", "bare"),
    [("What is C++?", "What is C?"), ("What is C#?", "What is C?"), ("A+", "A"), ("F#", "F"), ("x++", "x")],
)
def test_a_plus_or_hash_ending_a_word_is_part_of_the_question(marked: str, bare: str) -> None:
    assert normalise(marked) != normalise(bare)
    assert content_hash(marked, [], [], ["ok"]) != content_hash(bare, [], [], ["ok"])
    assert normalise(marked, keep_word_marks=False) == normalise(bare)  # rule 1, which stored keys used


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("What is  c++ ?", "what is C++"),  # spacing, case and the question mark still do not count
        ("ＷＨＡＴ ＩＳ Ｃ＃？", "what is c#"),  # full width
        ("What is C++ ?!", "what is c++"),
        ("#hashtag", "hashtag"),  # a leading mark is edge punctuation
        ("What is C ++?", "what is c"),  # marks apart from the word are too
    ],
)
def test_spellings_around_word_marks_normalise_equal(first: str, second: str) -> None:
    assert normalise(first) == normalise(second)
