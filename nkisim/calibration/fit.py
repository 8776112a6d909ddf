"""Fit the few undocumented cost constants to hardware measurements (coordinate search on log error).

Only constants the docs leave open are fitted (launch overhead, DMA fixed latency and issue cost, per-instruction
fixed latency scale); everything else stays as derived from the documented facts in ``nkisim.perf.costs``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nkisim.core.instr import Trace
from nkisim.perf import estimate
from nkisim.perf.costs import TargetCosts

# parameter -> (lower, upper) bounds, within the documented ranges where the docs give one
FIT_BOUNDS: dict[str, tuple[float, float]] = {
    "launch_overhead_us": (0.0, 40.0),
    "dma_pre_latency_ns": (500.0, 2500.0),  # DMA figures 0.74-1.0 us; DBW ~1.3 us
    "dma_post_latency_ns": (0.0, 800.0),
    "dma_issue_dge_ns": (300.0, 900.0),  # A3/DGE "~600 ns"
    "dma_issue_dge_per_desc_ns": (0.0, 5.0),
    "dma_issue_static_ns": (0.0, 500.0),
    "instr_latency_scale": (0.25, 2.0),
    "nc_latency_extra_us": (0.0, 20.0),
}


@dataclass
class FitRow:
    name: str
    trace: Trace
    measured_us: float
    metric: str  # 'nc_latency' or 'total_time'
    dge: bool | None = None


def predict(row: FitRow, tc: TargetCosts) -> float:
    rep = estimate(row.trace, costs=tc, dge=row.dge)
    return rep.nc_latency_us if row.metric == "nc_latency" else rep.total_us


def loss(rows: list[FitRow], tc: TargetCosts) -> float:
    total = 0.0
    for r in rows:
        lr = math.log(max(predict(r, tc), 1e-9) / r.measured_us)
        total += lr * lr + (10.0 * (abs(lr) - math.log(1.8)) ** 2 if abs(lr) > math.log(1.8) else 0.0)
    return total / max(1, len(rows))


def fit(rows: list[FitRow], tc: TargetCosts, params: list[str], rounds: int = 3,
        log=None) -> tuple[TargetCosts, float]:
    """Coordinate search over ``params`` within FIT_BOUNDS; returns the fitted table and its loss."""
    best = loss(rows, tc)
    for rnd in range(rounds):
        for p in params:
            lo, hi = FIT_BOUNDS[p]
            cur = getattr(tc, p)
            span = (hi - lo) / (2.0 ** (rnd + 1))
            steps = (-1.0, -0.5, -0.25, -0.125, -1 / 16, 1 / 16, 0.125, 0.25, 0.5, 1.0)
            for cand in sorted({min(hi, max(lo, cur + k * span)) for k in steps}):
                trial = replace(tc, **{p: cand})
                val = loss(rows, trial)
                if val < best - 1e-12:
                    best, tc = val, trial
            if log is not None:
                log(f"round {rnd} {p} = {getattr(tc, p):.4g}  loss {best:.5f}")
    return tc, best
