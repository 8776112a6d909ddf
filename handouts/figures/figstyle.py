"""Shared drawing helpers for the handout figures (boxes, arrows, one colour per memory/engine)."""

from __future__ import annotations

import os
from pathlib import Path

COLORS = {
    "hbm": "#c9d9f0",
    "sbuf": "#cdebc5",
    "psum": "#f7e0b5",
    "tensor": "#f4b9b2",
    "vector": "#d9c8ee",
    "scalar": "#bfe3e0",
    "gpsimd": "#e6e6e6",
    "dma": "#fff2a8",
}


def box(ax, x, y, w, h, text, color, fontsize=10, weight="normal"):
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(
        FancyBboxPatch(
            (x, y),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            linewidth=1.2,
            edgecolor="#333333",
            facecolor=color,
        )
    )
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, weight=weight, wrap=True)


def arrow(ax, x0, y0, x1, y1, text="", both=False, color="#333333", fontsize=8, offset=(0.0, 0.0)):
    style = "<|-|>" if both else "-|>"
    ax.annotate(
        "",
        xy=(x1, y1),
        xytext=(x0, y0),
        arrowprops={"arrowstyle": style, "color": color, "lw": 1.4, "shrinkA": 2, "shrinkB": 2},
    )
    if text:
        ax.text(
            (x0 + x1) / 2 + offset[0],
            (y0 + y1) / 2 + offset[1],
            text,
            ha="center",
            va="center",
            fontsize=fontsize,
            color=color,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1},
        )


def save(fig, path: Path) -> None:
    """Writes the PNG atomically (tmp file + rename) so a failed run never leaves half a figure."""
    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=150, bbox_inches="tight")
    os.replace(tmp, path)
