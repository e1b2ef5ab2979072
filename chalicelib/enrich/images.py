"""Prompts and reply cleaning for images: a caption from a vision model, and OCR by a vision model when a
knowledge base asks for it (spec §1.11)."""

from __future__ import annotations

import re

from chalicelib.enrich.replies import clip, complete_part

CAPTION_PROMPT = (
    "Describe this image in one or two sentences for a search index: what it shows, any visible title or "
    "labels. Reply with the description only."
)


def caption_prompt(language: str = "", instructions: str = "") -> str:
    """The caption prompt in the configured language, with the knowledge base's own instructions after it."""
    prompt = CAPTION_PROMPT
    if language:
        prompt += f" Write the description in {language}."
    if instructions.strip():
        prompt += f"\n\nAdditional instructions: {instructions.strip()}"
    return prompt


OCR_PROMPT = (
    "Transcribe the body text of this image as Markdown, in reading order: keep headings, lists and tables "
    "(as Markdown tables) and formulas (as LaTeX); leave out page headers, footers and page numbers. If the "
    f"image has no text, reply exactly: {'NO_TEXT'}"
)
NO_TEXT = "NO_TEXT"
#: a caption is a sentence or two and a page's text fits a chunk (WeKnora caps chunks at 7,500 runes)
MAX_IMAGE_TEXT_CHARS = 8_000
_FENCE = re.compile(r"^```[\w-]*\n?|```$", re.M)
_TAG = re.compile(r"<[^>]{1,200}>")


def clean(reply: str) -> str:
    """Fences and stray HTML tags stripped, at most MAX_IMAGE_TEXT_CHARS; the no-text answer becomes empty;
    a reply cut off at max_tokens ends with its last whole sentence or line."""
    text = _TAG.sub("", _FENCE.sub("", complete_part(reply)[: 4 * MAX_IMAGE_TEXT_CHARS])).strip()
    return "" if not text or text.strip(".").upper() == NO_TEXT else clip(text, MAX_IMAGE_TEXT_CHARS)
