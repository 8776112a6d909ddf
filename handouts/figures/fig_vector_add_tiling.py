"""Figure: how vector_add_tiled and vector_add_stream map a 1-D vector onto SBUF partitions."""

from __future__ import annotations

from pathlib import Path

from figstyle import COLORS, save


def draw(path: Path) -> None:
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax in (ax1, ax2):
        ax.set_aspect("equal")
        ax.axis("off")

    # tiled: ROW_CHUNK elements, one per partition, one column
    n_show = 16
    for i in range(n_show):
        tile = i // 4
        ax1.add_patch(
            Rectangle((i * 0.5, 7), 0.5, 0.5, facecolor=COLORS["hbm"] if tile % 2 else "#9fbbe0", edgecolor="#333")
        )
    ax1.text(4, 7.9, "a_vec in HBM (N elements)", ha="center", fontsize=9)
    for p in range(4):
        ax1.add_patch(Rectangle((3.5, 5.5 - p * 0.5), 0.5, 0.5, facecolor="#9fbbe0", edgecolor="#333"))
        ax1.text(3.3, 5.75 - p * 0.5, f"p{p}", ha="right", va="center", fontsize=7)
    ax1.annotate("", xy=(3.75, 6.05), xytext=(1.0, 6.95), arrowprops={"arrowstyle": "-|>"})
    ax1.text(
        4.3,
        5.0,
        "SBUF tile (ROW_CHUNK, 1)\none element per partition\nN / ROW_CHUNK iterations,\n3 DMAs + 1 instruction each",
        fontsize=8,
        va="center",
    )
    ax1.set_xlim(-0.5, 8.5)
    ax1.set_ylim(2.5, 8.3)
    ax1.set_title("vector_add_tiled (ROW_CHUNK = 4 shown)", fontsize=10)

    # stream: reshape to (128, N/128), FREE_DIM columns per tile
    rows, cols, free = 8, 12, 3
    for r in range(rows):
        for c in range(cols):
            tile = c // free
            color = ["#9fbbe0", COLORS["hbm"]][tile % 2]
            ax2.add_patch(Rectangle((c * 0.5, 6 - r * 0.5), 0.5, 0.5, facecolor=color, edgecolor="#555", lw=0.5))
    ax2.add_patch(Rectangle((0, 6 - (rows - 1) * 0.5), free * 0.5, rows * 0.5, fill=False, edgecolor="#b03a2e", lw=2.2))
    ax2.text(3, 6.8, "a_vec.reshape((128, N/128)): row p = partition p", ha="center", fontsize=9)
    ax2.text(
        0.75,
        1.7,
        "one (128, FREE_DIM) tile\n= one DMA per operand,\none tensor_tensor",
        ha="center",
        fontsize=8,
        color="#b03a2e",
    )
    ax2.text(6.3, 4.2, "N / (128 * FREE_DIM)\niterations", fontsize=8, va="center")
    ax2.set_xlim(-0.5, 8.5)
    ax2.set_ylim(1.0, 7.2)
    ax2.set_title("vector_add_stream (FREE_DIM = 3 shown, 8 of 128 partitions)", fontsize=10)
    save(fig, path)
    plt.close(fig)
