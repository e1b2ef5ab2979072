"""ISA-L's zlib-compatible codec (`isal`) for the parsers: it inflates a zip's members and a PDF figure's Flate
samples and deflates PNG rows at several times zlib's speed, with zlib's API and byte-identical inflated output
(issue 27)."""

from __future__ import annotations

from typing import cast

from isal import isal_zlib

#: what ISA-L raises on a damaged stream (igzip_lib.IsalError); isal's stubs declare it an instance, not a class
InflateError = cast(type[Exception], isal_zlib.error)

__all__ = ["InflateError", "isal_zlib"]
