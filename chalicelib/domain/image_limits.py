"""How large an image may be decoded, wherever it is: a parse's images, OCR's input, what a VLM is sent."""

from __future__ import annotations

#: the OCR engines' own cap: a larger image could never be read, and decoding more pixels than this is
#: refused everywhere (a decompression bomb: a small file that allocates gigabytes)
MAX_IMAGE_PIXELS = 40_000_000
