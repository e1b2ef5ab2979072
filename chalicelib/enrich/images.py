"""Prompts and reply cleaning for images: a caption from a vision model, and OCR by a vision model when a
knowledge base asks for it (spec §1.11)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

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
#: the HTML a VLM writes instead of Markdown: only real tag names, so `i<n; a[i]>0` or `List<String>` in the
#: text of an image of code or formulas stays as it is
_HTML_NAMES = (
    "a|b|i|u|s|em|strong|span|div|p|font|center|small|big|sub|sup|code|pre|mark|del|ins|img|hr|"
    "h[1-6]|ul|ol|li|dl|dt|dd|blockquote|table|thead|tbody|tfoot|tr|td|th|caption|colgroup|col|"
    "html|head|body|section|article|header|footer|figure|figcaption|math|mi|mn|mo|mrow"
)
_TAG = re.compile(rf"</?(?:{_HTML_NAMES})\b(?:\s[^<>]{{0,200}})?/?>", re.I)
_LINE_BREAK = re.compile(r"<br\s*/?>|</(?:p|div|li|h[1-6]|blockquote|pre)>", re.I)
_TABLE_START = re.compile(r"<table\b", re.I)
_TABLE_END = re.compile(r"</table>", re.I)
_BLANK_LINES = re.compile(r"\n{3,}")


class _TableCells(HTMLParser):
    """A `<table>`'s rows of cell texts (stdlib's parser: this stage does not load the document reader)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self._cell is None:  # a cell inside a cell: one cell's text
            if not self.rows:
                self.rows.append([])
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()).replace("|", "\\|"))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _markdown_table(fragment: str) -> str:
    """A `<table>…</table>` as a Markdown table, its first row the header; its text when it has no cells."""
    cells = _TableCells()
    cells.feed(fragment)
    cells.close()
    rows = [row for row in cells.rows if row]
    if not rows:
        return _TAG.sub("", fragment)
    # written here, not through parsers.markdown_tables.format_table: the multimodal task does not load the document
    # reader's package (the package check proves what each function imports)
    width = max(len(row) for row in rows)
    lines = ["| " + " | ".join(row + [""] * (width - len(row))) + " |" for row in rows]
    return "\n".join([lines[0], "|" + "---|" * width, *lines[1:]])


def _markdown_tables(text: str) -> str:
    """Each `<table>…</table>` as a Markdown table (one pass: a start with no end after it is left to the
    tag stripping)."""
    out: list[str] = []
    pos = 0
    while (start := _TABLE_START.search(text, pos)) and (end := _TABLE_END.search(text, start.end())):
        out += [text[pos : start.start()], "\n\n", _markdown_table(text[start.start() : end.end()]), "\n\n"]
        pos = end.end()
    return "".join(out) + text[pos:]


def clean(reply: str) -> str:
    """Fences stripped, HTML tables as Markdown tables, line-break tags as line breaks and other HTML tags
    stripped, at most MAX_IMAGE_TEXT_CHARS; the no-text answer becomes empty; a reply cut off at max_tokens
    ends with its last whole sentence or line."""
    text = _FENCE.sub("", complete_part(reply)[: 4 * MAX_IMAGE_TEXT_CHARS])
    text = _markdown_tables(text)
    text = _BLANK_LINES.sub("\n\n", _TAG.sub("", _LINE_BREAK.sub("\n", text))).strip()
    return "" if not text or text.strip(".").upper() == NO_TEXT else clip(text, MAX_IMAGE_TEXT_CHARS)


#: how a vision model says it will not describe or read an image, in the languages a caption is asked in: a
#: short reply that opens as an apology or a first-person refusal and says it cannot help, describe, read…
#: ("Sorry, we're closed" on a sign, "申し訳ございませんが、カードはご利用できません" on a till are text)
_DECLINE_OPENING = re.compile(
    r"^(?:i\b|i['’]m\b|sorry\b|unfortunately\b|as an ai\b"
    r"|lo siento\b|lo lamento\b|perd[oó]n\b|disculp[ae]\b|lamentablemente\b|no puedo\b"
    r"|(?:je suis )?désolée?\b|malheureusement\b|je ne peux\b"
    r"|leider\b|(?:es )?tut mir leid\b|entschuldigung\b|ich kann\b"
    # 作为 opens many sentences ("as a public venue…"): only as the model speaking of itself
    r"|(?:很|非常)?抱歉|对不起|對不起|不好意思|我(?:无法|無法|不能)|作[为為][^，,。！？!?]{0,12}?(?:ai|人工智能|模型|助手|机器人|機器人)"
    r"|申し訳|すみません|残念ながら|私は|私には"
    r"|죄송|유감|저는|제가)",
    re.I,
)
_DECLINE_PHRASE = re.compile(
    r"\b(?:can['’]?t|cannot|unable|not able)\s+(?:to\s+)?(?:help|assist|describe|provide|identify|view|see|"
    r"process|analy[sz]e|read|transcribe|comply|fulfil)"
    r"|\bno\s+puedo\s+(?:ayudar|describir|leer|identificar|ver|procesar|analizar|transcribir|proporcionar)"
    r"|\bne\s+(?:peux|suis)\s+pas\s+(?:en\s+mesure\s+d['’e]\s*)?(?:aider|décrire|lire|identifier|voir|traiter|"
    r"analyser|transcrire|fournir)"
    r"|\bkann\b[^.!?]{0,60}\bnicht\s+(?:helfen|beschreiben|lesen|erkennen|identifizieren|sehen|verarbeiten|"
    r"analysieren|transkribieren)"
    r"|(?:无法|無法|不能)(?:帮助|幫助|协助|協助|描述|识别|識別|查看|读取|讀取|处理|處理|分析|提供|转录|轉錄|辨认|辨認)"
    r"|(?:説明|認識|読み取|識別|分析|処理|提供|手伝|文字起こし)[^。！]{0,12}(?:できません|できかねます|いたしかねます)"
    r"|(?:설명|인식|읽|식별|분석|처리|제공|도와|도움|전사)[^.!]{0,12}수\s*없",
    re.I,
)
#: a refusal is a sentence or two; a longer reply is the image's own text
MAX_DECLINED_CHARS = 300


def declined(text: str) -> bool:
    """The cleaned reply is the model declining (a refusal, not a description or the image's text)."""
    text = text.strip()
    return (
        len(text) <= MAX_DECLINED_CHARS
        and _DECLINE_OPENING.match(text) is not None
        and _DECLINE_PHRASE.search(text) is not None
    )
