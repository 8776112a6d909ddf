"""nkisim performance model: cost table per target -> scheduler -> PerfReport.

``estimate(trace)`` uses nothing but the trace content (the grader costs traces shipped from a sandboxed child).
"""

from __future__ import annotations

import gc

from nkisim.core.instr import Trace
from nkisim.perf.costs import DEFAULT_TARGET, TARGETS, TargetCosts, costs_for
from nkisim.perf.model import CostModel
from nkisim.perf.report import PerfReport, build_report
from nkisim.perf.scheduler import schedule

__all__ = ["estimate", "PerfReport", "TargetCosts", "costs_for", "TARGETS", "DEFAULT_TARGET", "dge_from_meta"]


def dge_from_meta(meta: dict) -> bool | None:
    """Hardware-DGE setting recorded in trace metadata: explicit 'dge', or '--disable-dge' in compile options."""
    if not isinstance(meta, dict):
        return None
    if isinstance(meta.get("dge"), bool):
        return meta["dge"]
    opts = meta.get("additional_compile_opt")
    if isinstance(opts, str) and "--disable-dge" in opts.split():
        return False
    return None


def estimate(
    trace: Trace,
    target: str | None = None,
    *,
    dge: bool | None = None,
    costs: TargetCosts | None = None,
) -> PerfReport:
    """Cost and schedule ``trace``; fills start_ns/end_ns/cost_ns of every instruction.

    target: 'trn2' (default) or 'trn1'; defaults to the trace's own target.  dge: whether DMAs are issued by the
    hardware descriptor generator (trn2 default on; off with ``--disable-dge``); defaults to the trace metadata.
    costs: a full cost table (calibration/testing), overriding ``target``.
    """
    tc = costs if costs is not None else costs_for(target or getattr(trace, "target", None) or DEFAULT_TARGET)
    if dge is None:
        dge = dge_from_meta(getattr(trace, "meta", {}) or {})
    model = CostModel(tc, dge=dge)
    instrs = list(trace.instrs)
    enabled = gc.isenabled()
    gc.disable()  # see scheduler.schedule: cyclic GC over a large trace dominates otherwise
    try:
        sch = schedule(instrs, tc, model)
        return build_report(instrs, sch, tc, kernel_name=getattr(trace, "kernel_name", ""), dge=model.dge)
    finally:
        if enabled:
            gc.enable()
