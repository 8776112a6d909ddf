# STAFF-ONLY: runs the seed-000 calibration kernels (complete solutions); excluded from the student release.
"""``python -m nkisim.calibration.corpus.seed000_report``: seed 000's conv1d steps on nkisim (trn1) next to the
hardware: nc_latency per step, and per instruction type the count and summed engine occupancy the model gives
against the profiler figures the seed quotes (steps 5 and 6).  Options: ``--steps 0,5`` (default: all),
``--shape N,C,W`` (default: the seed's 8,512,2048)."""

from __future__ import annotations

import argparse
import os
import time
from collections import defaultdict

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# hardware (seeds/000, trn1): nc_latency per step, us; profiler (count, total ms) per instruction type
MEASURED_US = (8007.0, 8007.0, 8010.0, 7934.0, 5602.0, 4955.0, 461.0)
PROFILE = {5: {"tensor_tensor": (65536, 3.84), "tensor_reduce": (16384, 1.03)},
           6: {"tensor_tensor": (512, 0.2), "tensor_reduce": (512, 0.2)}}


def run_step(step: int, shape: tuple[int, int, int]) -> tuple[float, dict[str, tuple[int, float]], float]:
    """(nc_latency us, op -> (count, summed occupancy ms), wall seconds)."""
    import numpy as np

    from nkisim import _hook

    _hook.install()
    from nkisim.calibration.corpus import seed000
    from nkisim.core.runtime import run_kernel
    from nkisim.perf import estimate

    n, c, w = shape
    t0 = time.time()
    img = np.zeros((n, c, 1, w), np.float32)
    filt = np.zeros((c, 1, 1, 3), np.float32)
    run = run_kernel(seed000.STEPS[step], (img, filt), mode="timing", target="trn1")
    rep = estimate(run.trace, "trn1")
    per: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for ins in run.trace:
        e = per[ins.op]
        e[0] += 1
        e[1] += ins.cost_ns / 1e6
    return rep.nc_latency_us, {k: (v[0], v[1]) for k, v in per.items()}, time.time() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nkisim.calibration.corpus.seed000_report", description=__doc__)
    ap.add_argument("--steps", default="0,1,2,3,4,5,6")
    ap.add_argument("--shape", default="8,512,2048")
    args = ap.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    full = shape == (8, 512, 2048)
    for step in (int(s) for s in args.steps.split(",")):
        us, per, secs = run_step(step, shape)
        hw = MEASURED_US[step] if full else None
        ratio = f"{us / hw:.2f}x" if hw else "-"
        print(f"step {step}: nkisim {us:.1f} us, hardware {hw if hw else '-'} us, ratio {ratio}  ({secs:.0f} s)")
        for op in sorted(per):
            cnt, ms = per[op]
            prof = PROFILE.get(step, {}).get(op) if full else None
            hwtxt = f"   hardware profile: {prof[0]} in {prof[1]:.2f} ms ({prof[1] * 1e6 / prof[0]:.0f} ns each)" \
                if prof else ""
            print(f"    {op:14s} {cnt:7d} instrs, busy {ms:8.3f} ms ({ms * 1e6 / cnt:6.1f} ns each){hwtxt}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
