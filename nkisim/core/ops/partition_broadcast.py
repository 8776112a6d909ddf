"""Partition broadcasts: a one-partition operand ([1, F]) read by an instruction over P > 1 partitions.

No engine reads across partitions: "hardware does not allow P dimension striding when accessing data from a single
SBUF/PSUM tensor" (trainium_inferentia2_arch.rst, data streaming; facts §4.3).  The compiler broadcasts on TensorE
instead: "we can broadcast a vector occupying a single partition to M (M <= 128) partitions using
nki.isa.nc_matmul(ones, broadcast_input, is_stationary_onezero=True), where ones is a 1xM vector filled with ones
... In fact, NKI invokes such matmul under the hood when broadcast_input.broadcast_to((M, broadcast_input.shape[1]))
is called" (trainium_inferentia2_arch.rst, TensorE "Alternative Use Case"; facts §2.3: "each costing a full
matmul").  So every partition broadcast (``nl.add(t[P, F], row[1, F])``, ``nl.where`` with a [1, F] operand,
``nl.broadcast_to`` / ``t.broadcast_to`` over partitions, ``t[...] = row``) is emitted here as what the compiler
emits (docs/grading-security.md, G6):

* once per kernel, a VectorE memset of the [1, P] ones stationary (a compile-time constant; its 4 bytes x P on one
  partition live in the compiler's reserved SBUF, facts §4.1, so they are not charged to the kernel's capacity);
* one nc_matmul per PSUM bank (K = 1, M = P, N <= 512 columns: one matmul writes one bank, facts §2.3/§4.2),
  ``is_stationary_onezero`` as AWS writes it (the ones are genuinely 0/1: the fp32 2x applies);
* the consumer reads the broadcast from PSUM (VectorE/ScalarE read PSUM, one input of a two-input instruction at
  most, up to 4K fp32 per partition; facts §4.2); when it cannot (GpSimd, another input already in PSUM, more
  columns than a PSUM access), each bank is evicted to SBUF by a copy first.

Values are not recomputed from the scratch: multiplying by 1.0 with a single fp32 product (K = 1) is exact, so the
consumer's values are those of the broadcast operand itself, exactly as before.  The PSUM scratch is a compiler
temporary outside nkisim's capacity accounting (like any provisional result), so a kernel that fits without it
still fits.
"""

from __future__ import annotations

import numpy as np

from nkisim.core import dtypes, execute
from nkisim.core.access import mark_written, read, write
from nkisim.core.buffers import PSUM_SPEC, SBUF_SPEC, allocate
from nkisim.core.context import KernelContext
from nkisim.core.dtypes import F32
from nkisim.core.instr import B_PSUM, B_SBUF, E_GPSIMD, E_TENSOR, E_VECTOR, Buf, Engine
from nkisim.core.tensor import Tensor

# dtypes TensorE multiplies (nki.isa.nc_matmul); a row of any other dtype (int, bool) is broadcast as fp32
# (exact up to 2**24), so its matmul is charged at the fp32 rate: the conservative side
_MATMUL_FLOATS = frozenset({"float32", "bfloat16", "float16", "float8_e4m3", "float8_e4m3fn", "float8_e5m2"})
_ATTR = "partition_broadcast"  # marks the instructions this module emits (profile, grader: compiler-made promises)


def broadcast_operands(ctx: KernelContext, tiles, parts: int, engine: Engine) -> tuple:
    """``tiles`` (an instruction's source tiles) with every one-partition tile replaced by its broadcast to
    ``parts`` partitions (PSUM, or SBUF when the consumer on ``engine`` cannot read it from PSUM)."""
    psum_taken = engine == E_GPSIMD or any(t.kind == B_PSUM and _parts(t) != 1 for t in tiles)
    out = []
    for t in tiles:
        if _parts(t) == 1:
            b = broadcast(ctx, t, parts, psum_ok=not psum_taken)
            psum_taken = psum_taken or b.kind == B_PSUM
            out.append(b)
        else:
            out.append(t)
    return tuple(out)


def broadcast(ctx: KernelContext, row: Tensor, parts: int, *, psum_ok: bool = True) -> Tensor:
    """The [parts, F] tile the consumer reads in place of ``row`` ([1, ...], F elements): the PSUM tile the
    matmuls wrote, or (``psum_ok`` false, or F beyond a VectorE PSUM access) its SBUF copy."""
    f = 1
    for d in row.shape:
        f *= d
    lim = ctx.limits
    if row.kind == B_PSUM:  # TensorE reads SBUF only (nki.isa.nc_matmul): the compiler stages the row first
        staged = _scratch(ctx, 1, f, F32, B_SBUF)
        ctx.emit("tensor_copy", E_VECTOR, (row,), (staged,), {_ATTR: True})
        if ctx.full:
            _fill(staged, row)
        row = staged
    ones = _ones(ctx, parts, row.dtype)
    n_max = lim.gemm_moving_fmax  # one matmul writes one PSUM bank: 512 fp32 columns
    flat = row if row.ndim == 2 or f <= n_max else None  # a [1, a, b] row wider than a bank: N per chunk only
    if psum_ok and f <= lim.vector_psum_fmax:
        scratch = _scratch(ctx, parts, f, F32, B_PSUM)
        for c0 in range(0, f, n_max):
            c1 = min(f, c0 + n_max)
            _matmul(ctx, ones, _cols(flat, row, c0, c1, f), _cols(scratch, scratch, c0, c1, f), parts, c1 - c0)
        if ctx.full:
            _fill(scratch, row)
        return scratch
    keep = row.dtype if dtypes.name(row.dtype) in _MATMUL_FLOATS else F32
    out = _scratch(ctx, parts, f, keep, B_SBUF)
    for c0 in range(0, f, n_max):
        c1 = min(f, c0 + n_max)
        bank = _scratch(ctx, parts, c1 - c0, F32, B_PSUM)
        _matmul(ctx, ones, _cols(flat, row, c0, c1, f), bank, parts, c1 - c0)
        ctx.emit("tensor_copy", E_VECTOR, (bank,), (_cols(out, out, c0, c1, f),), {"auto_engine": True, _ATTR: True})
    if ctx.full:
        _fill(out, row)
    return out


def _parts(t: Tensor) -> int:
    return t.shape[t.pdim] if t.shape else 1


def _cols(t: Tensor | None, whole: Tensor, c0: int, c1: int, f: int) -> Tensor:
    """Columns c0:c1 of a [*, F] tile (the whole tile when it is one chunk or not two-dimensional)."""
    if t is None or (c0 == 0 and c1 == f):
        return whole
    return t[:, c0:c1]


def _matmul(ctx: KernelContext, ones: Tensor, moving: Tensor, dst: Tensor, parts: int, n: int) -> None:
    ctx.emit("nc_matmul", E_TENSOR, (ones, moving), (dst,),
             {"K": 1, "M": parts, "N": n, "accumulate": False, "is_transpose": False,
              "is_stationary_onezero": True, _ATTR: True})


def _scratch(ctx: KernelContext, parts: int, f: int, dtype, buf: Buf, site=None, hooked: bool = False) -> Tensor:
    """A compiler temporary: provisional (never charged to capacity), with physical buffers of its own that rotate
    like any statement's tiles (``MemoryTracker.phys_for``), not shared with the consuming statement's result.
    ``hooked``: allocated for the whole kernel, not by a dynamic loop body's call (core.ops.registers)."""
    return allocate((parts, f), dtype, PSUM_SPEC if buf == B_PSUM else SBUF_SPEC, provisional=True, ctx=ctx,
                    name=_ATTR, site=(ctx.site, _ATTR) if site is None else site, hooked=hooked)


def _ones(ctx: KernelContext, parts: int, dtype) -> Tensor:
    """The [1, parts] ones stationary, made once per kernel (its memset is the first broadcast's).  A broadcast
    first made by a dynamic loop body being recorded makes them for the kernel, not for the body (no allocation of
    the body's), and the recorder emits their memset before the loop (:func:`owe_ones`)."""
    # the row's own dtype: fp32 must pair with fp32 (nki.isa.nc_matmul), and 1.0 is exact in every float dtype
    dt = dtype if dtypes.name(dtype) in _MATMUL_FLOATS else F32
    key = (parts, dtypes.name(dt))
    t = ctx.partition_ones.get(key)
    if t is None:
        t = ctx.partition_ones[key] = _scratch(ctx, 1, parts, dt, B_SBUF, site=("ones",) + key, hooked=True)
        _make_ones(ctx, t)
    return t


OWED = "kernel_constant"  # an instruction the dynamic-loop recorder emits for the kernel while recording (owe_ones)


def _make_ones(ctx: KernelContext, t: Tensor, owed: bool = False) -> None:
    attrs = {"value": 1.0, _ATTR: True}
    if owed:
        attrs[OWED] = True
    ctx.emit("memset", E_VECTOR, (), (t,), attrs)
    if ctx.full:
        write(t, execute.cast(np.ones(t.shape, dtype=F32), t.dtype))
        mark_written(t)


def owe_ones(ctx: KernelContext, made: list) -> None:
    """The ones tiles a dynamic loop body's call made while it ran dry (its memset went to the recorder's scratch
    trace, no values written): emitted and written now, in the real trace, before the loop runs."""
    for t in made:
        _make_ones(ctx, t, owed=True)


def _fill(scratch: Tensor, row: Tensor) -> None:
    """The broadcast's values in the scratch tile (what the matmul computes: the row, exactly, in fp32)."""
    v = execute.to_f32(read(row)).reshape(1, -1)
    write(scratch, execute.cast(np.broadcast_to(v, scratch.shape), scratch.dtype))
    mark_written(scratch)
