"""Timeline data of a modelled run, as compact columns for the HTML profile.

The lanes and intervals are taken from :func:`nkisim.perf.perfetto.trace_events` (one truth for what the
Perfetto trace and the HTML page show); instruction details (operands, source line) come from the trace.
Strings are interned into small tables so a 100k-instruction run stays a few megabytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nkisim.core.instr import Buf, Instr, Operand
from nkisim.perf.perfetto import trace_events
from nkisim.perf.report import COMPUTE_ENGINES, PerfReport

CRITICAL_LANE = "critical path"
# lanes shown even when empty: the four compute engines (an idle engine is worth seeing)
ALWAYS_SHOWN = COMPUTE_ENGINES


@dataclass
class Timeline:
    """Columns of one profile's intervals, sorted by (lane, start); times in microseconds."""

    lanes: list[str]
    lane: np.ndarray  # int16 lane index per interval
    start: np.ndarray  # float64 us
    end: np.ndarray  # float64 us
    seq: np.ndarray  # int32 instruction sequence number (-1: not an instruction, e.g. launch overhead)
    op: np.ndarray  # int32 index into ops
    where: np.ndarray  # int32 index into wheres
    operands: np.ndarray  # int32 index into operand_texts
    crit: np.ndarray  # uint8: the instruction is on the critical path
    ops: list[str] = field(default_factory=list)
    wheres: list[str] = field(default_factory=list)
    operand_texts: list[str] = field(default_factory=list)
    end_us: float = 0.0

    def __len__(self) -> int:
        return len(self.start)


class _Interner:
    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.items: list[str] = []

    def __call__(self, s: str) -> int:
        i = self.index.get(s)
        if i is None:
            i = self.index[s] = len(self.items)
            self.items.append(s)
        return i


def _operand_text(o: Operand) -> str:
    mem = Buf(o.region.buf).name.lower() if int(o.region.buf) in (0, 1, 2) else "?"
    return f"{mem} {o.dtype}[{','.join(str(d) for d in o.shape)}]"


def describe_operands(ins: Instr) -> str:
    """'in: sbuf float32[128,512], ...; out: psum float32[128,512]' plus the attributes that set the cost."""
    parts = []
    if ins.srcs:
        parts.append("in: " + ", ".join(_operand_text(o) for o in ins.srcs))
    if ins.dsts:
        parts.append("out: " + ", ".join(_operand_text(o) for o in ins.dsts))
    extra = [f"{k}={ins.attrs[k]}" for k in ("alu", "alu0", "func", "K", "M", "N", "bytes") if k in ins.attrs]
    if extra:
        parts.append(" ".join(extra))
    return "; ".join(parts)


def _operand_index(ins: Instr, opnds: _Interner, keys: dict[tuple, int]) -> int:
    """Interned operand text; keyed on what the text shows so 100k look-alike instructions format it once."""
    a = ins.attrs
    key = (tuple((o.region.buf, o.dtype, o.shape) for o in ins.srcs),
           tuple((o.region.buf, o.dtype, o.shape) for o in ins.dsts),
           tuple(a.get(k) for k in ("alu", "alu0", "func", "K", "M", "N", "bytes")) if a else ())
    i = keys.get(key)
    if i is None:
        i = keys[key] = opnds(describe_operands(ins))
    return i


def build_timeline(instrs: list[Instr], report: PerfReport) -> Timeline:
    """Intervals per lane of a costed run (``estimate`` must have filled start/end of ``instrs``)."""
    events = trace_events(instrs, report)
    tid_name: dict[int, str] = {}
    tid_sort: dict[int, int] = {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            tid_name[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_sort_index":
            tid_sort[e["tid"]] = e["args"]["sort_index"]
    by_seq = {ins.seq: ins for ins in instrs}
    crit_seqs = {int(c[0]) for c in report.critical_path}
    ops, wheres, opnds = _Interner(), _Interner(), _Interner()
    opnd_cache: dict[int, int] = {}
    opnd_keys: dict[tuple, int] = {}
    rows: list[tuple[int, float, float, int, int, int, int, int]] = []  # tid, start, end, seq, op, where, opnd, crit
    used: set[int] = set()
    for e in events:
        if e.get("ph") != "X":
            continue
        tid = e["tid"]
        seq = e.get("args", {}).get("seq", -1)
        ins = by_seq.get(seq) if seq is not None and seq >= 0 else None
        if ins is not None:
            oi = opnd_cache.get(seq)
            if oi is None:
                oi = opnd_cache[seq] = _operand_index(ins, opnds, opnd_keys)
            w = wheres(ins.where or "?")
        else:
            seq, oi, w = -1, opnds(""), wheres("")
        s = float(e["ts"])
        rows.append((tid, s, s + float(e["dur"]), seq, ops(e["name"]), w, oi, int(seq in crit_seqs)))
        used.add(tid)
    # critical path lane: the path's instructions at their modelled start..end
    crit_tid = -1
    for c in report.critical_path:
        ins = by_seq.get(int(c[0]))
        if ins is None:
            continue
        oi = opnd_cache.get(ins.seq)
        if oi is None:
            oi = opnd_cache[ins.seq] = _operand_index(ins, opnds, opnd_keys)
        rows.append((crit_tid, ins.start_ns / 1e3, ins.end_ns / 1e3, ins.seq, ops(ins.op), wheres(ins.where or "?"),
                     oi, 1))
        used.add(crit_tid)
    tid_name[crit_tid] = CRITICAL_LANE
    tid_sort[crit_tid] = -1
    shown = sorted((t for t in tid_name if t in used or tid_name[t] in ALWAYS_SHOWN or tid_name[t].startswith("qDMA")),
                   key=lambda t: (tid_sort.get(t, t), t))
    lane_of = {t: i for i, t in enumerate(shown)}
    rows = [r for r in rows if r[0] in lane_of]
    rows.sort(key=lambda r: (lane_of[r[0]], r[1]))
    n = len(rows)
    cols = list(zip(*rows)) if n else [()] * 8
    end_us = max([report.total_us, *(r[2] for r in rows)]) if rows else report.total_us
    return Timeline(
        lanes=[tid_name[t] for t in shown],
        lane=np.fromiter((lane_of[t] for t in cols[0]), dtype=np.int16, count=n),
        start=np.asarray(cols[1], dtype=np.float64).reshape(n),
        end=np.asarray(cols[2], dtype=np.float64).reshape(n),
        seq=np.asarray(cols[3], dtype=np.int32).reshape(n),
        op=np.asarray(cols[4], dtype=np.int32).reshape(n),
        where=np.asarray(cols[5], dtype=np.int32).reshape(n),
        operands=np.asarray(cols[6], dtype=np.int32).reshape(n),
        crit=np.asarray(cols[7], dtype=np.uint8).reshape(n),
        ops=ops.items,
        wheres=wheres.items,
        operand_texts=opnds.items,
        end_us=float(end_us),
    )
