"""PerfReport: the numbers neuron-profile and nki.benchmark would show for one kernel run."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from nkisim.core.instr import ENGINE_NAMES, Buf, Engine, Instr
from nkisim.perf.costs import TargetCosts
from nkisim.perf.model import int_attr
from nkisim.perf.scheduler import Schedule

COMPUTE_ENGINES = ("TensorE", "VectorE", "ScalarE", "GpSimdE")


@dataclass
class PerfReport:
    """Modelled performance of one kernel run (times in microseconds)."""

    target: str
    kernel_name: str
    total_us: float  # modelled neuron-profile total_time: launch overhead + makespan
    nc_latency_us: float  # what nki.benchmark reports (deterministic: every percentile)
    makespan_us: float  # first instruction start to last completion
    launch_overhead_us: float
    engine_busy_us: dict[str, float]
    engine_util: dict[str, float]  # busy / total_time, like neuron-profile's "active %"
    dma_queue_busy_us: list[float]
    instr_count: int
    instr_count_by_engine: dict[str, int]
    dma_count: int
    dma_bytes: int
    dma_descriptors: int
    hbm_read_bytes: int
    hbm_write_bytes: int
    matmul_count: int
    matmul_flops: float
    transpose_flops: float
    mfu: float  # matmul hardware flops (fp32 x mfu_fp32_weight) / (bf16 peak x total_time): course neuron-profile
    hfu: float  # (matmul + transpose) hardware flops / (bf16 peak x total_time)  (SCH)
    mbu: float  # HBM bytes / total_time / one stack's bandwidth (SCH)
    act_table_loads: int
    throttled_us: float
    dge: bool
    critical_path: list[tuple[int, str, str, str, float]] = field(default_factory=list)
    schedule: Schedule | None = field(default=None, repr=False, compare=False)
    core_latency_us: list[float] = field(default_factory=list)  # SPMD over several cores: each core's latency
    psum_spills: int = 0  # PSUM tiles the compiler spilled past the 8 banks (costed as VectorE copies)
    psum_spill_bytes: int = 0  # their bytes per partition
    # SBUF spilling (core.spill): neuron-profile's data_movement metrics, "the total size of intermediate data in
    # bytes the workload spills from SBUF into device memory" / "reloads back into SBUF" (NKI performance guide)
    spill_save_bytes: int = 0
    spill_reload_bytes: int = 0
    spill_count: int = 0  # spill save and reload DMAs

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("schedule", None)
        d["critical_path"] = [list(x) for x in self.critical_path]
        return d

    def critical_path_by_location(self, top: int = 10) -> list[tuple[str, str, int, float]]:
        """Critical-path time grouped by (kernel line, op): where the latency goes."""
        agg: dict[tuple[str, str], list] = {}
        for _seq, op, _eng, where, dur in self.critical_path:
            e = agg.setdefault((where, op), [0, 0.0])
            e[0] += 1
            e[1] += dur
        rows = sorted(((w, o, c, t) for (w, o), (c, t) in agg.items()), key=lambda r: -r[3])
        return rows[:top]


def _union_length(intervals: list[tuple[float, float]]) -> float:
    if not intervals:
        return 0.0
    intervals.sort()
    total = 0.0
    cs, ce = intervals[0]
    for s, e in intervals[1:]:
        if s > ce:
            total += ce - cs
            cs, ce = s, e
        elif e > ce:
            ce = e
    return total + (ce - cs)


def build_report(
    instrs: list[Instr], sch: Schedule, tc: TargetCosts, *, kernel_name: str = "", dge: bool = False
) -> PerfReport:
    mm_flops = tr_flops = hw_mm = hw_tr = 0.0
    w32 = tc.mfu_fp32_weight
    mm_count = 0
    by_engine: dict[str, int] = {}
    hbm_r = hbm_w = 0
    spills = spill_bytes = 0
    sb_save = sb_reload = sb_spills = 0
    for ins in instrs:
        name = ENGINE_NAMES.get(ins.engine, "Unknown")
        by_engine[name] = by_engine.get(name, 0) + 1
        op = ins.op
        if not ins.srcs:
            pass
        elif op == "nc_matmul":
            a = ins.attrs
            st = ins.srcs[0]
            mv = ins.srcs[1] if len(ins.srcs) > 1 else st
            k = int_attr(a, "K", st.partitions)
            m = int_attr(a, "M", st.free_elems)
            nn = int_attr(a, "N", mv.free_elems)
            f = 2.0 * k * m * nn  # SCH: 2 x active_rows x active_cols x elements
            hw = f * w32 if (st.dtype == "float32" or mv.dtype == "float32") else f
            mm_count += 1
            if a.get("is_transpose"):
                tr_flops += f
                hw_tr += hw
            else:
                mm_flops += f
                hw_mm += hw
        elif op == "nc_transpose" and ins.engine == Engine.TENSOR:
            d = ins.srcs[0]
            p = int_attr(ins.attrs, "P", d.partitions)
            fr = int_attr(ins.attrs, "F", d.free_elems)
            tr_flops += 2.0 * p * fr * p
            hw_tr += 2.0 * p * fr * p
            mm_count += 1
        elif op == "tensor_copy" and ins.attrs.get("psum_spill"):
            spills += 1
            spill_bytes += ins.srcs[0].free_elems * ins.srcs[0].itemsize
        elif op == "dma_copy":
            nb = int_attr(ins.attrs, "bytes", 0)
            if ins.srcs and ins.srcs[0].region.buf == Buf.HBM:
                hbm_r += nb
            if ins.dsts and ins.dsts[0].region.buf == Buf.HBM:
                hbm_w += nb
            kind = ins.attrs.get("spill")
            if kind is not None:
                sb_spills += 1
                if kind == "save":
                    sb_save += nb
                else:
                    sb_reload += nb
    makespan_us = sch.makespan_ns / 1000.0
    total_us = makespan_us + tc.launch_overhead_us
    busy = {k: v / 1000.0 for k, v in sch.busy_ns.items() if k != "DMA"}
    for e in COMPUTE_ENGINES:
        busy.setdefault(e, 0.0)
    spans = [(s, e) for portions in sch.dma_portions.values() for (_q, s, e) in portions]
    busy["DMA"] = _union_length(spans) / 1000.0
    util = {k: (v / total_us if total_us > 0 else 0.0) for k, v in busy.items()}
    peak = tc.tensor_peak_flops
    denom = peak * total_us * 1e-6
    mfu = hw_mm / denom if denom > 0 else 0.0
    hfu = (hw_mm + hw_tr) / denom if denom > 0 else 0.0
    mbu_denom = tc.hbm_stack_bw_bytes_per_ns * total_us * 1000.0
    mbu = (hbm_r + hbm_w) / mbu_denom if mbu_denom > 0 else 0.0
    return PerfReport(
        target=tc.name,
        kernel_name=kernel_name,
        total_us=total_us,
        nc_latency_us=total_us + tc.nc_latency_extra_us,
        makespan_us=makespan_us,
        launch_overhead_us=tc.launch_overhead_us,
        engine_busy_us=busy,
        engine_util=util,
        dma_queue_busy_us=[b / 1000.0 for b in sch.dma_engine_busy_ns],
        instr_count=len(instrs),
        instr_count_by_engine=by_engine,
        dma_count=sch.dma_count,
        dma_bytes=sch.dma_bytes,
        dma_descriptors=sch.dma_descriptors,
        hbm_read_bytes=hbm_r,
        hbm_write_bytes=hbm_w,
        matmul_count=mm_count,
        matmul_flops=mm_flops,
        transpose_flops=tr_flops,
        mfu=mfu,
        hfu=hfu,
        mbu=mbu,
        act_table_loads=sch.act_table_loads,
        throttled_us=sch.throttled_ns / 1000.0,
        dge=dge,
        critical_path=critical_path(instrs, sch),
        schedule=sch,
        psum_spills=spills,
        psum_spill_bytes=spill_bytes,
        spill_save_bytes=sb_save,
        spill_reload_bytes=sb_reload,
        spill_count=sb_spills,
    )


def critical_path(instrs: list[Instr], sch: Schedule) -> list[tuple[int, str, str, str, float]]:
    """Chain of instructions that bound the end time, first to last: (seq, op, engine, where, on_path_us).

    ``on_path_us`` is the stretch of the timeline the instruction adds to the path: from the previous link's end
    (its wait for that link's result included) to its own end.  Links overlap (a DMA may start once the one
    before it has *read* its buffer), so their own durations add up to more than the kernel's latency; these
    shares add up to the path's span, which is what "time on the path" has to mean in the summary."""
    if not instrs:
        return []
    last = max(range(len(instrs)), key=lambda j: instrs[j].end_ns)
    links = []
    seen = set()
    j = last
    while j >= 0 and j not in seen:
        seen.add(j)
        links.append(instrs[j])
        j = sch.pred[j]
    links.reverse()
    chain = []
    cursor = links[0].start_ns
    for ins in links:
        share = max(0.0, ins.end_ns - cursor)
        cursor = max(cursor, ins.end_ns)
        chain.append((ins.seq, ins.op, ENGINE_NAMES.get(ins.engine, "Unknown"), ins.where, share / 1000.0))
    return chain
