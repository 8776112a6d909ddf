"""The start-partition rule of compute-engine operands, and the cross-partition moves it allows (G10).

A compute engine (TensorE, VectorE, ScalarE, GpSimdE) reads and writes SBUF/PSUM through fixed partition lanes:
"a valid src/dst tensor of an instruction must occupy a continuous number of partitions. In addition, the hardware
further enforces which partition a tensor can start from (start_partition) based on the number of partitions the
tensor occupies (num_partition)": 64 < P <= 128 starts at 0; 32 < P <= 64 at 0 or 64; 0 < P <= 32 at 0, 32, 64
or 96 (aws-neuron-sdk nki/guides/architecture/trainium_inferentia2_arch.rst, "Accessing SBUF/PSUM tensors using
compute engines"; facts §4.3; the same rule in nki.isa.nc_stream_shuffle).  Cross-partition movement by
Vector/Scalar/GpSimd follows from it ("Cross-Partition Connectivity": none when P > 64, cross-half for
32 < P <= 64, cross-quadrant for P <= 32, each source partition one-to-one onto a destination partition): an
instruction whose source and destination occupy the same number of partitions at legal starts moves data in one
of exactly those patterns, so a move is illegal exactly when one of its starts is.  The trainium2 guide states no
change for NeuronCore-v3, so the rule holds for both targets.

DMA instructions are exempt: the DMA queues reach every partition.  ``Region.p_lo`` of an automatically allocated
tile is the offset inside the tile; the allocator places whole tiles at legal starts (multiples of the tile's own
granularity, which is a multiple of any smaller slice's), so a slice is legal exactly when its offset is.  A
directly placed tensor's region carries its absolute partition.

A violation is an error (``nkisim_partition_start`` / ``nkisim_cross_partition``) raised when the instruction is
built (:meth:`~nkisim.core.context.KernelContext.emit`) and again when a fresh result is retargeted into its
destination (``dst[5:37] = nl.copy(src[0:32])``, :mod:`nkisim.core.ops.assign`).
"""

from __future__ import annotations

from nkisim.core.access import physical
from nkisim.core.instr import ENGINE_NAMES, Instr, Operand
from nkisim.core.memory import BUF_NAMES
from nkisim.core.rules import fail, message


def legal_start(start: int, count: int) -> bool:
    """Whether ``count`` partitions may start at partition ``start`` (the three documented cases)."""
    if count > 64:
        return start == 0
    if count > 32:
        return start in (0, 64)
    return start in (0, 32, 64, 96)


def legal_starts(count: int) -> str:
    if count > 64:
        return "0"
    if count > 32:
        return "0 or 64"
    return "0, 32, 64 or 96"


def starts_ok(operands: tuple[Operand, ...]) -> bool:
    """Fast path of the per-instruction check (a few integer operations per operand): True when every on-chip
    operand starts at a legal partition for its size.  Start 0 is always legal; HBM (buf 0) has no partitions."""
    for o in operands:
        r = o.region
        s = r.p_lo
        if s and r.buf:
            n = r.p_hi - s
            if n > 64 or s & (31 if n <= 32 else 63):
                return False
    return True


def check(ins: Instr, simulate: bool, meta: dict, fresh: bool = False, srcs=None, dsts=None) -> None:
    """Raise the rule a compute instruction breaks (call only when :func:`starts_ok` failed for its operands).
    ``fresh``: the destination is a fresh result tile, placed by the allocator (legal), or retargeted into the
    kernel's destination later (checked then).  ``srcs`` / ``dsts``: the operands' views, when known, to skip
    operands whose region is not a physical partition range (:func:`physical`); otherwise a region past partition
    128 is skipped.

    Under ``nki.simulate_kernel`` the violation is recorded in ``meta`` instead (``partition_rule``: the first
    message and a count) and the run warns once at its end: AWS's simulator runs such kernels (its own
    ``nl.gather_flattened`` doc test fills an index tile element by element, ``indices[i, j] = j * 5``, a
    one-partition memset at every partition), the compiler's allocator is what enforces the rule."""
    use_src = None if srcs is None else tuple(physical(t) for t in srcs)
    use_dst = None if dsts is None else tuple(physical(t) for t in dsts)
    bad = violation(ins, fresh, use_src, use_dst)
    if bad is None:
        return
    if not simulate:
        fail(bad[0], **bad[1])
    rec = meta.get("partition_rule")
    if rec is None:
        meta["partition_rule"] = {"first": message(bad[0], **bad[1]), "where": ins.where, "count": 1}
    else:
        rec["count"] += 1


def _checked(operands: tuple[Operand, ...], use) -> list[tuple[int, Operand]]:
    """The on-chip operands whose region is a physical partition range, with their index."""
    return [(i, o) for i, o in enumerate(operands)
            if o.region.buf and (o.region.p_hi <= 128 if use is None else use[i])]


def violation(ins: Instr, fresh: bool = False, use_src=None, use_dst=None) -> tuple | None:
    """(rule code, message fields) of the first broken rule of ``ins``, or None.

    A destination and a source of the same partition count at different starts, one of them illegal, is reported
    as an illegal cross-partition move (both ranges); any other illegal start as the operand's own."""
    engine = ENGINE_NAMES.get(ins.engine, str(ins.engine))
    srcs = _checked(ins.srcs, use_src)
    dsts = [] if fresh else _checked(ins.dsts, use_dst)
    for _, d in dsts:
        rd = d.region
        nd = rd.p_hi - rd.p_lo
        for _, s in srcs:
            rs = s.region
            if rs.p_hi - rs.p_lo == nd and rs.p_lo != rd.p_lo and not (
                    legal_start(rs.p_lo, nd) and legal_start(rd.p_lo, nd)):
                return "nkisim_cross_partition", dict(
                    op=ins.op, engine=engine, n=nd, src=_describe(s), dst=_describe(d), s_lo=rs.p_lo,
                    s_hi=rs.p_hi, d_lo=rd.p_lo, d_hi=rd.p_hi, legal=legal_starts(nd))
    for side, checked, total in (("source", srcs, len(ins.srcs)), ("destination", dsts, len(ins.dsts))):
        for i, o in checked:
            r = o.region
            if not legal_start(r.p_lo, r.p_hi - r.p_lo):
                name = side if total == 1 else f"{side} {i + 1}"
                return "nkisim_partition_start", dict(
                    op=ins.op, engine=engine, operand=f"{name} {_describe(o)}", start=r.p_lo, n=r.p_hi - r.p_lo,
                    legal=legal_starts(r.p_hi - r.p_lo))
    return None


def _describe(o: Operand) -> str:
    return f"{BUF_NAMES[o.region.buf]}{list(o.shape)} {o.dtype}"
