# STAFF-ONLY: excluded from the student release (tools/release.py checks for this marker).
"""Prints the modelled latency and MFU of the staff reference kernels: ``python grader/reference/figures.py``.

For each part-2 performance configuration (batch 1, 256 -> 256 channels, 3x3) the optimized and relaxed conv
references are run in timing mode and costed by nkisim's performance model (what ``nki.benchmark`` reports);
then the 4096x4096 transpose.  ``--target trn1`` models Trainium1.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO))

from nkisim import _hook  # noqa: E402

_hook.install()

from nkisim.core.runtime import run_kernel  # noqa: E402
from nkisim.perf import estimate  # noqa: E402


def load(path: Path, attr: str):
    spec = importlib.util.spec_from_file_location(f"ref_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, attr)


def conv_rows(target: str) -> list[str]:
    kernels = {
        "optimized": load(HERE / "part2" / "conv2d.py", "fused_conv2d_maxpool"),
        "relaxed": load(HERE / "relaxed" / "part2" / "conv2d.py", "fused_conv2d_maxpool"),
    }
    rows = [
        "| image | dtype | pool | optimized us | MFU | TensorE busy | relaxed us | MFU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for height, width in ((224, 224), (32, 16)):
        for pool in (1, 2):
            for dtype in ("float32", "float16"):
                X = np.zeros((1, 256, height, width), dtype)
                W = np.zeros((256, 256, 3, 3), dtype)
                bias = np.zeros(256, dtype)
                reps = {}
                for name, kernel in kernels.items():
                    run = run_kernel(kernel, (X, W, bias), {"pool_size": pool}, mode="timing", target=target)
                    reps[name] = estimate(run.trace, target)
                opt, rel = reps["optimized"], reps["relaxed"]
                rows.append(
                    f"| {height}x{width} | {dtype} | {pool} | {opt.nc_latency_us:.1f} | {opt.mfu:.1%} | "
                    f"{opt.engine_util.get('TensorE', 0):.1%} | {rel.nc_latency_us:.1f} | {rel.mfu:.1%} |"
                )
    return rows


def transpose_row(target: str) -> str:
    kernel = load(HERE / "part1" / "kernels.py", "matrix_transpose")
    run = run_kernel(kernel, (np.zeros((4096, 4096), np.float32),), mode="timing", target=target)
    rep = estimate(run.trace, target)
    return (
        f"matrix_transpose 4096x4096 float32: {rep.nc_latency_us:.1f} us, DMA busy "
        f"{rep.engine_util.get('DMA', 0):.0%}, {rep.dma_count} DMAs"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="trn2", choices=("trn2", "trn1"))
    args = parser.parse_args(argv)
    print(
        f"nkisim model, {args.target}, batch 1, 256->256 channels, 3x3 filter (nc_latency = what nki.benchmark reports)"
    )
    for row in conv_rows(args.target):
        print(row)
    print(transpose_row(args.target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
