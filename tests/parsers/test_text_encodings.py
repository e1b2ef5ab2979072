"""Text without a declared encoding is decoded by a policy, not the detector's first guess (found by a
docreader audit: Spanish and Portuguese in Windows-1252 read as cp1250, "año" → "ańo"; "Café" read as
UTF-16, "5€ – ok" as cp437), and the legacy encodings that were read right stay so. A JSON Lines file
named .json is read as its list of values."""

from __future__ import annotations

import csv
import io
import json

import pytest

WESTERN = {
    "fr": "Le gouvernement français a présenté hier un projet de loi très attendu. Selon le ministre, cette "
    "réforme permettra d'améliorer l'accès aux soins dans les régions rurales, où les hôpitaux manquent de "
    "médecins. Les élus de l'opposition ont critiqué un texte « trop timide » et réclamé davantage de moyens "
    "pour les établissements publics.\n",
    "es": "El año pasado, la compañía española aumentó sus ventas en un diez por ciento. Según el director, "
    "el crecimiento se debió a la expansión en América Latina y a la mejora de la producción. Los niños del "
    "colegio visitaron la fábrica y aprendieron cómo se fabrican las piñatas tradicionales. La señora Muñoz "
    "explicó que la próxima campaña comenzará en otoño.\n",
    "de": "Die Bundesregierung hat gestern einen Gesetzentwurf zur Förderung erneuerbarer Energien vorgelegt. "
    "Nach Angaben des Ministeriums sollen Bürger künftig Zuschüsse für Wärmepumpen und Solaranlagen erhalten. "
    "Kritiker äußerten Zweifel an der Finanzierung; die Länder fordern größere Beteiligung.\n",
    "pt": "O governo português anunciou ontem novas medidas para a educação. As escolas públicas receberão "
    "mais verbas, e os professores terão formação contínua. A população das regiões do interior espera "
    "melhorias nos serviços de saúde e transportes até ao próximo verão.\n",
}


@pytest.mark.parametrize("encoding", ["cp1252", "latin-1"])
@pytest.mark.parametrize("repeat", [1, 5])
@pytest.mark.parametrize("lang", sorted(WESTERN))
def test_western_european_text_without_a_bom(read, lang: str, repeat: int, encoding: str) -> None:
    text = WESTERN[lang] * repeat
    assert read(f"{lang}.txt", data=text.encode(encoding)).markdown == text


@pytest.mark.parametrize(
    ("text", "encoding"),
    [("Café", "latin-1"), ("Price: 5€ – ok", "cp1252"), ("Grüße, Zoë", "cp1252"), ("niño", "latin-1")],
)
def test_very_short_legacy_text_is_read_as_windows_1252(read, text: str, encoding: str) -> None:
    assert read("short.txt", data=text.encode(encoding)).markdown == text


# the audit's cases that were read right: they stay so
LEGACY = {
    "latin1.txt": ("Café crème brûlée, naïve façade, Müller über Straße. " * 5, "latin-1"),
    "cp1252.txt": ("“Smart quotes” – en dash — em dash € euro sign. Café. " * 5, "cp1252"),
    "sjis.txt": ("日本語のテキストです。東京都は日本の首都です。カタカナとひらがな。" * 5, "shift_jis"),
    "gbk.txt": ("这是中文文本。北京是中国的首都。简体中文测试内容。" * 5, "gbk"),
    "euckr.txt": ("한국어 텍스트입니다. 서울은 한국의 수도입니다. 테스트 문장." * 5, "euc-kr"),
    "big5.txt": ("這是繁體中文。台北是台灣的城市。測試內容。" * 5, "big5"),
    "utf16le_bom.txt": ("UTF-16 text with BOM: Ünïcödé 日本 " * 5, "utf-16"),
    "utf16le_nobom.txt": ("UTF-16 little endian no BOM plain ascii mostly. " * 5, "utf-16-le"),
    "utf8sig.txt": ("UTF8 with BOM start. Ünïcödé " * 5, "utf-8-sig"),
    "koi8r.txt": ("Привет мир. Это русский текст в кодировке КОИ-8. " * 5, "koi8-r"),
    "cp1251.txt": ("Привет мир. Это русский текст в кодировке Windows. " * 5, "cp1251"),
    "cp1250.txt": ("Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig. " * 3, "cp1250"),
    "cp1250cz.txt": ("Příliš žluťoučký kůň úpěl ďábelské ódy. Dobrý den, jak se máte? " * 3, "cp1250"),
    "cp1253.txt": ("Ελληνικά κείμενα είναι εδώ για δοκιμή της κωδικοποίησης. " * 3, "cp1253"),
}


@pytest.mark.parametrize("name", sorted(LEGACY))
def test_other_encodings_still_read_right(read, name: str) -> None:
    text, encoding = LEGACY[name]
    assert read(name, data=text.encode(encoding)).markdown.rstrip() == text.rstrip()


def test_windows_1252_csv(read) -> None:
    rows = [
        ["name", "city", "note"],
        ["José", "Málaga", "piña, niño"],
        ["François", "Besançon", "crème brûlée"],
    ]
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    md = read("people.csv", data=out.getvalue().encode("cp1252")).markdown
    for word in ("José", "Málaga", "piña, niño", "François", "Besançon", "crème brûlée"):
        assert word in md


def test_html_without_a_charset_in_latin_1(read) -> None:
    page = "<html><body><p>Der Müller aß Käse. Crème brûlée. El niño comió piña.</p></body></html>"
    md = read("page.html", data=page.encode("latin-1")).markdown
    for word in ("Müller", "Crème brûlée", "niño", "piña"):
        assert word in md


def test_markdown_in_latin_1(read) -> None:
    md = read("notes.md", data="# Título\n\nEl niño comió piña.\n".encode("latin-1")).markdown
    assert "Título" in md
    assert "El niño comió piña." in md


def test_json_lines_named_json(read) -> None:
    lines = [json.dumps({"id": i, "text": f"record number {i} zeta"}) for i in range(5)]
    md = read("lines.json", data=("\n".join(lines) + "\n\n").encode()).markdown
    for i in range(5):
        assert f"record number {i} zeta" in md


def test_json_with_trailing_garbage_is_still_refused(read) -> None:
    from chalicelib.domain.errors import PermanentStageError

    with pytest.raises(PermanentStageError, match="not valid JSON"):
        read("broken.json", data=b'{"a": 1}\nnot json at all\n')
