"""Server-side SVG charts (:mod:`workspacespawner.dashboard.charts`), parsed with xml.etree.

Covers: a stacked bar chart whose segment heights are proportional to the
values and stack in series order; a grouped bar chart (side by side, and a
single series as plain bars); a sparkline whose points' heights follow the
values; the value axis' top (``nice_ceiling``) and its unit, the labels'
axis title; accessibility
(``role="img"``, ``aria-label``, ``<title>``, a title per bar); names holding
``<``, ``&`` and ``"`` escaped so the SVG still parses and shows them;
colours from the fixed palette with a legend; the same input giving the
same bytes; and bad input refused.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from workspacespawner.dashboard import charts

SVG = "{http://www.w3.org/2000/svg}"


def parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def bars(root: ET.Element) -> list[ET.Element]:
    return [rect for rect in root.iter(f"{SVG}rect") if "data-value" in rect.attrib]


def test_stacked_bars_heights_are_proportional_and_stack_in_order():
    labels = ["1", "2", "3"]
    series = {"": [2.0, 20.0, 0.0], "thesis": [0.0, 5.0, 1.5]}
    root = parse(charts.stacked_bars(labels, series, title="Card-hours per day"))
    drawn = bars(root)
    assert [(b.get("data-series"), b.get("data-label"), float(b.get("data-value"))) for b in drawn] == [
        ("", "1", 2.0), ("", "2", 20.0), ("thesis", "2", 5.0), ("thesis", "3", 1.5),
    ]
    heights = [float(b.get("height")) for b in drawn]
    per_unit = heights[0] / 2.0
    for bar, height in zip(drawn, heights, strict=True):
        assert height == pytest.approx(float(bar.get("data-value")) * per_unit, abs=0.01)
    # the axis runs to 25 (the highest stack, 2.5 x 10) over the plot's 188 pixels
    assert per_unit == pytest.approx((240 - 40 - 12) / 25, abs=0.01)
    # on day 2, thesis sits on top of the default server's segment
    default_2, thesis_2 = drawn[1], drawn[2]
    assert float(thesis_2.get("y")) + float(thesis_2.get("height")) == pytest.approx(float(default_2.get("y")), abs=0.01)
    assert default_2.get("fill") == charts.PALETTE[0] and thesis_2.get("fill") == charts.PALETTE[1]


def test_accessible_with_a_title_an_axis_unit_and_a_legend():
    text = charts.stacked_bars(["1", "2"], {"(default)": [1.0, 2.0], "gpu": [0.5, 0.0]}, title="Card-hours per day in June")
    root = parse(text)
    assert root.get("role") == "img"
    assert root.get("aria-label") == "Card-hours per day in June: 3.5 card-hours in all over 2 bars"
    assert root.find(f"{SVG}title").text == root.get("aria-label")
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "card-hours" in texts and "0" in texts and "2" in texts  # the unit and the axis' ticks 0, 1, 2
    legend = root.find(f"{SVG}g[@class='ws-chart-legend']")
    assert [t.text for t in legend.iter(f"{SVG}text")] == ["(default)", "gpu"]
    assert [r.get("fill") for r in legend.iter(f"{SVG}rect")] == list(charts.PALETTE[:2])
    assert [b.find(f"{SVG}title").text for b in bars(root)] == [
        "(default), 1: 1 card-hours", "gpu, 1: 0.5 card-hours", "(default), 2: 2 card-hours",
    ]


def test_names_with_markup_are_escaped():
    evil = 'a<b>&"c\''
    text = charts.grouped_bars([evil], {evil: [1.0], "x": [2.0]}, title=f"Report {evil}")
    root = parse(text)  # still well-formed
    assert root.get("aria-label").startswith(f"Report {evil}:")
    assert bars(root)[0].get("data-series") == evil and bars(root)[0].get("data-label") == evil
    assert evil in [t.text for t in root.iter(f"{SVG}text")]
    assert "<b>" not in text
    spark = parse(charts.sparkline([1.0, 2.0], title=evil))
    assert spark.find(f"{SVG}title").text.startswith(evil)


def test_grouped_bars_side_by_side_and_a_single_series():
    labels = ["2025-04", "2025-05"]
    root = parse(charts.grouped_bars(labels, {"": [4.0, 8.0], "long": [10.0, 0.0]}, title="Six months"))
    drawn = bars(root)
    assert [(b.get("data-series"), b.get("data-label")) for b in drawn] == [("", "2025-04"), ("long", "2025-04"), ("", "2025-05")]
    heights = {(b.get("data-series"), b.get("data-label")): float(b.get("height")) for b in drawn}
    assert heights[("", "2025-05")] == pytest.approx(2 * heights[("", "2025-04")], abs=0.01)
    assert heights[("long", "2025-04")] == pytest.approx(188.0, abs=0.01)  # 10 of an axis of 10
    xs = [float(b.get("x")) for b in drawn]
    assert xs[0] < xs[1] < xs[2] and bars(root)[0].get("y") == bars(root)[0].get("y")
    plain = parse(charts.grouped_bars(["physics", "maths"], {"card-hours": [30.0, 7.5]}, title="Per group"))
    assert [float(b.get("height")) for b in bars(plain)] == pytest.approx([188 * 30 / 50, 188 * 7.5 / 50], abs=0.01)
    assert plain.find(f"{SVG}g[@class='ws-chart-legend']") is None  # one series needs no legend
    assert [b.get("data-series") for b in bars(plain)] == ["", ""]


def test_sparkline_points_follow_the_values():
    values = [0.0, 3.0, 1.5, 6.0]
    root = parse(charts.sparkline(values, title="Last 7 days", width=64, height=24))
    line = root.find(f"{SVG}polyline")
    points = [tuple(float(n) for n in pair.split(",")) for pair in line.get("points").split()]
    assert [x for x, _y in points] == pytest.approx([2, 22, 42, 62])
    heights = [24 - 2 - y for _x, y in points]  # above the baseline
    assert heights == pytest.approx([v / 6.0 * 20 for v in values], abs=0.01)
    assert line.get("data-values") == "0.0 3.0 1.5 6.0"
    assert root.get("aria-label") == "Last 7 days: 4 values from 0 to 6 card-hours, at most 6 card-hours"
    flat = parse(charts.sparkline([0.0, 0.0], title="idle")).find(f"{SVG}polyline")
    assert {pair.split(",")[1] for pair in flat.get("points").split()} == {"30"}


def test_sparkline_scale_has_a_floor():
    """A few seconds of use (0.01 card-hours) under a floor of one card-hour stay near the baseline, not a full jump."""
    def heights(**kwargs):
        line = parse(charts.sparkline([0.0, 0.01], title="t", width=64, height=24, **kwargs)).find(f"{SVG}polyline")
        return [24 - 2 - float(pair.split(",")[1]) for pair in line.get("points").split()]

    assert heights() == pytest.approx([0, 20])
    assert heights(at_least=1.0) == pytest.approx([0, 0.2], abs=0.01)
    assert heights(at_least=0.005) == pytest.approx([0, 20])  # the values' own top is larger


def test_the_labels_axis_title():
    plain = parse(charts.stacked_bars(["1"], {"a": [1.0]}, title="t"))
    titled = parse(charts.stacked_bars(["1"], {"a": [1.0]}, title="t", x_title="day of <June> 2025"))
    assert plain.find(f"{SVG}text[@class='ws-chart-x']") is None
    assert titled.find(f"{SVG}text[@class='ws-chart-x']").text == "day of <June> 2025"
    assert int(titled.get("height")) == int(plain.get("height")) + 16  # a row for it, the legend below


def test_nice_ceiling():
    assert [charts.nice_ceiling(v) for v in (0, -1, 0.3, 1, 1.2, 2.2, 37, 100, 743)] == [1, 1, 0.5, 1, 2, 2.5, 50, 100, 1000]


def test_deterministic_and_bad_input_refused():
    args = (["1", "2"], {"a": [1.0, 2.0], "b": [0.25, 0.0]})
    assert charts.stacked_bars(*args, title="t") == charts.stacked_bars(*args, title="t")
    with pytest.raises(ValueError, match="has 1 values for 2 labels"):
        charts.stacked_bars(["1", "2"], {"a": [1.0]}, title="t")
    with pytest.raises(ValueError, match="negative"):
        charts.grouped_bars(["1"], {"a": [-1.0]}, title="t")
    with pytest.raises(ValueError):
        charts.sparkline([], title="t")
    assert charts.colour(8) == charts.PALETTE[0]


def test_an_empty_month_draws_an_axis_and_no_bars():
    root = parse(charts.stacked_bars([str(d) for d in range(1, 31)], {}, title="Nothing yet"))
    assert bars(root) == [] and root.get("aria-label") == "Nothing yet: 0 card-hours in all over 30 bars"
    shown = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle" and t.text.isdigit()]
    assert shown[:3] == ["1", "3", "5"]  # 30 days: every second day is labelled


def test_ticks_of_a_small_axis_stay_distinct():
    """A day with 36 seconds of one GPU (0.01 card-hours) tops the axis at 0.01: ticks 0, 0.005, 0.01 (not 0, 0.01, 0.01)."""
    root = parse(charts.stacked_bars(["1", "2"], {"(default)": [0.0, 0.01]}, title="t"))
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "end"]
    assert ticks[:3] == ["0", "0.005", "0.01"]
    assert [charts.tick_label(v) for v in (0, 0.0075, 0.015, 0.25, 2.5, 500)] == ["0", "0.0075", "0.015", "0.25", "2.5", "500"]
