"""Chrome/Perfetto trace JSON of a modelled run: one track per engine and per DMA queue.

Opens in https://ui.perfetto.dev or chrome://tracing (Trace Event Format, complete "X" events, microseconds).
"""

from __future__ import annotations

import json
import os
import secrets

from nkisim.core.instr import ENGINE_NAMES, Engine, Instr
from nkisim.perf.report import PerfReport

PID = 1
TRACKS = {"TensorE": 1, "VectorE": 2, "ScalarE": 3, "GpSimdE": 4, "SyncE": 5, "DMA issue": 9, "Runtime": 99}
DMA_TID0 = 10
MAX_DMA_EVENTS = 300_000  # beyond this, a DMA group is drawn once (on its first queue) to keep files small


def _meta(name: str, tid: int, args: dict) -> dict:
    return {"name": name, "ph": "M", "pid": PID, "tid": tid, "ts": 0, "dur": 0, "args": args}


def trace_events(instrs: list[Instr], report: PerfReport) -> list[dict]:
    sch = report.schedule
    n_q = len(report.dma_queue_busy_us) or 16
    ev: list[dict] = [_meta("process_name", 0, {"name": f"NeuronCore ({report.target}, nkisim model)"})]
    for name, tid in TRACKS.items():
        ev.append(_meta("thread_name", tid, {"name": name}))
        ev.append(_meta("thread_sort_index", tid, {"sort_index": tid}))
    for q in range(n_q):
        ev.append(_meta("thread_name", DMA_TID0 + q, {"name": f"qDMA{q}"}))
        ev.append(_meta("thread_sort_index", DMA_TID0 + q, {"sort_index": DMA_TID0 + q}))
    total_groups = sum(len(g[0]) for p in (sch.dma_portions.values() if sch else ()) for g in p)
    compact = total_groups > MAX_DMA_EVENTS
    for idx, ins in enumerate(instrs):
        args = {"seq": ins.seq, "where": ins.where}
        if ins.engine == Engine.DMA or ins.op == "dma_copy":
            args["bytes"] = ins.attrs.get("bytes", 0)
            args["via"] = ins.attrs.get("via", "dma_copy")
            args["done_us"] = round(ins.end_ns / 1000.0, 6)
            if sch is not None and idx in sch.dma_issue:
                _q, s, e = sch.dma_issue[idx]
                ev.append({"name": "dma_issue", "cat": "DMA", "ph": "X", "ts": s / 1000.0, "dur": (e - s) / 1000.0,
                           "pid": PID, "tid": TRACKS["DMA issue"], "args": {"seq": ins.seq}})
            groups = sch.dma_portions.get(idx, []) if sch is not None else []
            for engs, s, e in groups:
                for q in (engs[:1] if compact else engs):
                    ev.append({"name": ins.op, "cat": "DMA", "ph": "X", "ts": s / 1000.0, "dur": (e - s) / 1000.0,
                               "pid": PID, "tid": DMA_TID0 + q, "args": args})
            continue
        if ins.cost_ns <= 0.0:  # an elided PSUM zero-init (scheduler): no instruction on hardware, nothing to draw
            continue
        name = ENGINE_NAMES.get(ins.engine, "VectorE")
        tid = TRACKS.get(name, TRACKS["VectorE"])
        args["ready_us"] = round(ins.end_ns / 1000.0, 6)
        for k in ("K", "M", "N", "alu", "alu0", "func"):
            if k in ins.attrs:
                args[k] = ins.attrs[k]
        ev.append({"name": ins.op, "cat": name, "ph": "X", "ts": ins.start_ns / 1000.0, "dur": ins.cost_ns / 1000.0,
                   "pid": PID, "tid": tid, "args": args})
    ev.append({"name": "launch overhead (modelled start-up + tear-down)", "cat": "Runtime", "ph": "X",
               "ts": report.makespan_us, "dur": report.launch_overhead_us, "pid": PID, "tid": TRACKS["Runtime"],
               "args": {}})
    return ev


def perfetto_json(instrs: list[Instr], report: PerfReport) -> dict:
    return {
        "traceEvents": trace_events(instrs, report),
        "displayTimeUnit": "ns",
        "otherData": {
            "generator": "nkisim performance model",
            "note": "modelled timeline, not a hardware profile",
            "target": report.target,
            "kernel": report.kernel_name,
            "total_time_us": report.total_us,
        },
    }


def write_perfetto(instrs: list[Instr], report: PerfReport, path: str | os.PathLike) -> None:
    _atomic_write_text(path, json.dumps(perfetto_json(instrs, report), separators=(",", ":")))


def _atomic_write_text(path, text: str) -> None:
    """Write via a temporary file and os.replace.  The temporary file is created with mode 0o666 so the user's
    umask applies, as for any file they write (tempfile.mkstemp would leave every profile file 0600)."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    while True:
        tmp = os.path.join(d, f".nkisim-{os.getpid()}-{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
            break
        except FileExistsError:
            continue
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
