#!/usr/bin/env python3
"""Generates the PDF kinds the corpus lacks, for `bench_parse.py --pdf-pages-only --files DIR` (issue 27):

  * `slides-figures.pdf`: a 16:9 lecture deck (python-pptx → LibreOffice), each slide a title, bullets,
    a photo (JPEG), on every other slide a diagram (PNG, which LibreOffice stores as Flate without a
    predictor), and the same logo in a corner (a repeated figure, dropped);
  * `manual-ja.pdf`, `manual-zh.pdf`: long Japanese / Simplified Chinese manuals (python-docx →
    LibreOffice, Noto CJK through fontconfig: `apt-get install fonts-noto-cjk`), with numbered headings,
    running header and page-number footer, a table every few sections and a screenshot now and then;
  * `manual-en.pdf`: the same manual in English (long English manual with screenshots).

    .venv/bin/python bench/make_pdf_samples.py [--out bench/results/pdf-samples] [--ja-pages 272]

Text and layout come from fixed seeds (shuffled sentences); the images are drawn with PIL, the photo grain by
PIL's unseeded noise. Page counts land near the targets (272 → 282 for Japanese). Needs `soffice`.
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

from PIL import Image, ImageDraw

OUT = Path(__file__).resolve().parent / "results" / "pdf-samples"

JA = [
    "本製品をご使用になる前に、この取扱説明書をよくお読みください。",
    "電源ボタンを三秒以上押し続けると、本体の電源が切れます。",
    "設定画面では、ネットワーク、表示、音声の各項目を変更できます。",
    "初期設定に戻すには、管理者のパスワードを入力する必要があります。",
    "ファームウェアの更新中は、電源を切らないでください。",
    "データのバックアップは、定期的に外部記憶装置へ保存することをお勧めします。",
    "異常な音やにおいがする場合は、直ちに使用を中止し、販売店にご相談ください。",
    "本体を湿気やほこりの多い場所に設置しないでください。",
    "表示される警告メッセージの意味は、付録の一覧表で確認できます。",
    "接続できない場合は、ケーブルが正しく差し込まれているか確認してください。",
    "利用者ごとにアクセス権限を設定し、共有フォルダーの閲覧範囲を制限できます。",
    "ログの保存期間は、管理画面の詳細設定で三十日から一年の間で選べます。",
    "すべての人間は、生まれながらにして自由であり、かつ、尊厳と権利とについて平等である。",
    "印刷を開始する前に、用紙の向きと大きさを確認してください。",
    "無線通信の暗号化方式は、安全性の高い方式を選択してください。",
    "時刻は、インターネット上の時刻サーバーと自動的に同期されます。",
]
ZH = [
    "使用本产品前，请仔细阅读本使用说明书，并妥善保管。",
    "按住电源键三秒以上，设备将自动关机。",
    "在设置界面中，可以修改网络、显示和声音等选项。",
    "恢复出厂设置时，需要输入管理员密码。",
    "固件升级过程中，请勿切断电源。",
    "建议定期将数据备份到外部存储设备。",
    "如发现异常声音或气味，请立即停止使用，并与经销商联系。",
    "请勿将设备放置在潮湿或灰尘较多的地方。",
    "警告信息的含义可以在附录的列表中查看。",
    "无法连接时，请检查电缆是否正确插入。",
    "可以为每个用户设置访问权限，限制共享文件夹的浏览范围。",
    "日志的保存期限可以在管理界面的高级设置中选择。",
    "人人生而自由，在尊严和权利上一律平等。",
    "开始打印之前，请确认纸张的方向和尺寸。",
    "无线通信的加密方式请选择安全性较高的方式。",
    "时间会与互联网上的时间服务器自动同步。",
]
EN = [
    "Read this manual carefully before using the product, and keep it for later reference.",
    "Hold the power button for more than three seconds to switch the unit off.",
    "The settings screen changes the network, display and sound options.",
    "Restoring the factory settings requires the administrator password.",
    "Do not switch the power off while the firmware is being updated.",
    "Back your data up to an external storage device at regular intervals.",
    "If the unit makes an unusual noise or smell, stop using it and contact your dealer.",
    "Do not install the unit in a damp or dusty place.",
    "The meaning of each warning message is listed in the appendix.",
    "If the connection fails, check that the cable is plugged in correctly.",
    "Access rights can be set per user to limit who may browse a shared folder.",
    "The log retention period is chosen in the advanced settings, from thirty days to one year.",
    "Check the paper orientation and size before you start printing.",
    "Choose a strong encryption method for wireless connections.",
    "The clock is synchronised with a time server on the internet automatically.",
]
WORDS = {
    "ja": ("第{n}章 {t}", "{a}.{b} {t}", ["設定", "接続", "保守", "安全", "更新", "印刷", "管理", "記録"]),
    "zh": ("第{n}章 {t}", "{a}.{b} {t}", ["设置", "连接", "维护", "安全", "升级", "打印", "管理", "日志"]),
    "en": (
        "Chapter {n} {t}",
        "{a}.{b} {t}",
        ["Setup", "Connection", "Care", "Safety", "Updates", "Printing"],
    ),
}


def _photo(rng: random.Random, size: tuple[int, int]) -> bytes:
    """A photo-like JPEG: smooth gradients under grain (grain keeps it from compressing like a drawing)."""
    w, h = size
    base = Image.linear_gradient("L").resize((w, h)).convert("RGB")
    tint = Image.new("RGB", (w, h), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
    noise = Image.effect_noise((w, h), 40).convert("RGB")
    image = Image.blend(Image.blend(base, tint, 0.5), noise, 0.25)
    draw = ImageDraw.Draw(image)
    for _ in range(12):
        x, y = rng.randrange(w), rng.randrange(h)
        r = rng.randrange(20, max(21, w // 6))
        draw.ellipse((x - r, y - r, x + r, y + r), fill=(rng.randrange(256), 80, rng.randrange(256)))
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=88)
    return buf.getvalue()


def _diagram(rng: random.Random, size: tuple[int, int], label: str) -> bytes:
    """A flat-colour PNG: boxes, arrows and a bar chart, like a plot or a screenshot."""
    w, h = size
    image = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(image)
    for i in range(8):
        bar = rng.randrange(h // 5, h - 40)
        x = 30 + i * (w - 60) // 8
        draw.rectangle((x, h - 20 - bar, x + (w - 60) // 10, h - 20), fill=(40 + 25 * i, 90, 200 - 20 * i))
    draw.rectangle((10, 10, w // 3, 60), outline="black", width=3)
    draw.text((20, 25), label, fill="black")
    draw.line((w // 3, 35, w // 2, 35), fill="black", width=3)
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _convert(source: Path, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                "soffice",
                f"-env:UserInstallation=file://{profile}",
                "--headless",
                "--convert-to",
                "pdf",
                "--outdir",
                str(out_dir),
                str(source),
            ],
            check=True,
            capture_output=True,
            timeout=900,
        )
    return out_dir / (source.stem + ".pdf")


def make_slides(out: Path, slides: int = 8) -> Path:
    from pptx import Presentation
    from pptx.util import Emu, Inches, Pt

    rng = random.Random(27)
    prs = Presentation()
    prs.slide_width, prs.slide_height = Inches(13.333), Inches(7.5)
    logo = _diagram(rng, (240, 120), "LAB")
    layout = prs.slide_layouts[5]  # title only
    for n in range(slides):
        slide = prs.slides.add_slide(layout)
        slide.shapes.title.text = f"Lecture 4: sampling and aliasing, part {n + 1}"
        box = slide.shapes.add_textbox(Inches(0.6), Inches(1.6), Inches(5.8), Inches(4.5))
        frame = box.text_frame
        frame.word_wrap = True
        for k, sentence in enumerate(rng.sample(EN, 4)):
            para = frame.paragraphs[0] if k == 0 else frame.add_paragraph()
            para.text = "• " + sentence
            para.font.size = Pt(18)
        photo = _photo(rng, (1800, 1200))
        slide.shapes.add_picture(io.BytesIO(photo), Inches(6.8), Inches(1.5), width=Inches(6.0))
        if n % 2:
            plot = _diagram(rng, (1200, 700), f"Figure {n + 1}")
            slide.shapes.add_picture(io.BytesIO(plot), Inches(0.8), Inches(5.2), width=Inches(3.6))
        slide.shapes.add_picture(
            io.BytesIO(logo), Emu(prs.slide_width - Inches(1.4)), Inches(0.2), width=Inches(1.2)
        )
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "slides-figures.pptx"
        prs.save(str(source))
        pdf = _convert(source, Path(tmp))
        return Path(shutil.move(str(pdf), out / pdf.name))


def make_manual(out: Path, lang: str, pages: int) -> Path:
    """About `pages` A4 pages: numbered chapters and sections, paragraphs, a table every third section,
    a screenshot every fifth, a running header and a page-number footer."""
    from docx import Document
    from docx.enum.text import WD_BREAK
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn
    from docx.shared import Inches, Pt

    sentences = {"ja": JA, "zh": ZH, "en": EN}[lang]
    chapter_fmt, section_fmt, topics = WORDS[lang]
    rng = random.Random({"ja": 272, "zh": 47, "en": 66}[lang])
    doc = Document()
    style = doc.styles["Normal"]
    style.font.size = Pt(10.5)
    fonts = {"ja": "Noto Sans CJK JP", "zh": "Noto Sans CJK SC", "en": ""}[lang]
    if fonts:
        for name in ("Normal", "Heading 1", "Heading 2", "Heading 3"):
            r_pr = doc.styles[name].element.get_or_add_rPr()
            r_fonts = r_pr.find(qn("w:rFonts"))
            if r_fonts is None:
                r_fonts = OxmlElement("w:rFonts")
                r_pr.append(r_fonts)
            r_fonts.set(qn("w:eastAsia"), fonts)
            r_fonts.set(qn("w:ascii"), fonts)
            r_fonts.set(qn("w:hAnsi"), fonts)
    section = doc.sections[0]
    section.header.paragraphs[0].text = {"ja": "取扱説明書", "zh": "使用说明书", "en": "User manual"}[lang]
    footer = section.footer.paragraphs[0]
    run = footer.add_run()
    for kind, text in (("begin", None), (None, "PAGE"), ("end", None)):
        if kind:
            element = OxmlElement("w:fldChar")
            element.set(qn("w:fldCharType"), kind)
        else:
            element = OxmlElement("w:instrText")
            element.text = text
        run._r.append(element)
    # characters (written units) per page, measured on the generated PDFs
    per_page = {"ja": 1010, "zh": 920, "en": 2330}[lang]
    total = per_page * pages
    written, chapter, sec = 0, 0, 0
    while written < total:
        if sec % 6 == 0:
            chapter += 1
            if chapter > 1:
                doc.add_paragraph().add_run().add_break(WD_BREAK.PAGE)
            doc.add_heading(chapter_fmt.format(n=chapter, t=rng.choice(topics)), level=1)
        sec += 1
        doc.add_heading(section_fmt.format(a=chapter, b=sec, t=rng.choice(topics)), level=2)
        for _ in range(rng.randint(3, 6)):
            para = (
                " ".join(rng.choices(sentences, k=rng.randint(3, 7)))
                if lang == "en"
                else "".join(rng.choices(sentences, k=rng.randint(3, 7)))
            )
            doc.add_paragraph(para)
            written += len(para)
        if sec % 3 == 0:
            rows = rng.randint(4, 8)
            table = doc.add_table(rows=rows, cols=3)
            table.style = "Table Grid"
            for r in range(rows):
                for c in range(3):
                    table.cell(r, c).text = rng.choice(topics) if r == 0 else rng.choice(sentences)[:18]
            written += rows * 54
        if sec % 5 == 0:
            shot = _diagram(rng, (1280, 800), f"{rng.choice(topics)} {sec}")
            doc.add_picture(io.BytesIO(shot), width=Inches(4.5))
            written += per_page // 3
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / f"manual-{lang}.docx"
        doc.save(str(source))
        pdf = _convert(source, Path(tmp))
        return Path(shutil.move(str(pdf), out / pdf.name))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--ja-pages", type=int, default=272)
    ap.add_argument("--zh-pages", type=int, default=120)
    ap.add_argument("--en-pages", type=int, default=150)
    ap.add_argument("--only", default="slides,ja,zh,en")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    kinds = a.only.split(",")
    made = []
    if "slides" in kinds:
        made.append(make_slides(a.out))
    for lang, pages in (("ja", a.ja_pages), ("zh", a.zh_pages), ("en", a.en_pages)):
        if lang in kinds:
            made.append(make_manual(a.out, lang, pages))
    import pypdfium2 as pdfium

    for path in made:
        print(f"{path}  {len(pdfium.PdfDocument(str(path)))} pages  {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
