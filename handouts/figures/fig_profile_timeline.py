"""Figure: a real profile timeline from nkisim (engines and DMA over time) for a small tiled matmul kernel.

The kernel below is a plain NKI kernel (C = A.T @ B in 128x512 output tiles, K accumulated in PSUM); it is not
part of the assignment.  The timeline is nkisim's performance model of it on trn2, the same data as the
Perfetto trace that ``--profile_name`` writes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from figstyle import COLORS, save


def tiled_matmul_kernel():
    import neuronxcc.nki as nki
    import neuronxcc.nki.isa as nisa
    import neuronxcc.nki.language as nl

    @nki.jit
    def matmul_at_b(a_t, b):
        """a_t: (K, M), b: (K, N) -> a_t.T @ b, with M, K multiples of 128 and N a multiple of 512."""
        K, M = a_t.shape
        _, N = b.shape
        P, NT = nl.tile_size.pmax, nl.tile_size.gemm_moving_fmax
        out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.hbm)
        for m in nl.affine_range(M // P):
            a_tile = nl.ndarray((P, K // P, P), dtype=a_t.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // P):
                nisa.dma_copy(src=a_t[k * P : (k + 1) * P, m * P : (m + 1) * P], dst=a_tile[:, k, :])
            for n in nl.affine_range(N // NT):
                b_tile = nl.ndarray((P, K // P, NT), dtype=b.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(K // P):
                    nisa.dma_copy(src=b[k * P : (k + 1) * P, n * NT : (n + 1) * NT], dst=b_tile[:, k, :])
                acc = nl.zeros((P, NT), dtype=nl.float32, buffer=nl.psum)
                for k in nl.affine_range(K // P):
                    acc += nisa.nc_matmul(a_tile[:, k, :], b_tile[:, k, :])
                res = nisa.tensor_copy(acc)
                nisa.dma_copy(src=res, dst=out[m * P : (m + 1) * P, n * NT : (n + 1) * NT])
        return out

    return matmul_at_b


def timeline(target: str = "trn2"):
    """(rows, report): per-row lists of (start_us, end_us, op) for the engines and packed DMA lanes."""
    from nkisim.core.runtime import run_kernel
    from nkisim.perf import estimate

    kernel = tiled_matmul_kernel()
    a_t = np.zeros((512, 256), dtype=np.float16)
    b = np.zeros((512, 2048), dtype=np.float16)
    run = run_kernel(kernel, args=(a_t, b), mode="timing", target=target)
    report = estimate(run.trace, target)
    rows: dict[str, list[tuple[float, float, str]]] = {}
    dma_lanes: list[float] = []
    for ins in run.trace.instrs:
        span = (ins.start_ns / 1e3, ins.end_ns / 1e3, ins.op)
        if ins.op == "dma_copy":
            lane = next((i for i, end in enumerate(dma_lanes) if end <= span[0]), len(dma_lanes))
            if lane == len(dma_lanes):
                dma_lanes.append(0.0)
            dma_lanes[lane] = span[1]
            rows.setdefault(f"DMA {lane}", []).append(span)
        else:
            rows.setdefault(ins.engine.name.title() + "E", []).append(span)
    return rows, report


def draw(path: Path) -> None:
    import matplotlib.pyplot as plt

    rows, report = timeline()
    order = [r for r in ("TensorE", "VectorE", "ScalarE", "GpsimdE") if r in rows]
    order += sorted((r for r in rows if r.startswith("DMA")), key=lambda r: int(r.split()[1]))
    color = {
        "TensorE": COLORS["tensor"],
        "VectorE": COLORS["vector"],
        "ScalarE": COLORS["scalar"],
        "GpsimdE": COLORS["gpsimd"],
    }
    fig, ax = plt.subplots(figsize=(11, 0.45 * len(order) + 1.6))
    for y, name in enumerate(order):
        spans = rows[name]
        ax.broken_barh(
            [(s, max(e - s, 0.01)) for s, e, _ in spans],
            (y - 0.38, 0.76),
            facecolors=color.get(name, COLORS["dma"]),
            edgecolors="#555555",
            linewidth=0.3,
        )
    ax.set_yticks(range(len(order)), order)
    ax.invert_yaxis()
    ax.set_xlabel(
        "time since the first instruction (\u03bcs, nkisim model of trn2, launch overhead excluded); "
        "DMA rows: transfers in flight, trigger to completion"
    )
    ax.set_title(
        f"Profile of a 256x512 @ 512x2048 fp16 tiled matmul: {report.total_us:.1f} \u03bcs modelled, "
        f"{report.matmul_count} matmuls, {report.dma_count} DMAs",
        fontsize=10,
    )
    ax.grid(axis="x", alpha=0.3)
    save(fig, path)
    plt.close(fig)
