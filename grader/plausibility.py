"""Physical plausibility of a performance result: a latency no NeuronCore could reach earns no credit.

On nkisim a latency is a model's estimate, so a kernel that games the model (an exploit nkisim does not yet
close, docs/grading-security.md) could be timed faster than any hardware run.  This guard is the backstop: it
knows nothing about how the kernel works, only what the problem demands, and flags a result that beats

* **the TensorE peak** for the test's dtype: the problem's useful matmul flops (grader/problems/) at the
  course's MFU convention (``nkisim.perf.costs.course_mfu``: BF16/FP16 peak, fp32 counted twice, i.e. against
  half the peak).  Above 100% is impossible: a 16-bit product needs one TensorE pass per column at the BF16
  rate (A2/A3 peaks), and any fp32-accurate product at least two (the documented fp32 matmul is four; a
  bf16 hi/lo split needs three; only a 0/1 operand halves it, and image data is not 0/1);
* **the DMA floor**: every input byte read and every output byte written once (``problems.io_bytes``) at the
  combined rate of the core's DMA engines (``TargetCosts.dma_engines`` x ``dma_bw_bytes_per_ns``: 16 x 23 B/ns on
  trn2, 16 x 17 on trn1; the DBW/DMA tables of trainium-facts.md §5.1), the fastest any data can enter or leave:
  ``nkisim.perf.costs.dma_floor_us``, the floor the cost model keeps too (a single HBM -> HBM dma_copy is charged
  its read and its write, never less than this floor for the bytes it moves).

and, on nkisim, a trace in which nkisim recorded a placement it could not alias as the hardware does (direct
allocation at addresses that are not a fixed stride: ``meta["unaliased_placements"]``).

A flagged result scores 0 for that test; the reason leads the test's message (every report format shows it) and
``TestResult.implausible`` lists it for course staff.  Figures come from nkisim's cost tables, never from here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader import problems
from grader.records import Status, TestResult

FLAG = "flagged for course staff"


def findings(inv: problems.Invocation, latency_us: float, target: str, trace: Any = None) -> list[str]:
    """Why ``latency_us`` cannot be a real run of a correct kernel on ``inv`` (empty when it can); ``trace`` (on
    nkisim) adds what nkisim itself could not model as the hardware runs it."""
    from nkisim.perf.costs import costs_for, course_mfu, dma_floor_us

    tc = costs_for(target)
    out: list[str] = []
    if not latency_us > 0:  # also NaN
        return [f"the latency {latency_us} us is not a positive time"]
    if inv.flops > 0:
        fp32 = np.dtype(inv.out_dtype) == np.float32
        mfu = course_mfu(inv.flops, latency_us, fp32, target)
        if mfu > 1.0:
            peak = tc.fp32_mfu_peak_flops if fp32 else tc.tensor_peak_flops
            out.append(
                f"{inv.flops / 1e9:.1f} GFLOP of {np.dtype(inv.out_dtype).name} matmul work in {latency_us:.1f} us "
                f"is {mfu:.0%} of the {target} TensorE peak for that dtype ({peak / 1e12:.1f} TFLOPS at the course's "
                f"MFU convention), more than the hardware can do"
            )
    need = problems.io_bytes(inv)
    floor_us = dma_floor_us(tc, need)  # the cost model's own floor (an HBM -> HBM copy is charged both sides)
    if latency_us < floor_us:
        out.append(
            f"moving the {need / 1e6:.1f} MB every correct kernel must read and write takes at least "
            f"{floor_us:.1f} us on the {tc.dma_engines} DMA engines of a {target} NeuronCore "
            f"({tc.dma_engines * tc.dma_bw_bytes_per_ns:.0f} GB/s), more than the {latency_us:.1f} us measured"
        )
    meta = getattr(trace, "meta", None)
    unaliased = meta.get("unaliased_placements") if isinstance(meta, dict) else None
    if unaliased:
        out.append(
            f"the kernel placed {unaliased} tensor(s) by direct allocation at addresses that are not a fixed "
            "stride, which nkisim gives storage of their own: on Trainium they alias the other tensors at those "
            "addresses, so this timing is not the hardware's"
        )
    return out


def without_unchecked_promises(trace: Any) -> Any:
    """``trace`` with the hints nkisim granted without checking their promise turned off, so they are costed on
    the conservative side.  nkisim decides and says which (``nkisim.core.instr.UNVERIFIED``: the nc_matmul
    onezero and transpose-mode hints of a run whose values were not computed, i.e. a timed run when
    ``verify_performance_outputs = false``; docs/grading-security.md G3/G4); hints it checked on the values, or that
    hold by construction (a partition broadcast's ones, G6), are not listed and keep their speed-up."""
    from nkisim.core.instr import UNVERIFIED

    for ins in trace.instrs:
        hints = ins.attrs.get(UNVERIFIED)
        if hints:
            ins.attrs = {**ins.attrs, **dict.fromkeys(hints, False)}
    return trace


def withhold_credit(res: TestResult, inv: problems.Invocation, target: str, trace: Any = None) -> bool:
    """Flag ``res`` (score 0, reason first in its message) when its latency is implausible; True if flagged."""
    found = findings(inv, float(res.latency_us or 0.0), target, trace)
    if not found:
        return False
    res.status, res.score = Status.FAILED, 0.0
    res.implausible = found
    res.message = (
        f"{FLAG}: no performance credit, the result is not one Trainium can produce: {found[0]}"
        + "".join(f"; {f}" for f in found[1:])
        + ". Course staff will look at this submission."
    )
    return True
