"""Language settings a knowledge base or an upload may give: `ocr_languages`, tesseract codes of the
language data the docreader installs (functions/docreader/system-packages.txt), and `asr_language`, the
spoken language as a Whisper code (else it is detected)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from chalicelib.domain.errors import BadRequest

#: tesseract code → what it reads; the allow-list of the `ocr_languages` setting
OCR_LANGUAGES: dict[str, str] = {
    "eng": "English (Latin script)",
    "kor": "Korean",
    "jpn": "Japanese",
    "chi_sim": "Chinese, simplified",
    "chi_tra": "Chinese, traditional",
}
MAX_OCR_LANGUAGES = 4  # each language adds recognition time on every page
INVALID_OCR_LANGUAGES = "invalid_ocr_languages"


def check_ocr_languages(languages: Iterable[str]) -> list[str]:
    """The languages in order without duplicates; a 400 (`invalid_ocr_languages`) for any code outside
    the allow-list or for too many."""
    out: list[str] = []
    for lang in languages:
        if not isinstance(lang, str) or lang not in OCR_LANGUAGES:
            raise BadRequest(
                f"ocr_languages: {lang!r} is not one of {', '.join(OCR_LANGUAGES)}",
                code=INVALID_OCR_LANGUAGES,
            )
        if lang not in out:
            out.append(lang)
    if len(out) > MAX_OCR_LANGUAGES:
        raise BadRequest(f"ocr_languages: at most {MAX_OCR_LANGUAGES} languages", code=INVALID_OCR_LANGUAGES)
    return out


#: the languages Whisper's multilingual models know (faster_whisper.tokenizer._LANGUAGE_CODES)
ASR_LANGUAGES = frozenset(
    [
        "af",
        "am",
        "ar",
        "as",
        "az",
        "ba",
        "be",
        "bg",
        "bn",
        "bo",
        "br",
        "bs",
        "ca",
        "cs",
        "cy",
        "da",
        "de",
        "el",
        "en",
        "es",
        "et",
        "eu",
        "fa",
        "fi",
        "fo",
        "fr",
        "gl",
        "gu",
        "ha",
        "haw",
        "he",
        "hi",
        "hr",
        "ht",
        "hu",
        "hy",
        "id",
        "is",
        "it",
        "ja",
        "jw",
        "ka",
        "kk",
        "km",
        "kn",
        "ko",
        "la",
        "lb",
        "ln",
        "lo",
        "lt",
        "lv",
        "mg",
        "mi",
        "mk",
        "ml",
        "mn",
        "mr",
        "ms",
        "mt",
        "my",
        "ne",
        "nl",
        "nn",
        "no",
        "oc",
        "pa",
        "pl",
        "ps",
        "pt",
        "ro",
        "ru",
        "sa",
        "sd",
        "si",
        "sk",
        "sl",
        "sn",
        "so",
        "sq",
        "sr",
        "su",
        "sv",
        "sw",
        "ta",
        "te",
        "tg",
        "th",
        "tk",
        "tl",
        "tr",
        "tt",
        "uk",
        "ur",
        "uz",
        "vi",
        "yi",
        "yo",
        "zh",
        "yue",
    ]
)
INVALID_ASR_LANGUAGE = "invalid_asr_language"


def check_asr_language(language: str) -> str:
    """ "" (detect) or a Whisper language code; a 400 (`invalid_asr_language`) otherwise."""
    if language and language not in ASR_LANGUAGES:
        raise BadRequest(
            f"asr_language: {language!r} is not a Whisper language code (en, ko, ja, zh, …)",
            code=INVALID_ASR_LANGUAGE,
        )
    return language


def with_languages(engine: Any, languages: Sequence[str] | None) -> Any:
    """`engine` set to read `languages` (the `ocr_languages` setting) when it can choose languages
    (tesseract); other engines (rapidocr, Textract) detect the language themselves and are returned as is."""
    if not languages:
        return engine
    select = getattr(engine, "with_languages", None)
    return select(languages) if callable(select) else engine
