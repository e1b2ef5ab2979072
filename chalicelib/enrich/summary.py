"""Document summaries (spec §1.13): sampled input, the WeKnora prompt for a chat model, or the offline
extractive summariser when the knowledge base names `local/extractive`."""

from __future__ import annotations

from collections.abc import Sequence

from chalicelib.domain.markup import strip_active_content
from chalicelib.enrich.extractive import summarize as extractive_summary
from chalicelib.enrich.replies import clip, complete_part
from chalicelib.ports import ChatModel

EXTRACTIVE = "local/extractive"
SUMMARY_INPUT_CHARS = 24_576
MIN_REAL_RUNES = 10
#: 500 words (the prompt's upper bound) with room to spare: the description and the summary chunk
MAX_SUMMARY_CHARS = 4_000
SYSTEM_PROMPT = (
    "You write objective document summaries for a knowledge base. Summarise the supplied text in 100 to 500 "
    "words, covering its 3 to 5 key points, strictly from the supplied text (never from the file name). "
    "Treat image caption and OCR tags as text. Cover every sampled part. If the text is empty or has no "
    "content, reply exactly: No summary available."
)


class SummaryNotMade(ValueError):
    """No summary comes from this input: too little text, or an empty answer. The first 500 runes of the
    text stand in (spec §1.13). `code` is what a span records."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


#: below this much text, the OCR of the document's images joins the summary's input (spec §1.13)
SHORT_TEXT_CHARS = 1_000


def summary_input(texts: Sequence[str], captions: Sequence[str], ocr: Sequence[str]) -> list[str]:
    """Ordered text chunks, then the image captions, then the images' OCR text when the text is short."""
    parts = list(texts) + [f"[Image caption] {c}" for c in captions]
    if sum(len(t) for t in texts) < SHORT_TEXT_CHARS:
        parts += [f"[Image text] {t}" for t in ocr]
    return parts


def sample(text: str, limit: int = SUMMARY_INPUT_CHARS) -> str:
    """60% head, 20% middle, 20% tail with omission markers, as WeKnora samples long documents."""
    if len(text) <= limit:
        return text
    marker = "\n\n[…]\n\n"
    budget = limit - 2 * len(marker)
    head, middle, tail = int(budget * 0.6), int(budget * 0.2), budget - int(budget * 0.6) - int(budget * 0.2)
    mid_start = (len(text) - middle) // 2
    return text[:head] + marker + text[mid_start : mid_start + middle] + marker + text[len(text) - tail :]


def summarize(chunks: Sequence[str], model_id: str, chat: ChatModel | None, title: str = "") -> str:
    """At most MAX_SUMMARY_CHARS. Raises SummaryNotMade when there is not enough text or the model answered
    nothing (or was cut off at max_tokens before its first sentence ended: a summary cut off ends with its
    last whole sentence); a model's own errors (ModelRequestError, throttling) pass through to the caller."""
    text = sample("\n\n".join(c.strip() for c in chunks if c.strip()))
    if sum(1 for ch in text if ch.isalnum()) < MIN_REAL_RUNES:
        raise SummaryNotMade("not enough text to summarise", "summary_not_enough_text")
    if model_id == EXTRACTIVE or chat is None:
        return clip(extractive_summary(text), MAX_SUMMARY_CHARS)
    answer = chat.chat(
        [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Document: {title}\n\n<document>\n{text}\n</document>"},
        ],
        temperature=0.3,
        max_tokens=2048,
    )
    complete = complete_part(answer).strip()
    if not complete:
        if answer.strip():
            raise SummaryNotMade("the model was cut off before a sentence ended", "summary_truncated")
        raise SummaryNotMade("the model returned an empty summary", "summary_empty")
    # the description and the summary chunk are shown as Markdown: no script of the model's reaches a reader
    reply = strip_active_content(clip(complete, MAX_SUMMARY_CHARS)).strip()
    if not reply:
        raise SummaryNotMade("the model's summary was only active markup", "summary_empty")
    return reply
