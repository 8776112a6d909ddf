"""nkisim performance model: cost table per target -> scheduler -> PerfReport.

``estimate(trace)`` uses nothing but the trace content (the grader costs traces shipped from a sandboxed child).
"""

from __future__ import annotations

import gc

from nkisim.core.instr import Trace
from nkisim.perf.costs import DEFAULT_TARGET, TARGETS, TargetCosts, costs_for
from nkisim.perf.model import CostModel
from nkisim.perf.report import PerfReport, build_report
from nkisim.perf.scheduler import schedule, schedule_lockstep

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
    name = getattr(trace, "kernel_name", "")
    cores = spmd_cores(getattr(trace, "meta", None) or {}, trace.instrs)
    enabled = gc.isenabled()
    gc.disable()  # see scheduler.schedule: cyclic GC over a large trace dominates otherwise
    try:
        if not cores:
            model = CostModel(tc, dge=dge)
            instrs = list(trace.instrs)
            return build_report(instrs, schedule(instrs, tc, model), tc, kernel_name=name, dge=model.dge)
        # SPMD grid: each NeuronCore runs its programs one after another (a barrier between programs); cores run
        # in parallel with their own engines, so the kernel's latency is the slowest core's (MODEL.md "SPMD").
        # An LNC=2 launch whose cores synchronise (nisa.sendrecv, nisa.core_barrier) is scheduled in lockstep.
        reports = []
        models = [CostModel(tc, dge=dge) for _ in cores]
        syncs = _sync_points(trace.meta, cores)
        if syncs is not None:
            schedules = schedule_lockstep([(instrs, bars, sy) for (instrs, bars), sy in zip(cores, syncs)], tc,
                                          models)
        else:
            schedules = [schedule(instrs, tc, model, barriers) for (instrs, barriers), model in zip(cores, models)]
        for (instrs, _), sch, model in zip(cores, schedules, models):
            reports.append(build_report(instrs, sch, tc, kernel_name=name, dge=model.dge))
        slowest = max(reports, key=lambda r: r.total_us)
        slowest.core_latency_us = [r.nc_latency_us for r in reports]
        return slowest
    finally:
        if enabled:
            gc.enable()


def _sync_points(meta: dict, cores) -> list[list[int]] | None:
    """Per core, the indices of its cross-core synchronisation instructions (``attrs['sync']``), when the launch
    recorded any (``meta['spmd']['syncs']``); None otherwise."""
    spmd = meta.get("spmd") if isinstance(meta, dict) else None
    if not isinstance(spmd, dict) or not spmd.get("syncs"):
        return None
    return [[k for k, ins in enumerate(instrs) if ins.attrs and "sync" in ins.attrs] for instrs, _ in cores]


def spmd_cores(meta: dict, instrs) -> list[tuple[list, list[int]]] | None:
    """Split an SPMD trace per NeuronCore: [(its instructions in program order, program start indices)], or None
    for a kernel without a launch grid."""
    spmd = meta.get("spmd") if isinstance(meta, dict) else None
    if not isinstance(spmd, dict):
        return None
    starts = [int(s) for s in spmd.get("program_start", ())]
    owner = [int(c) for c in spmd.get("program_core", ())]
    if not starts or len(owner) != len(starts):
        return None
    if len(set(owner)) == 1:  # one core: the whole trace, a barrier at every program
        return [(list(instrs), starts)]
    ends = starts[1:] + [len(instrs)]
    per: dict[int, tuple[list, list[int]]] = {}
    for s, e, c in zip(starts, ends, owner):
        sub, bars = per.setdefault(c, ([], []))
        bars.append(len(sub))
        sub.extend(instrs[s:e])
    return [per[c] for c in sorted(per)]
