"""Figure: a 3x3 convolution as nine shifted matmuls accumulated in one PSUM tile (the mapping, for one output row:
the handout leaves where the weights and inputs are loaded, and how many rows a tile holds, to the student)."""

from __future__ import annotations

from pathlib import Path

from figstyle import COLORS, box, save


def draw(path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(11.5, 5.2))
    ax.set_xlim(0, 23)
    ax.set_ylim(0, 10.5)
    ax.set_aspect("equal")
    ax.axis("off")

    # input rows (one channel plane shown) with the window of tap (p, q) = (1, 2)
    H, W = 6, 9
    x0, y0 = 0.5, 2.0
    for r in range(H):
        for c in range(W):
            ax.add_patch(
                Rectangle((x0 + c, y0 + (H - 1 - r)), 1, 1, facecolor=COLORS["sbuf"], edgecolor="#777", lw=0.5)
            )
    p, q, rows, out_w = 1, 2, 1, W - 2
    ax.add_patch(
        Rectangle((x0 + q, y0 + (H - 1 - (p + rows - 1))), out_w, rows, fill=False, edgecolor="#b03a2e", lw=2.5)
    )
    ax.text(
        x0 + W / 2,
        y0 + H + 0.5,
        "input rows in SBUF: x[c, row, col]\n(128 input channels c on the partitions)",
        ha="center",
        fontsize=9,
    )
    ax.text(
        x0 + q + out_w / 2,
        y0 - 0.8,
        "moving = x[:, y+p, q : q+out_w]\n(output row y, tap p=1, q=2)",
        ha="center",
        fontsize=8,
        color="#b03a2e",
    )

    # weights
    box(ax, 11.0, 6.2, 3.2, 2.2, "stationary\nW[co, ci, p, q].T\n[128 c_in x 128 c_out]", COLORS["tensor"], 8)
    ax.text(12.6, 9.0, "the weight block of tap (p, q)", ha="center", fontsize=8)

    box(ax, 10.7, 2.6, 3.8, 2.2, "nc_matmul\nstationary.T @ moving\n(Tensor Engine)", "#f9d3cd", 8, "bold")
    ax.annotate("", xy=(10.7, 3.7), xytext=(x0 + q + out_w, y0 + (H - 1 - p) + 0.5), arrowprops={"arrowstyle": "-|>"})
    ax.annotate("", xy=(12.6, 4.8), xytext=(12.6, 6.2), arrowprops={"arrowstyle": "-|>"})

    # psum
    for r in range(rows):
        for c in range(out_w):
            ax.add_patch(
                Rectangle(
                    (15.5 + c * 0.8, 3.0 + (rows - 1 - r) * 0.8),
                    0.8,
                    0.8,
                    facecolor=COLORS["psum"],
                    edgecolor="#777",
                    lw=0.5,
                )
            )
    ax.annotate("", xy=(15.5, 3.8), xytext=(14.5, 3.7), arrowprops={"arrowstyle": "-|>"})
    ax.text(15.5 + out_w * 0.4, 5.0, "PSUM tile [128 c_out, out_w]  +=", ha="center", fontsize=9)
    ax.text(
        15.5 + out_w * 0.4,
        1.6,
        "accumulates K x K x (C_in / 128) matmuls\n(9 taps x 2 input tiles = 18 for the course shape),\n"
        "then bias + max-pool + cast on the way to SBUF",
        ha="center",
        fontsize=8,
    )
    save(fig, path)
    plt.close(fig)
