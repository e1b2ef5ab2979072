"""Which charsets a sender may name for its text (a form field's, a page's header or <meta>, an MHTML part's):
a text charset only. Python's codecs go beyond those: some take no "replace" or refuse the bytes with a bare
UnicodeError (idna, punycode, undefined), punycode's decoder is pure Python and quadratic (a page of a few
hundred KB takes minutes), and some spell lone surrogates (unicode_escape; utf-7 does too, so a decoded text
is checked with `encodable`)."""

from __future__ import annotations

import codecs

#: Python's text codecs that are no charset of text: name transforms, escapes and the codec that refuses all
NOT_TEXT_CHARSETS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape", "charmap", "mbcs", "oem"}
)


def text_codec(charset: str) -> str | None:
    """The codec of `charset` when it names a text charset, else None (unknown, or no charset of text)."""
    try:
        info = codecs.lookup(charset)
    except (LookupError, ValueError):  # ValueError: a name the lookup refuses (a NUL in it)
        return None
    if not info._is_text_encoding or info.name in NOT_TEXT_CHARSETS:  # bytes-to-bytes (base64, zlib…)
        return None
    return info.name


def encodable(text: str) -> bool:
    """No lone surrogate, which no storage or model can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def well_formed(text: str) -> str:
    """`text` with each lone surrogate as U+FFFD, and a pair held as two code points joined into its character
    (text joined from parts can split one). What a remote answer is made into: JSON may spell a lone
    surrogate (`\\ud83d`, an emoji's pair cut by a server), and the first store that encodes it would fail."""
    if encodable(text):
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
