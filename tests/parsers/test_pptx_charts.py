"""A chart on a slide (a graphicFrame naming a chart part) reads as MarkItDown gives it: "### Chart: title"
and a table of its cached data, a row per category and a column per series, cut to a bounded size; chart
parts are read only for a slide whose relationships name one."""

from __future__ import annotations

import copy
import io
import zipfile

from pptx import Presentation
from pptx.chart.data import CategoryChartData, XyChartData
from pptx.enum.chart import XL_CHART_TYPE
from pptx.util import Inches

from chalicelib.parsers import slides
from chalicelib.parsers.ooxml import Package


def _save(prs: Presentation) -> bytes:
    out = io.BytesIO()
    prs.save(out)
    return out.getvalue()


def _chart_deck(categories: list[str], series: dict[str, list[float]], title: str | None) -> bytes:
    prs = Presentation()
    plain = prs.slides.add_slide(prs.slide_layouts[5])
    plain.shapes.title.text = "Before the chart"
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    data = CategoryChartData()
    data.categories = categories
    for name, values in series.items():
        data.add_series(name, values)
    frame = slide.shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(1), Inches(6), Inches(4), data
    )
    if title is not None:
        frame.chart.has_title = True
        frame.chart.chart_title.text_frame.text = title
    return _save(prs)


def test_a_charts_title_categories_and_series_are_read(read) -> None:
    data = _chart_deck(
        ["North", "South|East"], {"Revenue": [12.5, 17.25], "Cost": [3.0, 4.5]}, "Sales by region"
    )
    markdown = read("deck.pptx", data=data).markdown
    slide_two = markdown.split("<!-- Slide number: 2 -->")[1]
    assert slide_two == (
        "\n\n### Chart: Sales by region\n\n"
        "| Category | Revenue | Cost |\n|---|---|---|\n"
        "| North | 12.5 | 3.0 |\n| South\\|East | 17.25 | 4.5 |\n"
    )


def test_a_chart_without_a_title_still_gives_its_data(read) -> None:
    markdown = read("deck.pptx", data=_chart_deck(["Q1", "Q2"], {"Units": [1, 2]}, None)).markdown
    assert "### Chart\n\n| Category | Units |\n|---|---|\n| Q1 | 1 |\n| Q2 | 2 |" in markdown


def test_a_title_without_text_of_its_own_is_the_one_series_name(read) -> None:
    deck = zipfile.ZipFile(io.BytesIO(_chart_deck(["Q1"], {"Units sold": [1]}, None)))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as rewritten:
        for name in deck.namelist():
            part = deck.read(name)
            if name == "ppt/charts/chart1.xml":  # a title with no text, as PowerPoint writes it
                part = part.replace(b"<c:autoTitleDeleted", b"<c:title/><c:autoTitleDeleted")
            rewritten.writestr(name, part)
    data = out.getvalue()
    assert "### Chart: Units sold\n\n| Category | Units sold |" in read("deck.pptx", data=data).markdown


def test_a_scatter_charts_x_and_y_values_are_read(read) -> None:
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    data = XyChartData()
    points = data.add_series("Height")
    points.add_data_point(1.5, 20)
    points.add_data_point(2.5, 30)
    slide.shapes.add_chart(XL_CHART_TYPE.XY_SCATTER, Inches(1), Inches(1), Inches(6), Inches(4), data)
    markdown = read("scatter.pptx", data=_save(prs)).markdown
    assert "| Category | Height |\n|---|---|\n| 1.5 | 20 |\n| 2.5 | 30 |" in markdown


def test_a_big_charts_table_is_cut_and_says_so(read, monkeypatch) -> None:
    monkeypatch.setattr(slides, "CHART_MAX_CATEGORIES", 3)
    monkeypatch.setattr(slides, "CHART_MAX_SERIES", 2)
    series = {f"S{n}": [float(i) for i in range(5)] for n in range(4)}
    data = _chart_deck([f"C{i}" for i in range(5)], series, "Big")
    markdown = read("big.pptx", data=data).markdown
    assert (
        "| Category | S0 | S1 |\n|---|---|---|\n"
        "| C0 | 0.0 | 0.0 |\n| C1 | 1.0 | 1.0 |\n| C2 | 2.0 | 2.0 |\n\n"
        "(2 more categories and 2 more series not shown)"
    ) in markdown
    assert "C3" not in markdown and "S2" not in markdown


def test_chart_parts_are_read_only_for_slides_that_have_one(read, monkeypatch) -> None:
    parts_read: list[str] = []
    original = Package.xml

    def spy(self: Package, name: str) -> object:
        parts_read.append(name)
        return original(self, name)

    monkeypatch.setattr(Package, "xml", spy)
    prs = Presentation()
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    data = CategoryChartData()
    data.categories = ["A"]
    data.add_series("One", [1])
    frame = slide.shapes.add_chart(XL_CHART_TYPE.PIE, Inches(1), Inches(1), Inches(3), Inches(3), data)
    slide.shapes._spTree.append(copy.deepcopy(frame._element))  # the same chart shown twice
    plain = Presentation()
    plain.slides.add_slide(plain.slide_layouts[5]).shapes.title.text = "No chart here"

    read("plain.pptx", data=_save(plain))
    assert not [name for name in parts_read if "/charts/" in name]
    parts_read.clear()
    markdown = read("pie.pptx", data=_save(prs)).markdown
    assert [name for name in parts_read if "/charts/" in name] == ["ppt/charts/chart1.xml"]
    assert markdown.count("| A | 1 |") == 2
