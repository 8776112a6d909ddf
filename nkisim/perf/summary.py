"""Text summary of a modelled run, shaped like ``neuron-profile view --output-format summary-text``.

One ``name value [unit]`` line per metric, using neuron-profile's metric names where one exists (total_time,
dma_transfer_count, hbm_read_bytes, hfu/mfu/mbu_estimated_percent, per-engine active time).  ``parse_summary``
reads it back.
"""

from __future__ import annotations

from nkisim.perf.report import COMPUTE_ENGINES, PerfReport

HEADER = "nkisim performance-model summary (modelled, not measured on hardware)"
_ENGINE_KEYS = {"TensorE": "tensor", "VectorE": "vector", "ScalarE": "scalar", "GpSimdE": "gpsimd", "DMA": "dma"}


def summary_metrics(rep: PerfReport) -> list[tuple[str, object, str]]:
    rows: list[tuple[str, object, str]] = [
        ("kernel_name", rep.kernel_name or "kernel", ""),
        ("target", rep.target, ""),
        ("total_time", round(rep.total_us, 3), "us"),
        ("nc_latency", round(rep.nc_latency_us, 3), "us"),
        ("total_exec_time", round(rep.makespan_us, 3), "us"),
        ("launch_overhead", round(rep.launch_overhead_us, 3), "us"),
        ("neuroncore_cycle_count", 0, "cycles"),
        ("instruction_count", rep.instr_count, ""),
        ("dma_transfer_count", rep.dma_count, ""),
        ("dma_transfer_bytes", rep.dma_bytes, "bytes"),
        ("dma_descriptor_count", rep.dma_descriptors, ""),
        ("hbm_read_bytes", rep.hbm_read_bytes, "bytes"),
        ("hbm_write_bytes", rep.hbm_write_bytes, "bytes"),
        ("spill_save_bytes", rep.spill_save_bytes, "bytes"),
        ("spill_reload_bytes", rep.spill_reload_bytes, "bytes"),
        ("matmul_count", rep.matmul_count, ""),
        ("hardware_flops", int(rep.matmul_flops + rep.transpose_flops), "flops"),
        ("transpose_flops", int(rep.transpose_flops), "flops"),
        ("mfu_estimated_percent", round(100.0 * rep.mfu, 3), "%"),
        ("hfu_estimated_percent", round(100.0 * rep.hfu, 3), "%"),
        ("mbu_estimated_percent", round(100.0 * rep.mbu, 3), "%"),
    ]
    for eng in (*COMPUTE_ENGINES, "DMA"):
        k = _ENGINE_KEYS[eng]
        rows.append((f"{k}_active_time", round(rep.engine_busy_us.get(eng, 0.0), 3), "us"))
        rows.append((f"{k}_active_time_percent", round(100.0 * rep.engine_util.get(eng, 0.0), 3), "%"))
    for eng, cnt in sorted(rep.instr_count_by_engine.items()):
        rows.append((f"{_ENGINE_KEYS.get(eng, eng.lower())}_instruction_count", cnt, ""))
    rows.append(("act_table_load_count", rep.act_table_loads, ""))
    rows.append(("throttle_time", round(rep.throttled_us, 3), "us"))
    rows.append(("dge_enabled", str(bool(rep.dge)).lower(), ""))
    rows.append(("psum_spill_count", rep.psum_spills, ""))
    return rows


def format_summary(rep: PerfReport, *, critical_top: int = 8) -> str:
    rows = summary_metrics(rep)
    for i, (k, _v, u) in enumerate(rows):
        if k == "neuroncore_cycle_count":
            base = {"trn1": 1.4, "trn2": 1.2}.get(rep.target, 1.2)
            rows[i] = (k, int(rep.total_us * 1000 * base), u)  # SCH: duration x base clock
    width = max(len(k) for k, _, _ in rows) + 2
    lines = [HEADER, ""]
    for k, v, u in rows:
        lines.append(f"{k:<{width}}{v}{(' ' + u) if u else ''}")
    if rep.psum_spills:
        lines += ["", f"warning: {rep.psum_spills} PSUM tile(s) ({rep.psum_spill_bytes} bytes per partition) did not "
                  "fit the 8 PSUM banks and were spilled to SBUF by the compiler; each spill is costed as a VectorE "
                  "copy. Reuse fewer, smaller PSUM tiles to avoid it."]
    if rep.spill_count:
        lines += ["", f"warning: SBUF over-subscribed: the compiler spills to device memory ({rep.spill_save_bytes} "
                  f"bytes saved, {rep.spill_reload_bytes} bytes reloaded in {rep.spill_count} DMAs, lines "
                  "'(compiler spill)' / '(compiler reload)' below). The kernel is correct but slower: fuse loops or "
                  "shrink the tiles kept live at once."]
    top = rep.critical_path_by_location(critical_top)
    if top:
        lines += ["", "critical path by kernel line (time on the path):"]
        for where, op, cnt, t in top:
            lines.append(f"  {where or '?':<28} {op:<16} x{cnt:<7} {t:.3f} us")
    return "\n".join(lines) + "\n"


def parse_summary(text: str) -> dict[str, object]:
    """Metrics of a summary written by :func:`format_summary` (numbers as float/int, others as str)."""
    out: dict[str, object] = {}
    for line in text.splitlines():
        if not line or line.startswith((" ", HEADER)) or line.endswith(":"):
            continue
        parts = line.split()
        if len(parts) < 2:
            continue
        key, val = parts[0], parts[1]
        try:
            num = float(val)
            out[key] = int(num) if num.is_integer() and "." not in val else num
        except ValueError:
            out[key] = val
    return out
