"""Charts as SVG text, drawn on the server: no JavaScript, no CDN, no outside network.

Three kinds, each a pure function returning one ``<svg>`` element as text,
ready to put inline in a page:

- :func:`stacked_bars`: one bar per label, stacked by series (card-hours
  per day this month, per server);
- :func:`grouped_bars`: one bar per series side by side within each label,
  or one bar per label for a single series (six months; a report per group);
- :func:`sparkline`: a small line (the trend over 7 or 30 days).

Accessible: ``role="img"``, an ``aria-label`` and a ``<title>`` that say
what the chart shows; each bar has a ``<title>`` with its series, label and
value with the unit. Text is escaped (a user or server name may hold ``<``,
``&`` or ``"``). Output is deterministic: the same input gives the same
bytes (no random ids, numbers written with fixed decimals). Colours come
from :data:`PALETTE` in series order, repeating after eight, with a legend.

Every bar carries ``data-series``, ``data-label`` and ``data-value`` (the
unrounded value) so tests and page scripts can read what it draws; a bar's
height is ``value / axis_max`` of the plot's height, ``axis_max`` the
:func:`nice_ceiling` of the largest bar (or stack).
"""

from __future__ import annotations

import math
from html import escape

from workspacespawner.quota.policy import number

#: Eight colours told apart by people with the common colour-vision deficiencies (Okabe and Ito), in order.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")

_FONT = 'font-family="sans-serif" font-size="11"'
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 12, 40  # the plot's margins inside the chart, in pixels
_LEGEND_ROW = 16


def _n(value: float) -> str:
    """A coordinate with two decimals at most (deterministic, compact)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _text(value) -> str:
    """Text and attribute values escaped for XML (``&``, ``<``, ``>``, ``"``, ``'``)."""
    return escape(str(value), quote=True)


def colour(index: int) -> str:
    """The colour of series number ``index`` (from 0), from :data:`PALETTE`, repeating."""
    return PALETTE[index % len(PALETTE)]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value``; 1 for 0 or less.

    The top of a chart's value axis: ``nice_ceiling(37)`` is 50, ``nice_ceiling(0.3)`` is 0.5.
    """
    if not value > 0 or not math.isfinite(value):
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value * (1 - 1e-12):
            return step * power
    return 10 * power


def _check(labels: list[str], series: dict[str, list[float]]) -> None:
    for name, values in series.items():
        if len(values) != len(labels):
            raise ValueError(f"series {name!r} has {len(values)} values for {len(labels)} labels")
        if any(not math.isfinite(v) or v < 0 for v in values):
            raise ValueError(f"series {name!r} has a value that is negative or not a number: {values!r}")


def _open(width: int, height: int, title: str, description: str) -> list[str]:
    label = f"{title}: {description}" if description else title
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{_text(label)}" class="ws-chart">',
        f"<title>{_text(label)}</title>",
    ]


def tick_label(value: float) -> str:
    """A value axis tick as people read it: ``number`` (two decimals at most) from 0.1 up, two significant digits
    below (``0.0075``, ``0.015``), so the ticks of an axis topped by a few seconds' card-hours stay distinct."""
    return number(value) if value == 0 or value >= 0.1 else f"{value:.2g}"


def _axes(width: int, plot_bottom: float, plot_height: float, axis_max: float, unit: str) -> list[str]:
    """The value axis with ticks at 0, half and the top, and its unit."""
    parts = []
    for fraction in (0, 0.5, 1):
        y = plot_bottom - fraction * plot_height
        parts.append(
            f'<line x1="{_LEFT}" y1="{_n(y)}" x2="{width - _RIGHT}" y2="{_n(y)}" stroke="#ddd" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{_LEFT - 4}" y="{_n(y + 4)}" text-anchor="end" {_FONT}>{_text(tick_label(axis_max * fraction))}</text>'
        )
    middle = plot_bottom - plot_height / 2
    parts.append(
        f'<text x="12" y="{_n(middle)}" text-anchor="middle" transform="rotate(-90 12 {_n(middle)})" '
        f'{_FONT} class="ws-chart-unit">{_text(unit)}</text>'
    )
    parts.append(f'<line x1="{_LEFT}" y1="{_n(plot_bottom)}" x2="{width - _RIGHT}" y2="{_n(plot_bottom)}" stroke="#666"/>')
    return parts


def _x_labels(labels: list[str], left: float, step: float, y: float) -> list[str]:
    """A label under each slot; with many slots, every few (all of them stay in the bars' titles)."""
    every = max(1, math.ceil(len(labels) / 16))
    return [
        f'<text x="{_n(left + (i + 0.5) * step)}" y="{_n(y)}" text-anchor="middle" {_FONT}>{_text(label)}</text>'
        for i, label in enumerate(labels)
        if i % every == 0
    ]


def _x_title(title: str, width: int, y: float) -> list[str]:
    """The labels' axis title, centred under the plot (none when empty)."""
    if not title:
        return []
    middle = (_LEFT + width - _RIGHT) / 2
    return [f'<text x="{_n(middle)}" y="{_n(y)}" text-anchor="middle" {_FONT} class="ws-chart-x">{_text(title)}</text>']


def _legend(names: list[str], y: float, width: int) -> list[str]:
    """One swatch and name per series, in rows across the chart's width."""
    parts, x, row = ['<g class="ws-chart-legend">'], _LEFT, 0
    for index, name in enumerate(names):
        room = 18 + 7 * len(name) + 12
        if x + room > width and x > _LEFT:
            x, row = _LEFT, row + 1
        top = y + row * _LEGEND_ROW
        parts.append(f'<rect x="{x}" y="{_n(top)}" width="10" height="10" fill="{colour(index)}"/>')
        parts.append(f'<text x="{x + 14}" y="{_n(top + 9)}" {_FONT}>{_text(name)}</text>')
        x += room
    parts.append("</g>")
    return parts


def _legend_rows(names: list[str], width: int) -> int:
    rows, x = 1, _LEFT
    for name in names:
        room = 18 + 7 * len(name) + 12
        if x + room > width and x > _LEFT:
            x, rows = _LEFT, rows + 1
        x += room
    return rows if names else 0


def _bar(x: float, bottom: float, bar_width: float, height: float, fill: str, name: str, label: str, value: float,
         unit: str) -> str:
    tip = f"{name}, {label}: {number(value)} {unit}" if name else f"{label}: {number(value)} {unit}"
    return (
        f'<rect x="{_n(x)}" y="{_n(bottom - height)}" width="{_n(bar_width)}" height="{_n(height)}" fill="{fill}" '
        f'data-series="{_text(name)}" data-label="{_text(label)}" data-value="{value!r}">'
        f"<title>{_text(tip)}</title></rect>"
    )


def stacked_bars(
    labels: list[str],
    series: dict[str, list[float]],
    *,
    title: str,
    unit: str = "card-hours",
    x_title: str = "",
    width: int = 640,
    height: int = 240,
) -> str:
    """An SVG stacked bar chart: one bar per label, one segment per series, stacked in ``series`` order.

    ``labels``: the x axis (``"1"``..``"30"``, days); ``series``: name →
    one value per label, in ``unit`` (values >= 0). The value axis runs
    from 0 to :func:`nice_ceiling` of the highest stack, titled ``unit``;
    ``x_title`` names the labels' axis (``"day of June 2025"``; empty: no
    title). ``width`` and ``height`` in pixels (the x title and the legend
    add rows below). Raises ValueError for a series of another length than
    ``labels`` or a negative value.
    """
    _check(labels, series)
    names = list(series)
    stacks = [sum(series[name][i] for name in names) for i in range(len(labels))]
    axis_max = nice_ceiling(max(stacks, default=0))
    total = sum(stacks)
    description = f"{number(total)} {unit} in all over {len(labels)} {'bar' if len(labels) == 1 else 'bars'}"
    legend_rows = _legend_rows(names, width)
    extra = _LEGEND_ROW if x_title else 0
    full_height = height + legend_rows * _LEGEND_ROW + extra
    plot_bottom, plot_height = height - _BOTTOM, height - _BOTTOM - _TOP
    step = (width - _LEFT - _RIGHT) / max(1, len(labels))
    bar_width = step * 0.8
    parts = _open(width, full_height, title, description) + _axes(width, plot_bottom, plot_height, axis_max, unit)
    for i, label in enumerate(labels):
        bottom, x = plot_bottom, _LEFT + i * step + (step - bar_width) / 2
        for index, name in enumerate(names):
            value = series[name][i]
            if value <= 0:
                continue
            bar_height = value / axis_max * plot_height
            parts.append(_bar(x, bottom, bar_width, bar_height, colour(index), name, label, value, unit))
            bottom -= bar_height
    parts += _x_labels(labels, _LEFT, step, plot_bottom + 14)
    parts += _x_title(x_title, width, plot_bottom + 30)
    parts += _legend(names, height - 12 + extra, width)
    parts.append("</svg>")
    return "\n".join(parts)


def grouped_bars(
    labels: list[str],
    series: dict[str, list[float]],
    *,
    title: str,
    unit: str = "card-hours",
    x_title: str = "",
    width: int = 640,
    height: int = 240,
) -> str:
    """An SVG bar chart: within each label, one bar per series side by side (one series: a plain bar chart).

    ``labels``: the x axis (months ``"2025-01"``, or group names);
    ``series``: name → one value per label, in ``unit`` (>= 0). The value
    axis runs from 0 to :func:`nice_ceiling` of the highest bar; ``unit``
    and ``x_title`` as for :func:`stacked_bars`. Raises ValueError as
    :func:`stacked_bars` does.
    """
    _check(labels, series)
    names = list(series)
    axis_max = nice_ceiling(max((v for values in series.values() for v in values), default=0))
    total = sum(v for values in series.values() for v in values)
    description = f"{number(total)} {unit} in all over {len(labels)} {'group' if len(labels) == 1 else 'groups'} of bars"
    legend_rows = _legend_rows(names, width) if len(names) > 1 else 0
    extra = _LEGEND_ROW if x_title else 0
    full_height = height + legend_rows * _LEGEND_ROW + extra
    plot_bottom, plot_height = height - _BOTTOM, height - _BOTTOM - _TOP
    step = (width - _LEFT - _RIGHT) / max(1, len(labels))
    bar_width = step * 0.8 / max(1, len(names))
    parts = _open(width, full_height, title, description) + _axes(width, plot_bottom, plot_height, axis_max, unit)
    for i, label in enumerate(labels):
        x = _LEFT + i * step + step * 0.1
        for index, name in enumerate(names):
            value = series[name][i]
            if value > 0:
                shown = name if len(names) > 1 else ""
                parts.append(_bar(x, plot_bottom, bar_width, value / axis_max * plot_height, colour(index), shown, label,
                                  value, unit))
            x += bar_width
    parts += _x_labels(labels, _LEFT, step, plot_bottom + 14)
    parts += _x_title(x_title, width, plot_bottom + 30)
    if len(names) > 1:
        parts += _legend(names, height - 12 + extra, width)
    parts.append("</svg>")
    return "\n".join(parts)


def sparkline(values: list[float], *, title: str, unit: str = "card-hours", width: int = 120, height: int = 32,
              at_least: float = 0.0) -> str:
    """A small SVG line of ``values`` (oldest first, >= 0, in ``unit``), scaled from 0 to the largest value, or to
    ``at_least`` when that is larger (so a few seconds of use stay a flat line instead of a full-height jump).

    No axes; the ``<title>`` and ``aria-label`` name the first, last and
    largest values with the unit. The line's points carry the values'
    heights: ``y = height - 2 - value / top * (height - 4)``, ``top`` the
    larger of the largest value and ``at_least`` (a flat line at the bottom
    when all are 0). Raises ValueError for no values or a negative one.
    """
    if not values:
        raise ValueError("a sparkline needs at least one value")
    _check([""] * len(values), {title: list(values)})
    largest = max(values)
    top = max(largest, at_least)
    scale = top if top > 0 else 1.0
    step = (width - 4) / max(1, len(values) - 1)
    points = " ".join(
        f"{_n(2 + i * step)},{_n(height - 2 - value / scale * (height - 4))}" for i, value in enumerate(values)
    )
    description = (
        f"{len(values)} values from {number(values[0])} to {number(values[-1])} {unit}, at most {number(largest)} {unit}"
    )
    parts = _open(width, height, title, description)
    parts.append(
        f'<polyline points="{points}" fill="none" stroke="{PALETTE[0]}" stroke-width="1.5" '
        f'data-values="{_text(" ".join(repr(v) for v in values))}"/>'
    )
    parts.append("</svg>")
    return "\n".join(parts)
