"""Loss curves as a hand-written SVG (no plotting library): one panel, log-scaled y axis, one polyline per series."""

import math
from xml.sax.saxutils import escape

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f"]


def _ticks(lo, hi):
    """Log-axis ticks at 1, 2, 5 x 10^k inside [lo, hi]."""
    out = []
    for k in range(int(math.floor(math.log10(lo))) - 1, int(math.ceil(math.log10(hi))) + 1):
        for m in (1, 2, 5):
            v = m * 10.0 ** k
            if lo <= v <= hi:
                out.append(v)
    return out


def loss_svg(series, title, xlabel="step", width=900, height=520):
    """series: list of (name, [(x, y), ...], dashed). Non-positive and non-finite y are skipped."""
    pts = [(x, y) for _, s, _ in series for x, y in s if y is not None and math.isfinite(y) and y > 0]
    L, R, T, B = 70, 190, 40, 50
    W, H = width - L - R, height - T - B
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{L}" y="22" font-size="15">{escape(title)}</text>']
    if not pts:
        out.append(f'<text x="{L}" y="{T + 20}">no data</text></svg>')
        return "\n".join(out) + "\n"
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    if x1 == x0:
        x1 = x0 + 1
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    y0, y1 = y0 / 1.2, y1 * 1.2
    ly0, ly1 = math.log10(y0), math.log10(y1)

    def px(x):
        return L + (x - x0) / (x1 - x0) * W

    def py(y):
        return T + (ly1 - math.log10(y)) / (ly1 - ly0) * H

    out.append(f'<rect x="{L}" y="{T}" width="{W}" height="{H}" fill="none" stroke="#444"/>')
    for v in _ticks(y0, y1):
        yy = py(v)
        out.append(f'<line x1="{L}" x2="{L + W}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{yy + 4:.1f}" text-anchor="end">{v:g}</text>')
    for i in range(6):
        xv = x0 + (x1 - x0) * i / 5
        xx = px(xv)
        out.append(f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{T + H}" y2="{T + H + 5}" stroke="#444"/>')
        out.append(f'<text x="{xx:.1f}" y="{T + H + 18}" text-anchor="middle">{xv:.0f}</text>')
    out.append(f'<text x="{L + W / 2}" y="{height - 12}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="18" y="{T + H / 2}" transform="rotate(-90 18 {T + H / 2})" text-anchor="middle">loss (log)</text>')
    for i, (name, s, dashed) in enumerate(series):
        good = [(x, y) for x, y in s if y is not None and math.isfinite(y) and y > 0]
        col = PALETTE[i % len(PALETTE)]
        if len(good) >= 2:
            d = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in good)
            dash = ' stroke-dasharray="5,4"' if dashed else ""
            out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.6"{dash} points="{d}"/>')
        for x, y in good if len(good) < 2 or dashed else []:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5" fill="{col}"/>')
        ly = T + 14 + 18 * i
        dash = ' stroke-dasharray="5,4"' if dashed else ""
        out.append(f'<line x1="{L + W + 12}" x2="{L + W + 36}" y1="{ly - 4}" y2="{ly - 4}" stroke="{col}" '
                   f'stroke-width="2"{dash}/>')
        out.append(f'<text x="{L + W + 42}" y="{ly}">{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
