"""Server-side SVG charts.

Why SVG from Python rather than a vendored JS chart library: the pages, the self-contained HTML report
and the exports all need the same charts, with no build step and no CDN; SVG strings embed in all of
them, are testable without a browser, and print crisply. The datasets are small (points, not requests).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

W, H = 560, 300
ML, MR, MT, MB = 60, 16, 28, 44
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22")


def _fmt(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.2g}"
    return f"{value:.3g}"


def _ticks(low: float, high: float, n: int = 5) -> list[float]:
    if high <= low:
        return [low]
    step = 10 ** math.floor(math.log10((high - low) / n))
    for mult in (1, 2, 5, 10):
        if (high - low) / (step * mult) <= n:
            step *= mult
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step) + 1)]


def _empty(title: str, message: str) -> str:
    return (
        f'<svg class="chart empty" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} 80" role="img">'
        f'<title>{escape(title)}</title><text x="10" y="20" font-weight="bold">{escape(title)}</text>'
        f'<text x="10" y="50" fill="#666">{escape(message)}</text></svg>'
    )


def _style(i: int) -> tuple[str, str]:
    """Series i's colour and dash: the palette's ten colours solid, then dashed, then dotted (30 distinct)."""
    return PALETTE[i % len(PALETTE)], ("", "6 3", "2 2")[(i // len(PALETTE)) % 3]


LEGEND_ROW = 14


def _legend(labels: Sequence[str], *, swatch: str = "line") -> tuple[str, int]:
    """The legend under the plot (never over it): columns of (swatch, label), a long label cut with its full text
    on hover; returns the SVG and the height it adds."""
    if not labels:
        return "", 0
    longest = max(len(label) for label in labels)
    cols = 1 if longest > 44 else 2 if longest > 26 else 3
    col_w = (W - ML - MR) / cols
    fits = max(8, int((col_w - 26) / 6.2))
    out = []
    for i, label in enumerate(labels):
        color, dash = _style(i)
        x, y = ML + (i % cols) * col_w, H + 6 + (i // cols) * LEGEND_ROW
        mark = (f'<rect x="{x:.1f}" y="{y - 8}" width="14" height="9" fill="{color}"/>' if swatch == "box" else
                f'<line x1="{x:.1f}" y1="{y - 4}" x2="{x + 16:.1f}" y2="{y - 4}" stroke="{color}" stroke-width="2"'
                + (f' stroke-dasharray="{dash}"' if dash else "") + "/>")  # fmt: skip
        shown = label if len(label) <= fits else label[: fits - 1] + "…"
        out.append(f'<g class="legend">{mark}<text x="{x + 20:.1f}" y="{y}"><title>{escape(label)}</title>'
                   f"{escape(shown)}</text></g>")  # fmt: skip
    rows = math.ceil(len(labels) / cols)
    return "".join(out), rows * LEGEND_ROW + 8


def _frame(title: str, xlabel: str, ylabel: str, extra_h: int = 0) -> list[str]:
    return [
        f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H + extra_h}" role="img" '
        'font-size="11" font-family="sans-serif">',
        f"<title>{escape(title)}</title>",
        f'<text x="{W / 2}" y="16" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
        f'<text x="{W / 2}" y="{H - 6}" text-anchor="middle">{escape(xlabel)}</text>',
        f'<text x="14" y="{H / 2}" text-anchor="middle" transform="rotate(-90 14 {H / 2})">{escape(ylabel)}</text>',
    ]


class _Scale:
    def __init__(self, low: float, high: float, a: float, b: float, log: bool) -> None:
        self.log = log
        if log:
            low, high = math.log10(max(low, 1e-12)), math.log10(max(high, 1e-12))
        if high == low:
            high, low = high + 1, low - (1 if not log else 0.5)
        self.low, self.high, self.a, self.b = low, high, a, b

    def __call__(self, value: float) -> float:
        v = math.log10(max(value, 1e-12)) if self.log else value
        return self.a + (v - self.low) / (self.high - self.low) * (self.b - self.a)

    def ticks(self) -> list[float]:
        if not self.log:
            return _ticks(self.low, self.high)
        decades = range(math.floor(self.low), math.ceil(self.high) + 1)
        inside = [v for v in (m * 10.0**e for e in decades for m in (1, 2, 5)) if self.low <= math.log10(v) <= self.high]
        if len([v for v in inside if math.log10(v) % 1 == 0]) >= 2:
            return [v for v in inside if math.log10(v) % 1 == 0]  # whole decades when the range spans two or more
        # Within about a decade: 1-2-5 steps, or plain steps when even those leave fewer than two ticks.
        return inside if len(inside) >= 2 else _ticks(10**self.low, 10**self.high)


def line_chart(
    title: str,
    series: Sequence[tuple[str, Sequence[float | None], Sequence[float | None]]],
    *,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    markers: bool = True,
    lines: bool = True,
    empty: str = "no data",
    flagged: Sequence[Sequence[bool]] | None = None,
) -> str:
    """Lines (and/or markers) for each (label, xs, ys) series, with axes and a legend under the plot; a point
    `flagged[series][i]` (an invalid measurement) is drawn as a hollow red-ringed marker."""
    pts = [(x, y) for _, xs, ys in series for x, y in zip(xs, ys, strict=False) if x is not None and y is not None]
    if not pts:
        return _empty(title, empty)
    xs_all, ys_all = [p[0] for p in pts], [p[1] for p in pts]
    sx = _Scale(min(xs_all), max(xs_all), ML, W - MR, logx)
    sy = _Scale(0 if not logy else min(ys_all), max(ys_all) * 1.05, H - MB, MT, logy)
    legend, legend_h = _legend([label for label, _, _ in series] if len(series) > 1 else [])
    out = _frame(title, xlabel, ylabel, legend_h)
    out.append(f'<rect class="plot" x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none" stroke="#999"/>')
    for t in sx.ticks():
        x = sx(t)
        if ML - 0.5 <= x <= W - MR + 0.5:
            out.append(
                f'<line x1="{x:.1f}" y1="{H - MB}" x2="{x:.1f}" y2="{H - MB + 4}" stroke="#999"/>'
                f'<text x="{x:.1f}" y="{H - MB + 15}" text-anchor="middle">{_fmt(t)}</text>'
            )
    for t in sy.ticks():
        y = sy(t)
        if MT - 0.5 <= y <= H - MB + 0.5:
            out.append(
                f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#eee"/>'
                f'<text x="{ML - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
            )
    for i, (label, xs, ys) in enumerate(series):
        color, dash = _style(i)
        flags = list(flagged[i]) if flagged is not None else [False] * len(xs)
        kept = [(x, y, f) for x, y, f in zip(xs, ys, flags, strict=False) if x is not None and y is not None]
        coords = [(sx(x), sy(y)) for x, y, _ in kept]
        if lines and len(coords) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            dashed = f' stroke-dasharray="{dash}"' if dash else ""
            out.append(f'<polyline class="series" fill="none" stroke="{color}" stroke-width="1.6"{dashed} points="{path}">'
                       f"<title>{escape(label)}</title></polyline>")  # fmt: skip
        if markers and len(coords) <= 400:
            for (cx, cy), (x, y, bad) in zip(coords, kept, strict=True):
                look = 'r="4" fill="#fff" stroke="#b71c1c" stroke-width="2"' if bad else f'r="2.6" fill="{color}"'
                note = " (invalid)" if bad else ""
                out.append(f'<circle class="mark{" invalid" if bad else ""}" cx="{cx:.1f}" cy="{cy:.1f}" {look}>'
                           f"<title>{escape(label)}: {_fmt(x)}, {_fmt(y)}{note}</title></circle>")  # fmt: skip
    out.append(legend)
    out.append("</svg>")
    return "".join(out)


def bar_chart(
    title: str, labels: Sequence[str], stacks: dict[str, Sequence[float | None]], *, ylabel: str, empty: str = "no data"
) -> str:
    """Stacked bars: one bar per label, one colour per stack name."""
    totals = [sum((vals[i] or 0) for vals in stacks.values()) for i in range(len(labels))]
    if not labels or not any(totals):
        return _empty(title, empty)
    sy = _Scale(0, max(totals) * 1.1, H - MB, MT, False)
    legend, legend_h = _legend(list(stacks) if len(stacks) > 1 else [], swatch="box")
    out = _frame(title, "", ylabel, legend_h)
    width = (W - ML - MR) / len(labels)
    out.append(f'<rect class="plot" x="{ML}" y="{MT}" width="{W - ML - MR}" height="{H - MT - MB}" fill="none"/>')
    for t in sy.ticks():
        y = sy(t)
        out.append(
            f'<line x1="{ML}" y1="{y:.1f}" x2="{W - MR}" y2="{y:.1f}" stroke="#eee"/>'
            f'<text x="{ML - 4}" y="{y + 4:.1f}" text-anchor="end">{_fmt(t)}</text>'
        )
    for i, label in enumerate(labels):
        base = 0.0
        x = ML + i * width + width * 0.15
        for j, (name, vals) in enumerate(stacks.items()):
            v = vals[i] or 0.0
            if v <= 0:
                continue
            y0, y1 = sy(base), sy(base + v)
            out.append(
                f'<rect class="bar" x="{x:.1f}" y="{y1:.1f}" width="{width * 0.7:.1f}" height="{y0 - y1:.1f}" '
                f'fill="{_style(j)[0]}"><title>{escape(name)}: {_fmt(v)}</title></rect>'
            )
            base += v
        out.append(f'<text x="{x + width * 0.35:.1f}" y="{H - MB + 14}" text-anchor="middle">{escape(label[:14])}</text>')
    out.append(legend)
    out.append("</svg>")
    return "".join(out)


def heatmap(
    title: str,
    xs: Sequence[str],
    ys: Sequence[str],
    values: dict[tuple[str, str], float],
    *,
    xlabel: str,
    ylabel: str,
    empty: str = "no data",
) -> str:
    """A grid of cells coloured by value (white → dark blue), each labelled with its number."""
    if not values:
        return _empty(title, empty)
    low, high = min(values.values()), max(values.values())
    out = _frame(title, xlabel, ylabel)
    cw, ch = (W - ML - MR) / max(1, len(xs)), (H - MT - MB) / max(1, len(ys))
    for i, x in enumerate(xs):
        out.append(f'<text x="{ML + (i + 0.5) * cw:.1f}" y="{H - MB + 14}" text-anchor="middle">{escape(x)}</text>')
        for j, y in enumerate(ys):
            value = values.get((x, y))
            if value is None:
                continue
            t = (value - low) / (high - low) if high > low else 0.5
            r, g, b = int(255 - 200 * t), int(255 - 160 * t), int(255 - 60 * t)
            cy = MT + (len(ys) - 1 - j) * ch
            out.append(
                f'<rect class="cell" x="{ML + i * cw:.1f}" y="{cy:.1f}" width="{cw:.1f}" height="{ch:.1f}" '
                f'fill="rgb({r},{g},{b})" stroke="#fff"><title>{escape(x)} × {escape(y)}: {_fmt(value)}</title></rect>'
                f'<text x="{ML + (i + 0.5) * cw:.1f}" y="{cy + ch / 2 + 4:.1f}" text-anchor="middle" '
                f'fill="{"#fff" if t > 0.6 else "#000"}">{_fmt(value)}</text>'
            )
    for j, y in enumerate(ys):
        out.append(f'<text x="{ML - 4}" y="{MT + (len(ys) - 1 - j + 0.5) * ch + 4:.1f}" text-anchor="end">{escape(y)}</text>')
    out.append("</svg>")
    return "".join(out)
