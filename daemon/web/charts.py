"""Bar charts as inline SVG, drawn on the server: no script, no chart library, nothing
loaded from elsewhere. Pure: labels and values in, markup out (escaped)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

__all__ = ["bar_chart"]

BAR = 18  # px per bar
HEAD = 22  # px for the title above the bars
LABEL = 140  # px for the labels on the left
WIDTH = 560  # px of the whole chart


def _number(value: float) -> str:
    """1234567 as 1.2M, 12345 as 12.3k: short enough beside a bar."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}{suffix}"
    return f"{value:g}"


def bar_chart(title: str, bars: Sequence[tuple[str, float]]) -> str:
    """A horizontal bar chart of ``bars`` (label, value), each bar's length its share of
    the largest; an empty chart says so. ``title`` is its accessible name."""
    if not bars:
        return f'<p class="muted chart-empty">{escape(title)}: nothing yet.</p>'
    top = max(max(v for _, v in bars), 1)
    room = WIDTH - LABEL - 60
    height = HEAD + BAR * len(bars) + 4
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title, quote=True)}" '
        f'width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="14" font-size="13" font-weight="600">{escape(title)}</text>',
    ]
    for i, (label, value) in enumerate(bars):
        y = HEAD + i * BAR + 2
        length = max(0.0, value) / top * room
        parts.append(
            f'<text x="{LABEL - 6}" y="{y + BAR - 6}" text-anchor="end" '
            f'font-size="12">{escape(label[:24])}</text>'
            f'<rect x="{LABEL}" y="{y + 2}" width="{length:.1f}" height="{BAR - 5}" '
            f'fill="#2457c5"><title>{escape(label)}: {value:g}</title></rect>'
            f'<text x="{LABEL + length + 4:.1f}" y="{y + BAR - 6}" '
            f'font-size="11" fill="#6a6f75">{_number(value)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
