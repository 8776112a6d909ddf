"""Figure: the memory hierarchy of one NeuronCore (HBM, SBUF, PSUM) and which engine reads/writes what."""

from __future__ import annotations

from pathlib import Path

from figstyle import COLORS, arrow, box, save


def draw(path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9.5, 6.2))
    ax.set_xlim(0, 10)
    ax.set_ylim(-0.5, 7)
    ax.axis("off")

    box(
        ax,
        0.3,
        0.3,
        9.4,
        1.1,
        "HBM (device memory)\ntrn2: 96 GiB per chip, ~2.9 TB/s shared by 8 cores",
        COLORS["hbm"],
        10,
        "bold",
    )
    box(ax, 0.3, 2.0, 2.2, 1.0, "DMA engines (16)\n~23 B/ns each", COLORS["dma"], 9)
    arrow(ax, 1.4, 1.4, 1.4, 2.0, both=True)

    ax.add_patch(plt.Rectangle((2.9, 1.75), 6.8, 5.0, fill=False, linestyle="--", edgecolor="#777777"))
    ax.text(9.6, 6.6, "one NeuronCore (trn2: NeuronCore-v3)", ha="right", va="top", fontsize=9, color="#555555")

    box(
        ax,
        3.2,
        2.0,
        4.0,
        1.5,
        "SBUF (state buffer)\n128 partitions x 224 KiB = 28 MiB\ntiles: [partition <= 128, free ...]",
        COLORS["sbuf"],
        9,
        "bold",
    )
    box(ax, 7.5, 2.0, 2.0, 1.5, "PSUM\n128 x 16 KiB\n8 banks x 2 KiB\n(fp32 accumulate)", COLORS["psum"], 9, "bold")
    arrow(ax, 2.5, 2.5, 3.2, 2.5, both=True)
    ax.text(2.85, 3.15, "dma_copy", ha="center", fontsize=8)

    box(ax, 3.2, 4.6, 1.9, 1.3, "Tensor Engine\n128x128 systolic\nmatmul, transpose", COLORS["tensor"], 8)
    box(ax, 5.3, 4.6, 1.3, 1.3, "Vector\nEngine", COLORS["vector"], 8)
    box(ax, 6.8, 4.6, 1.3, 1.3, "Scalar\nEngine", COLORS["scalar"], 8)
    box(ax, 8.3, 4.6, 1.2, 1.3, "GpSimd\nEngine", COLORS["gpsimd"], 8)

    arrow(ax, 4.0, 3.5, 4.0, 4.6, "reads", color="#b03a2e", offset=(-0.35, 0))
    arrow(ax, 4.6, 4.6, 8.0, 3.5, "writes (+=)", color="#b03a2e", offset=(-0.9, 0.1))
    for x in (5.95, 7.45):
        arrow(ax, x - 0.15, 3.5, x - 0.15, 4.6, both=True, color="#5b4a8b")
        arrow(ax, x + 0.2, 4.6, 8.3, 3.5, both=True, color="#5b4a8b")
    arrow(ax, 8.9, 4.6, 6.9, 3.5, both=True, color="#555555")
    ax.text(
        5.0,
        -0.2,
        "engines run independent instruction streams in parallel; the compiler inserts the semaphores between them",
        ha="center",
        fontsize=8,
        color="#333333",
    )
    ax.text(8.6, 1.9, "no DMA to/from PSUM", ha="center", va="top", fontsize=7, color="#8a2b1f")
    save(fig, path)
    plt.close(fig)
