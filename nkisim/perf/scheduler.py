"""List scheduler: engines run their own instruction streams in order and in parallel.

* A compute instruction starts when its engine is free and every instruction it depends on is done:
  read-after-write, write-after-read and write-after-write on overlapping regions of the same physical buffer
  (so a reused tile buffer blocks its next writer until the last reader has read it).
* Matmuls accumulating into the PSUM region a previous matmul wrote do not wait for that matmul's result:
  TensorE accumulates in PSUM in pipeline order (A2 "near-memory accumulation").
* A DMA waits for its dependencies, then for a slot on the serial issue resource (hardware DGE on trn2, or the
  static descriptor ring), then a fixed overlappable latency, then moves its bytes on the DMA engines its SBUF
  partitions map to (engine k serves partitions 8k..8k+7).  DMA resources serve requests in time order (a request
  never waits behind a later-ready one queued before it in program order), modelled as earliest-gap placement;
  on the DMA engines a transfer that finds only shorter idle stretches moves in them, interleaved with the
  transfers already placed (the engines serve their queues round robin, DMA overview; ``_interleave``).
* HBM writes are not ordered against each other (regions are bounding byte ranges, so two disjoint strided
  stores would look overlapping); HBM RAW and WAR are honoured.

(Over 600 lines on purpose: the one scheduling loop and the resources it places on (gap resources, DMA queues,
throttling, port sharing, PSUM zero-init) share state that is read into locals on the grading path.)
"""

from __future__ import annotations

import gc
from bisect import bisect_right
from dataclasses import dataclass, field

from nkisim.core.instr import Buf, Engine, Instr
from nkisim.perf.costs import TargetCosts
from nkisim.perf.model import CostModel

_EPS = 1e-9
_PSUM, _HBM = Buf.PSUM, Buf.HBM  # enum attribute lookups are slow on the per-instruction path


class GapResource:
    """A resource that serves one request at a time, placing each one in the earliest idle gap.

    Busy intervals are kept sorted and merged when they touch; ``owner`` is the request that ends each interval,
    so the request that delayed a new one can be named for the critical path.
    """

    __slots__ = ("starts", "ends", "owners", "busy")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.owners: list[int] = []
        self.busy = 0.0

    def find(self, t: float, d: float) -> tuple[float, int]:
        """Earliest start >= t of an idle gap of length d, and the index where it would be inserted."""
        starts, ends = self.starts, self.ends
        i = bisect_right(ends, t)
        cur = t
        n = len(starts)
        while i < n:
            if cur + d <= starts[i] + _EPS:
                return cur, i
            if ends[i] > cur:
                cur = ends[i]
            i += 1
        return cur, i

    def owner_before(self, t: float, i: int) -> int:
        if i > 0 and abs(self.ends[i - 1] - t) < 1e-6:
            return self.owners[i - 1]
        return -1

    def place(self, t: float, d: float) -> tuple[float, int, int]:
        """``find`` plus the request that delayed the placement: (start, insert index, owner or -1).  The owner
        is named only when the start moved past ``t`` and an interval ends exactly there."""
        s, i = self.find(t, d)
        if s > t + _EPS and i > 0 and abs(self.ends[i - 1] - s) < 1e-6:  # owner_before, inlined (hot path)
            return s, i, self.owners[i - 1]
        return s, i, -1

    def close_before(self, t: float, owner: int) -> None:
        """No request starts before ``t`` any more (an engine blocked until then: a cross-core wait); the time is
        not counted as busy."""
        starts, ends, owners = self.starts, self.ends, self.owners
        k = bisect_right(ends, t)
        if k < len(starts) and starts[k] <= t:  # an interval runs through t: it ends the closed stretch
            hi, who = ends[k], owners[k]
            k += 1
        else:
            hi, who = t, owner
        del starts[:k], ends[:k], owners[:k]
        starts.insert(0, 0.0)
        ends.insert(0, hi)
        owners.insert(0, who)

    def insert(self, s: float, d: float, i: int, owner: int) -> None:
        e = s + d
        self.busy += d
        starts, ends, owners = self.starts, self.ends, self.owners
        left = i > 0 and abs(ends[i - 1] - s) < _EPS
        right = i < len(starts) and abs(starts[i] - e) < _EPS
        if left and right:
            ends[i - 1] = ends[i]
            owners[i - 1] = owners[i]
            del starts[i], ends[i], owners[i]
        elif left:
            ends[i - 1] = e
            owners[i - 1] = owner
        elif right:
            starts[i] = s
        else:
            starts.insert(i, s)
            ends.insert(i, e)
            owners.insert(i, owner)


class DmaEngines:
    """The DMA engines, sharing one busy-interval list among engines whose histories are identical.

    Most kernels move 128-partition tiles, so all 16 engines see the same requests; sharing their interval list
    makes such a DMA cost one gap search instead of sixteen.  A request on a subset of a sharing group splits it.
    """

    def __init__(self, n: int) -> None:
        shared = GapResource()
        self.of = [shared] * n
        self.members: dict[int, set[int]] = {id(shared): set(range(n))}
        self._memo: dict[tuple[int, ...], list] = {}

    def groups(self, engines: tuple[int, ...]) -> list[tuple[GapResource, tuple[int, ...]]]:
        """Resources serving ``engines`` (split off where a group extends beyond them), with their engines."""
        hit = self._memo.get(engines)
        if hit is not None:
            return hit
        out: list[tuple[GapResource, tuple[int, ...]]] = []
        want = set(engines)
        seen: set[int] = set()
        for e in engines:
            r = self.of[e]
            rid = id(r)
            if rid in seen:
                continue
            seen.add(rid)
            mem = self.members[rid]
            inside = mem & want
            if len(inside) != len(mem):
                clone = GapResource()
                clone.starts = list(r.starts)
                clone.ends = list(r.ends)
                clone.owners = list(r.owners)
                clone.busy = r.busy
                for x in inside:
                    self.of[x] = clone
                self._memo.clear()
                self.members[rid] = mem - inside
                self.members[id(clone)] = inside
                r = clone
                seen.add(id(clone))
            out.append((r, tuple(sorted(inside))))
        self._memo[engines] = out
        return out

    def busy_per_engine(self) -> list[float]:
        return [r.busy for r in self.of]


@dataclass
class Schedule:
    makespan_ns: float = 0.0
    busy_ns: dict[str, float] = field(default_factory=dict)
    dma_engine_busy_ns: list[float] = field(default_factory=list)
    # per DMA instruction index: (engines, start, end) of each group of engines that moved its bytes together
    dma_portions: dict[int, list[tuple[tuple[int, ...], float, float]]] = field(default_factory=dict)
    dma_issue: dict[int, tuple[int, float, float]] = field(default_factory=dict)
    pred: list[int] = field(default_factory=list)
    dma_count: int = 0
    dma_bytes: int = 0
    dma_descriptors: int = 0
    act_table_loads: int = 0
    throttled_ns: float = 0.0


def _covers(a, b) -> bool:
    """Rectangle a contains rectangle b."""
    return a[0] <= b[0] and b[1] <= a[1] and a[2] <= b[2] and b[3] <= a[3]


def _prune(entries: list[list], t: int) -> list[list]:
    """Drop entries covered by a later entry that finishes no earlier (they can never bind a dependency).

    First, in one pass, entries whose exact rectangle a later entry repeats (a tile buffer reused with the same
    access pattern, e.g. one column written per instruction: thousands of distinct rectangles, which the bounded
    covering search below would keep forever); then the covering search over what is left."""
    if len(entries) > 64:
        latest: dict[tuple, float] = {}
        uniq: list[list] = []
        for j in range(len(entries) - 1, -1, -1):
            e = entries[j]
            rect = (e[0], e[1], e[2], e[3])
            lt = latest.get(rect)
            if lt is not None and lt >= e[t]:
                continue
            if lt is None or e[t] > lt:
                latest[rect] = e[t]
            uniq.append(e)
        uniq.reverse()
        entries = uniq
    kept: list[list] = []
    for j in range(len(entries) - 1, -1, -1):
        e = entries[j]
        if len(kept) > 64:  # keep pruning cheap on pathological access patterns: keep the rest as they are
            kept.extend(entries[j::-1])
            break
        et, e0, e1, e2, e3 = e[t], e[0], e[1], e[2], e[3]
        for k in kept:  # inlined _covers: this loop is the scheduler's hottest (over half of _schedule's time)
            if k[t] >= et and k[0] <= e0 and e1 <= k[1] and k[2] <= e2 and e3 <= k[3]:
                break
        else:
            kept.append(e)
    kept.reverse()
    return kept


def _prune_against(reads: list[list], writes: list[list]) -> list[list]:
    """Drop reads covered by a later write that finishes after them (that write already waited for them)."""
    out = []
    for rd in reads:
        if not any(w[6] > rd[5] and w[4] >= rd[4] and _covers(w, rd) for w in writes):
            out.append(rd)
    return _prune(out, 4)


def _pick_engine(ins: Instr, model: CostModel, gaps: dict, ready: float, tc: TargetCosts) -> None:
    """Engine for a tensor_copy left to the compiler (engine=unknown: "compiler selects best engine based on
    engine workload", nki.isa.tensor_copy): the eligible engine that finishes it first.  Eligible: VectorE and
    GpSimdE (not with a PSUM operand, GpSimd cannot access PSUM), and ScalarE on NC-v3 (trn2)."""
    psum = any(o.region.buf == Buf.PSUM for o in ins.srcs + ins.dsts)
    cands = [Engine.VECTOR]
    if tc.vector_perf_mode:  # NC-v3: ScalarE runs tensor_copy (A3); v2 ScalarE cannot
        cands.append(Engine.SCALAR)
    if not psum:
        cands.append(Engine.GPSIMD)
    best = None
    for eng in cands:
        ins.engine = eng
        c = model.compute_cost(ins)
        gr = gaps.get(c.resource)
        s = gr.find(ready, c.ii_ns)[0] if gr is not None else ready
        if best is None or s + c.ii_ns < best[0] - _EPS:
            best = (s + c.ii_ns, eng)
    ins.engine = best[1]


def _idle_before(res: GapResource, t: float, pos: int) -> bool:
    """Whether ``res`` is idle for some time between ``t`` and the end of its interval ``pos - 1`` (where ``find``
    placed a request ready at ``t``): busy intervals never touch (``insert`` merges them), so there is idle time
    unless one interval runs from before ``t`` to there."""
    k = bisect_right(res.ends, t)
    return k < pos - 1 or (k < len(res.starts) and res.starts[k] > t + _EPS)


def _interleave(res: GapResource, t: float, d: float, owner: int) -> tuple[list[tuple[float, float]], int]:
    """Place ``d`` ns of a DMA's transfer on ``res`` from ``t`` on, in every idle stretch until it is done.

    The DMA engines serve their queues round robin ("DMA transfers from different DMA queues are scheduled in a
    round robin fashion (for NeuronCore-v2 and v3)", DMA overview), so a transfer that is ready does not wait for
    an idle window as long as itself: it moves whenever the engines are not moving an earlier-placed transfer.
    Without this, the list scheduler (which places in program order) let a store ready late but earlier in
    program order hold back a load ready microseconds before it (issue 33: t1-stream-256k-1000).  Returns the
    pieces (start, end) and the request whose interval ends where the last piece starts (-1: none)."""
    pieces: list[tuple[float, float]] = []
    starts, ends = res.starts, res.ends
    cur, rem = t, d
    i = bisect_right(ends, cur)
    who, who_end = -1, t
    while rem > _EPS:
        if i < len(starts) and starts[i] <= cur + _EPS:  # inside (or at the start of) a busy interval
            if ends[i] > cur:
                cur = ends[i]
                who, who_end = res.owners[i], cur
            i += 1
            continue
        take = rem if i >= len(starts) else min(rem, starts[i] - cur)
        res.insert(cur, take, i, owner)
        pieces.append((cur, cur + take))
        rem -= take
        cur += take
        i = bisect_right(ends, cur)
    return pieces, (who if abs(pieces[-1][0] - who_end) < 1e-6 and who_end > t + _EPS else -1)


def _ramp_extra(x0: float, work: float, win: float, r0: float) -> float:
    """Extra time ``work`` ns of TensorE work takes when it starts ``x0`` ns into a dI/dt warm-up window of
    ``win`` ns whose rate limit ramps linearly from ``r0`` to 1 (SUM/GLO: ~50% at start, full after ~3 us)."""
    if x0 < 0.0:
        # list scheduling can place work in an idle gap before the current warm-up began: it then runs from a
        # cold start, never "before" the ramp (a negative x0 made the quadratic below explode: ~1e19 ns matmuls in
        # AWS's attention tutorial v4)
        x0 = 0.0
    k = (1.0 - r0) / win  # rate(x) = r0 + k x for x < win
    if k <= 0.0:  # no ramp (full rate from the start): no extra time
        return 0.0
    avail = r0 * (win - x0) + 0.5 * k * (win * win - x0 * x0)  # work doable before the ramp ends
    if work >= avail:
        return (win - x0) - avail
    c = work + r0 * x0 + 0.5 * k * x0 * x0  # solve r0 (x - x0) + k/2 (x^2 - x0^2) = work for x
    x = (-r0 + (r0 * r0 + 2.0 * k * c) ** 0.5) / k
    return (x - x0) - work


def _occupy_gpsimd(d: float, t: float, i: int, gaps: dict[str, GapResource], engine_free: dict[str, float],
                   busy: dict[str, float], reorder: bool) -> float:
    """Run ``d`` ns of software-DGE descriptor generation for DMA ``i`` on GpSimdE, no earlier than ``t`` (in its
    earliest idle gap when the engines list-schedule, after its last instruction otherwise); returns the end."""
    res = "GpSimdE"
    if reorder:
        gr = gaps.get(res)
        if gr is None:
            gr = gaps[res] = GapResource()
        s, pos = gr.find(t, d)
        gr.insert(s, d, pos, i)
    else:
        s = max(t, engine_free.get(res, 0.0))
    end = s + d
    if end > engine_free.get(res, 0.0):
        engine_free[res] = end
    busy[res] = busy.get(res, 0.0) + d
    return end


def _materialize(w: list, instrs: list[Instr], model: CostModel, gaps: dict, engine_free: dict, busy: dict,
                 reorder: bool) -> float:
    """Schedule an elided PSUM zero-init after all: a later instruction reads its zeros as data.

    The zero-init is elided because accumulating into PSUM written by memset/tensor_copy is undefined behaviour
    (ISA nc_matmul), so the compiler makes the group's first matmul overwrite instead; that holds only when a
    matmul is what consumes the region.  A VectorE/ScalarE reader of the zeros (``z = nl.zeros(.., psum)`` then
    ``z[...] = nl.maximum(z, x)``) needs them written, so the zero-init runs on its engine in the earliest gap
    after the point it was issued (grading security, G5).  Updates the write record ``w``; returns when the
    zeros are visible."""
    j = w[6]
    zi = instrs[j]
    c = model.compute_cost(zi)
    res = c.resource
    if reorder:
        gr = gaps.get(res)
        if gr is None:
            gr = gaps[res] = GapResource()
        start, pos = gr.find(w[4], c.ii_ns)
        gr.insert(start, c.ii_ns, pos, j)
    else:
        start = max(w[4], engine_free.get(res, 0.0))
        engine_free[res] = start + c.ii_ns
    busy[res] = busy.get(res, 0.0) + c.ii_ns
    done = start + c.ii_ns + c.lat_ns
    w[4] = w[5] = w[8] = done
    w[7], w[9] = 0, None
    zi.start_ns, zi.end_ns, zi.cost_ns = start, done, c.ii_ns
    return done


def _dependencies(ins: Instr, i: int, instrs: list[Instr], access: dict, dep: float, dep_pred: int, own,
                  is_mm: bool, at_box: list):
    """Dependency resolution: the time ``ins`` may start (RAW, WAR and WAW on overlapping rectangles of the same
    physical buffer, explicit ``depends_on`` edges) and the instruction that bounds it, from the accesses recorded
    so far (``access``: per buffer [writes, reads, prune threshold], see :func:`_record_accesses`).  Returns
    (dep, dep_pred, the source and destination access entries, the elided PSUM zero-inits it reads, whether every
    source byte is such a zero-init); placing the instruction on its resources is :func:`_schedule`'s."""
    PSUM, HBM = _PSUM, _HBM
    src_ents = []
    src_const = True  # every source byte holds an elided PSUM zero-init (or was never written)
    zeros_read = None  # the elided zero-inits this instruction reads
    for o in ins.srcs:
        r = o.region
        if r.buf != PSUM:
            src_const = False
        key = r.phys * 4 + r.buf
        ent = access.get(key)
        if ent is None:
            ent = access[key] = [[], [], 32]
        src_ents.append((ent, r))
        if not ent[0]:
            continue
        p_lo, p_hi, b_lo, b_hi = r.p_lo, r.p_hi, r.b_lo, r.b_hi
        for w in ent[0]:
            if w[0] < p_hi and p_lo < w[1] and w[2] < b_hi and b_lo < w[3]:
                if w[7] != 2:
                    src_const = False
                elif zeros_read is None:
                    zeros_read = [w]
                else:
                    zeros_read.append(w)
                t = w[8] if w[9] is own else w[4]
                if t > dep:
                    dep = t
                    dep_pred = w[6]
    dst_ents = []
    for o in ins.dsts:
        r = o.region
        key = r.phys * 4 + r.buf
        ent = access.get(key)
        if ent is None:
            ent = access[key] = [[], [], 32]
        dst_ents.append((ent, r))
        p_lo, p_hi, b_lo, b_hi = r.p_lo, r.p_hi, r.b_lo, r.b_hi
        if r.buf != HBM:
            for w in ent[0]:
                t = w[5] if (is_mm and w[7] == 1) else w[4]
                if t > dep and w[0] < p_hi and p_lo < w[1] and w[2] < b_hi and b_lo < w[3]:
                    dep = t
                    dep_pred = w[6]
        for rd in ent[1]:
            if rd[4] > dep and rd[0] < p_hi and p_lo < rd[1] and rd[2] < b_hi and b_lo < rd[3]:
                dep = rd[4]
                dep_pred = rd[5]

    after = ins.attrs.get("after") if ins.attrs else None
    if after:  # explicit edges (nisa NkiInstruction.depends_on): wait for each producer's completion
        at = at_box[0]
        if at is None:
            at = at_box[0] = _positions(instrs)
        for s_ in after:
            j = at.get(s_, -1)
            if 0 <= j < i and instrs[j].end_ns > dep:
                dep, dep_pred = instrs[j].end_ns, j
    return dep, dep_pred, src_ents, dst_ents, zeros_read, src_const


def _record_accesses(src_ents: list, dst_ents: list, i: int, read_done: float, done: float, pipe_done: float,
                     kind: int, same_done: float, w_eng) -> None:
    """Record instruction ``i``'s reads (done at ``read_done``) and writes (visible at ``done``; ``pipe_done`` for
    a matmul accumulating after it, ``same_done`` for a same-engine consumer of ``w_eng``), dropping entries they
    cover so later dependency checks stay short."""
    for ent, r in src_ents:
        reads = ent[1]
        p_lo, p_hi, b_lo, b_hi = r.p_lo, r.p_hi, r.b_lo, r.b_hi
        # an earlier read this one covers and outlasts is redundant: a later writer overlapping it waits
        # for this read anyway
        while reads:
            rd = reads[-1]
            if rd[4] <= read_done and p_lo <= rd[0] and rd[1] <= p_hi and b_lo <= rd[2] and rd[3] <= b_hi:
                reads.pop()
            else:
                break
        reads.append([p_lo, p_hi, b_lo, b_hi, read_done, i])
        if len(reads) > ent[2]:
            reads[:] = _prune(reads, 4)
            ent[2] = max(32, 2 * len(reads))
    for ent, r in dst_ents:
        p_lo, p_hi, b_lo, b_hi = r.p_lo, r.p_hi, r.b_lo, r.b_hi
        writes, reads = ent[0], ent[1]
        while writes:
            w = writes[-1]
            if w[4] <= done and p_lo <= w[0] and w[1] <= p_hi and b_lo <= w[2] and w[3] <= b_hi:
                writes.pop()
            else:
                break
        while reads:
            rd = reads[-1]
            if rd[4] <= done and p_lo <= rd[0] and rd[1] <= p_hi and b_lo <= rd[2] and rd[3] <= b_hi:
                reads.pop()
            else:
                break
        writes.append([p_lo, p_hi, b_lo, b_hi, done, pipe_done, i, kind, same_done, w_eng])
        if len(writes) + len(reads) > ent[2]:
            writes[:] = _prune(writes, 4)
            reads[:] = _prune_against(reads, writes)
            ent[2] = max(32, 2 * (len(writes) + len(reads)))


def _positions(instrs: list[Instr]) -> dict[int, int]:
    """Sequence number -> position in ``instrs``.  Explicit edges (``attrs['after']``) name producers by their
    sequence number in the whole trace; the list scheduled may be one core's share of an SPMD trace
    (``perf.spmd_cores``: core 1's first instruction is not the trace's first), where the two differ.  Indexing the
    list with the sequence number dropped every edge on every core but the first (issue 33: 19.09 us on core 1
    against 23.16 us on core 0 for the same program)."""
    return {ins.seq: k for k, ins in enumerate(instrs)}


def schedule(instrs: list[Instr], tc: TargetCosts, model: CostModel, barriers=()) -> Schedule:
    """Schedule ``instrs`` (program order) and fill each Instr's cost_ns/start_ns/end_ns (ns).

    barriers: ascending instruction indices that start only after everything before them has completed (the
    programs of an SPMD grid that one NeuronCore runs one after another).
    """
    enabled = gc.isenabled()
    gc.disable()  # the loop allocates many small lists; cyclic GC passes over a big trace triple the run time
    try:
        return _schedule(instrs, tc, model, barriers)
    finally:
        if enabled:
            gc.enable()


class _Placer:
    """Resource placement: puts an instruction whose dependencies are resolved on the resources it occupies.

    Holds the state the scheduling loop carries from one instruction to the next besides the access records:
    each engine's busy intervals (list scheduling) or last end (program order), the DMA issue queues and engines,
    NC-v2's shared access ports, the loaded stationary matrix and activation table, and TensorE's dI/dt warm-up.
    One method call per instruction (:meth:`dma` or :meth:`compute`) with the loop's values passed in and the
    state read into locals: the scheduler is on the grading path, and CPython charges for every call and
    attribute access per instruction.
    """

    __slots__ = ("tc", "model", "sch", "reorder", "gaps", "engine_free", "engine_last", "busy", "port_free",
                 "share_sbuf", "share_psum", "same_lat", "dma_eng", "issue_q", "static_q", "last_stationary",
                 "tensor_last_end", "warm_begin", "throttle", "win", "r0", "act_table")

    def __init__(self, tc: TargetCosts, model: CostModel, sch: Schedule) -> None:
        self.tc, self.model, self.sch = tc, model, sch
        # The compiler list-schedules each engine's instruction stream (automatic instruction reordering, which the
        # NKI scheduling APIs' dependency edges and no_reorder blocks exist to constrain): an instruction whose
        # inputs are ready fills an idle gap of its engine before earlier, still-waiting instructions.
        self.reorder = tc.engine_reorder
        self.gaps: dict[str, GapResource] = {}
        self.engine_free: dict[str, float] = {}
        self.engine_last: dict[str, int] = {}
        self.busy: dict[str, float] = {}
        # NC-v2 shared access ports (A2 §4.4): per port, the end of each sharing engine's last access.  An engine
        # waits for the *other* engine's access only; its own stream is ordered (and gap-filled) by its engine
        # resource, so sharing a port does not make an engine run in program order.
        self.port_free = {"sbuf_vg": {Engine.VECTOR: 0.0, Engine.GPSIMD: 0.0},
                          "psum_vs": {Engine.VECTOR: 0.0, Engine.SCALAR: 0.0}}
        self.share_sbuf = tc.vector_gpsimd_share_sbuf
        self.share_psum = tc.vector_scalar_share_psum
        # RAW between two VectorE instructions (NC-v2, TargetCosts.vector_same_engine_latency_cycles): the consumer
        # waits VectorE's short dependent-instruction overhead (A2: "~100 cycles" for an instruction that depends
        # on the previous output), not the full result latency + semaphore hand-off of a consumer on another engine
        # (MODEL.md, seed 000).  ScalarE keeps its measured dependent-chain latency (PGf16: MIN_II + ~200 cycles
        # per dependent ACTIVATE); GpSimdE has no figure.
        self.same_lat: dict[Engine, float] = {}
        if tc.vector_same_engine_latency_cycles is not None:
            self.same_lat[Engine.VECTOR] = tc.vector_same_engine_latency_cycles / tc.vector_ghz
        self.dma_eng = DmaEngines(tc.dma_engines)
        self.issue_q = [GapResource() for _ in range(max(1, tc.dma_issue_queues))]  # hardware DGE instances
        self.static_q = [GapResource() for _ in range(max(1, tc.dma_static_queues))]  # static descriptor rings
        self.last_stationary = None
        self.tensor_last_end = -1e30
        self.warm_begin = 0.0
        self.throttle = tc.throttle_window_ns > 0 and tc.throttle_factor > 1.0
        self.win = tc.throttle_window_ns
        self.r0 = 1.0 / tc.throttle_factor if self.throttle else 1.0
        self.act_table = None

    def zeros(self, zeros_read: list, instrs: list[Instr], dep: float, dep_pred: int) -> tuple[float, int]:
        """Materialise the elided PSUM zero-inits an instruction reads as data (:func:`_materialize`); returns
        (dep, dep_pred) pushed past the zeros becoming visible."""
        for w in zeros_read:
            if w[7] == 2:
                t = _materialize(w, instrs, self.model, self.gaps, self.engine_free, self.busy, self.reorder)
                if t > dep:
                    dep, dep_pred = t, w[6]
        return dep, dep_pred

    def dma(self, ins: Instr, i: int, dep: float, p: int) -> tuple[float, float, float, int]:
        """Place DMA ``i``, ready at ``dep`` (bounded by instruction ``p``): software-DGE descriptor generation on
        GpSimd, a slot on the issue queue that frees first, the fixed latency, then its bytes on the DMA engines
        its partitions map to.  Returns (start, read_done, done, pred)."""
        c = self.model.dma_cost(ins)
        sch = self.sch
        sch.dma_count += 1
        sch.dma_bytes += c.nbytes
        sch.dma_descriptors += c.descriptors
        if c.gpsimd_ns > 0:  # software DGE: the descriptors are built on GpSimd before the DMA is issued
            dep = _occupy_gpsimd(c.gpsimd_ns, dep, i, self.gaps, self.engine_free, self.busy, self.reorder)
        t_issue = dep
        if c.issue_ns > 0:
            best = None
            queues = self.static_q if c.static else self.issue_q
            for qi, q in enumerate(queues):
                s, pos = q.find(dep, c.issue_ns)
                if best is None or s < best[0]:
                    best = (s, pos, qi)
            s, pos, qi = best
            q = queues[qi]
            if s > dep + _EPS:
                o_ = q.owner_before(s, pos)
                if o_ >= 0:
                    p = o_
            q.insert(s, c.issue_ns, pos, i)
            sch.dma_issue[i] = (qi, s, s + c.issue_ns)
            t_issue = s + c.issue_ns
        t_data = t_issue + c.pre_ns
        done = t_data
        portions = []
        d = c.per_engine_ns
        late = t_data
        for res, engs in self.dma_eng.groups(c.engines):
            s, pos = res.find(t_data, d)
            if s > t_data + _EPS and _idle_before(res, t_data, pos):
                # no idle stretch as long as the transfer from its ready time on, only shorter ones: the engines
                # interleave it with the transfers already there (_interleave) instead of holding it back
                pieces, o_ = _interleave(res, t_data, d, i)
                portions.extend((engs, a, b) for a, b in pieces)
                s = pieces[-1][0]
                if s > late + _EPS:
                    late = s
                    if o_ >= 0:
                        p = o_
                if pieces[-1][1] > done:
                    done = pieces[-1][1]
                continue
            if s > late + _EPS:
                late = s
                o_ = res.owner_before(s, pos)
                if o_ >= 0:
                    p = o_
            res.insert(s, d, pos, i)
            portions.append((engs, s, s + d))
            if s + d > done:
                done = s + d
        sch.dma_portions[i] = portions
        read_done = done  # the source has been read once the last byte moved
        done += c.post_ns
        ins.cost_ns = done - (portions[0][1] if portions else t_data)
        return dep, read_done, done, p

    def compute(self, ins: Instr, i: int, dep: float, p: int) -> tuple[float, float, float, float, Engine | None,
                                                                         int]:
        """Place compute instruction ``i``, ready at ``dep`` (bounded by instruction ``p``), on its engine: program
        order or the earliest idle gap, the other engine's access on a shared port, LoadStationary and
        activation-table loads, TensorE's dI/dt warm-up.  Returns (start, done, busy_end, same_done, w_eng,
        pred); busy_end is when its sources are read and when a matmul accumulating after it may go."""
        tc = self.tc
        reorder = self.reorder
        gaps = self.gaps
        if reorder and ins.op == "tensor_copy" and ins.attrs.get("auto_engine"):
            _pick_engine(ins, self.model, gaps, dep, tc)
        c = self.model.compute_cost(ins)
        res = c.resource
        start = dep
        engine_free = self.engine_free
        if not reorder or ins.attrs.get("in_order"):  # strict program order (ncc.no_reorder blocks too)
            free = engine_free.get(res, 0.0)
            if free > start:
                start = free
                p = self.engine_last.get(res, -1)
        eng = ins.engine
        share_sbuf, share_psum = self.share_sbuf, self.share_psum
        uses_sbuf = uses_psum = False
        if share_sbuf or share_psum:
            port_free = self.port_free
            for o in ins.srcs + ins.dsts:
                if o.region.buf == _PSUM:
                    uses_psum = True
                elif o.region.buf != _HBM:
                    uses_sbuf = True
            if share_sbuf and uses_sbuf and eng in (Engine.VECTOR, Engine.GPSIMD):
                t = port_free["sbuf_vg"][Engine.GPSIMD if eng == Engine.VECTOR else Engine.VECTOR]
                if t > start:
                    start = t
            if share_psum and uses_psum and eng in (Engine.VECTOR, Engine.SCALAR):
                t = port_free["psum_vs"][Engine.SCALAR if eng == Engine.VECTOR else Engine.VECTOR]
                if t > start:
                    start = t
        ii = c.ii_ns
        is_tensor = res == "TensorE"
        if is_tensor:
            if c.ls_ns > 0 and ins.srcs:
                st = ins.srcs[0].region
                if st != self.last_stationary:
                    if c.ls_ns > ii:
                        ii = c.ls_ns  # background LoadStationary bounds the pair (A2 mm_bottleneck)
                    self.last_stationary = st
        elif c.act_table is not None and c.act_table != self.act_table:
            ii += tc.act_table_load_ns
            self.act_table = c.act_table
            self.sch.act_table_loads += 1
        if reorder:  # list scheduling: the earliest idle gap of the engine that fits
            gr = gaps.get(res)
            if gr is None:
                gr = gaps[res] = GapResource()
            start, pos, o_ = gr.place(start, ii)
            if o_ >= 0:
                p = o_
        if is_tensor:
            if reorder:
                self.tensor_last_end = gr.ends[pos - 1] if pos > 0 else -1e30
            if self.throttle:
                if start - self.tensor_last_end > tc.throttle_rearm_gap_ns:
                    self.warm_begin = start
                x0 = start - self.warm_begin
                win = self.win
                if x0 < win:
                    extra = _ramp_extra(x0, ii, win, self.r0)
                    ii += extra
                    self.sch.throttled_ns += extra
                    if reorder:
                        start, pos = gr.find(start, ii)
        if reorder:
            gr.insert(start, ii, pos, i)
        busy_end = start + ii
        done = busy_end + c.lat_ns
        if is_tensor:
            self.tensor_last_end = busy_end
        engine_free[res] = busy_end
        self.engine_last[res] = i
        busy = self.busy
        busy[res] = busy.get(res, 0.0) + ii
        if share_sbuf and uses_sbuf and eng in (Engine.VECTOR, Engine.GPSIMD):
            pf = port_free["sbuf_vg"]
            if busy_end > pf[eng]:
                pf[eng] = busy_end
        if share_psum and uses_psum and eng in (Engine.VECTOR, Engine.SCALAR):
            pf = port_free["psum_vs"]
            if busy_end > pf[eng]:
                pf[eng] = busy_end
        same_lat = self.same_lat
        w_eng = ins.engine if ins.engine in same_lat else None
        same_done = min(done, busy_end + same_lat[w_eng]) if w_eng is not None else done
        ins.cost_ns = ii
        return start, done, busy_end, same_done, w_eng, p


def _synchronised(ins: Instr, i: int, instrs: list[Instr], access: dict, floor: float, floor_pred: int, own,
                  at_box: list, placer: _Placer, pred: list[int]):
    """Place synchronisation instruction ``i`` (nisa.sendrecv, nisa.core_barrier) against the other cores: a
    generator that yields ``(sync number, phase, time)`` twice, arrival (phase 0) and completion (phase 1), and is
    sent back the latest time of every core (:func:`schedule_lockstep`).

    Its arrival is when its dependencies are met and, on a compute engine, when that engine has finished the
    instructions before it (the engine's queue reaches the wait in program order).  It starts when every core has
    arrived and completes when every core's instance has: the received ``dst`` of a sendrecv is the other core's
    send.  A barrier's ``data`` (its source) counts as written at its completion, so this core's later accesses of
    the shared tensor wait for it (the compiler orders them after the barrier: that is what ``data`` is for); a
    compute engine running the wait takes no other work before it completes ("The barrier will block execution on
    this engine, other engines will not be blocked", nki.isa.core_barrier)."""
    sid = ins.attrs.get("sync")
    is_dma = ins.engine == Engine.DMA
    deps = ins
    if ins.op == "core_barrier":
        deps = Instr(ins.seq, ins.op, ins.engine, ins.srcs, ins.srcs, ins.attrs, ins.where)
    dep, dep_pred, src_ents, dst_ents, _, _ = _dependencies(deps, i, instrs, access, floor, floor_pred, own, False,
                                                            at_box)
    arrive = dep
    res = None
    if not is_dma:
        res = placer.model.compute_cost(ins).resource
        arrive = max(dep, placer.engine_free.get(res, 0.0))
    every = yield (sid, 0, arrive)
    if every > dep + _EPS:
        dep, dep_pred = every, -1  # held by another core
    if is_dma:  # sendrecv on the DMA queues: the CoreBarrier hand-off, then the transfer (model.core_sync_ns)
        dep += placer.model.core_sync_ns()
        start, read_done, done, pred[i] = placer.dma(ins, i, dep, dep_pred)
        same_done = done
        w_eng = None
    else:
        start, done, read_done, same_done, w_eng, pred[i] = placer.compute(ins, i, dep, dep_pred)
    every = yield (sid, 1, done)
    if every > done:
        done = same_done = every
    if res is not None:
        if placer.reorder:
            gr = placer.gaps.get(res)
            if gr is not None:
                gr.close_before(done, i)
        if placer.engine_free.get(res, 0.0) < done:
            placer.engine_free[res] = done
    ins.start_ns = start
    ins.end_ns = done
    _record_accesses(src_ents, dst_ents, i, read_done, done, done, 0, same_done, w_eng)


def schedule_lockstep(cores: list[tuple[list[Instr], list[int], list[int]]], tc: TargetCosts,
                      models: list[CostModel]) -> list[Schedule]:
    """Schedule the cores of an LNC=2 launch together: per core (its instructions, its program barriers, the
    indices of its synchronisation instructions, ``attrs['sync']``: nisa.sendrecv / nisa.core_barrier).  Each core
    is scheduled by :func:`_steps` up to its next synchronisation; when every core has arrived, the instruction
    starts on every core at the latest arrival ("all specified NeuronCores must reach before any can proceed",
    nki.isa.core_barrier; sendrecv: "all operations in the group must complete before any can proceed") and
    completes on every core at the latest completion.  A trace whose cores' synchronisations do not pair up (the
    same number, in the same order) is refused: traces are untrusted."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        gens = [_steps(instrs, tc, m, bars, syncs) for (instrs, bars, syncs), m in zip(cores, models)]
        out: list = [None] * len(gens)
        msgs: list = [None] * len(gens)

        def advance(k: int, value) -> None:
            try:
                msgs[k] = gens[k].send(value)
            except StopIteration as stop:
                out[k] = stop.value
                msgs[k] = None

        for k in range(len(gens)):
            advance(k, None)
        while any(m is not None for m in msgs):
            keys = {m[:2] for m in msgs if m is not None}
            if len(keys) != 1 or any(m is None for m in msgs):
                raise ValueError("trace: the cores' synchronisation instructions do not pair up (per core, the "
                                 f"synchronisation it waits at: {[None if m is None else m[:2] for m in msgs]})")
            t = max(m[2] for m in msgs)
            for k in range(len(gens)):
                advance(k, t)
        return out
    finally:
        if enabled:
            gc.enable()


def _schedule(instrs: list[Instr], tc: TargetCosts, model: CostModel, barriers=()) -> Schedule:
    """One core's instructions, without cross-core synchronisation: :func:`_steps` run to its end."""
    steps = _steps(instrs, tc, model, barriers, ())
    try:
        next(steps)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a schedule without synchronisation points yielded")  # pragma: no cover


def _steps(instrs: list[Instr], tc: TargetCosts, model: CostModel, barriers=(), syncs=()):
    """The scheduling loop: per instruction in program order, dependency resolution (:func:`_dependencies`),
    resource placement (:class:`_Placer`), then recording its accesses for the instructions after it
    (:func:`_record_accesses`).  Elided PSUM zero-inits are decided here: they take no resource.

    A generator returning the :class:`Schedule`: at each index of ``syncs`` (an instruction that meets the other
    cores', :func:`_synchronised`) it yields what :func:`schedule_lockstep` answers; without ``syncs`` it never
    yields.  A generator's loop costs what a function's does: schedule() of a 40,000-instruction trace, 20 runs
    interleaved with the plain function's, median 0.401 s against 0.395 s, mean 0.399 s against 0.402 s."""
    sch = Schedule()
    n = len(instrs)
    fences = [b for b in barriers if 0 < b < n] + [n]
    next_fence = fences[0]
    fence_i = 0
    sync_at = [s for s in syncs if 0 <= s < n] + [n]
    next_sync = sync_at[0]
    sync_i = 0
    floor = 0.0  # no instruction starts before the last barrier's predecessors completed
    floor_pred = -1
    last_done = -1
    pred = [-1] * n
    # per physical buffer: [writes, reads]; write = [p_lo, p_hi, b_lo, b_hi, t_done, t_pipe, idx, kind]
    # read = [p_lo, p_hi, b_lo, b_hi, t_read_done, idx]
    access: dict[int, list[list]] = {}  # key: phys * 4 + buf kind
    placer = _Placer(tc, model, sch)
    place_dma, place_compute = placer.dma, placer.compute
    same_lat = placer.same_lat
    makespan = 0.0
    PSUM = Buf.PSUM
    DMA = Engine.DMA
    at_box = [None]  # sequence number -> position in ``instrs``, built on the first explicit edge (_positions)

    for i, ins in enumerate(instrs):
        if i == next_fence:
            floor, floor_pred = makespan, last_done
            fence_i += 1
            next_fence = fences[fence_i]
        is_dma = ins.engine == DMA or ins.op == "dma_copy"
        is_mm = ins.op == "nc_matmul"
        kind = 1 if is_mm else 0  # write kind: 0 plain, 1 matmul (PSUM accumulation), 2 elided PSUM zero-init
        own = ins.engine if ins.engine in same_lat else None  # a same-engine producer's result is forwarded
        if i == next_sync:
            sync_i += 1
            next_sync = sync_at[sync_i]
            yield from _synchronised(ins, i, instrs, access, floor, floor_pred, own, at_box, placer, pred)
            if ins.end_ns > makespan:
                makespan = ins.end_ns
                last_done = i
            continue
        dep, dep_pred, src_ents, dst_ents, zeros_read, src_const = _dependencies(
            ins, i, instrs, access, floor, floor_pred, own, is_mm, at_box)
        if zeros_read is not None and not (ins.op == "tensor_copy" and src_const and ins.dsts
                                           and ins.dsts[0].region.buf == PSUM):
            # the zeros are read as data, not overwritten by a matmul: the zero-init is a real instruction
            dep, dep_pred = placer.zeros(zeros_read, instrs, dep, dep_pred)

        if is_dma:
            start, read_done, done, pred[i] = place_dma(ins, i, dep, dep_pred)
            pipe_done = same_done = done
            w_eng = None
        elif (ins.dsts and ins.dsts[0].region.buf == PSUM and
              ((ins.op == "memset" and ins.attrs.get("value", 0) in (0, 0.0))
               or (ins.op == "tensor_copy" and src_const and ins.srcs))):
            # Zero-initialising a PSUM accumulator (a memset, or a copy of an untouched zeroed PSUM tile) is not
            # an instruction on hardware: accumulating into PSUM last written by memset/tensor_copy is undefined
            # behaviour on NC-v2/v3 (ISA nc_matmul), so the compiler makes the group's first matmul overwrite.
            # Elided: no engine time; it only orders after the region's earlier accesses (as the overwrite does).
            kind = 2
            start = done = read_done = pipe_done = same_done = dep
            w_eng = None
            ins.cost_ns = 0.0
            pred[i] = dep_pred
        else:
            start, done, read_done, same_done, w_eng, pred[i] = place_compute(ins, i, dep, dep_pred)
            pipe_done = read_done
        ins.start_ns = start
        ins.end_ns = done
        if done > makespan:
            makespan = done
            last_done = i
        _record_accesses(src_ents, dst_ents, i, read_done, done, pipe_done, kind, same_done, w_eng)

    sch.makespan_ns = makespan
    sch.pred = pred
    busy = placer.busy
    busy["DMA"] = 0.0
    sch.busy_ns = busy
    sch.dma_engine_busy_ns = placer.dma_eng.busy_per_engine()
    return sch
