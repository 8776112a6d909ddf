"""TensorE: matrix multiplication into PSUM (``nc_matmul``, FP8 double-row mode) and the TensorE transpose.

A matmul writes one PSUM bank; its accumulation-group semantics (first write overwrites, later ones add) are
``nkisim.core.access.psum_write``."""

from __future__ import annotations

import threading
import warnings
import weakref

import numpy as np

from nkisim.core import access, dtypes, execute, sharing
from nkisim.core.access import (
    allocation,
    holds_data,
    holds_value_init,
    operand,
    own_storage,
    psum_flags,
    psum_write,
    read,
    start_group_over_value_init,
    start_tensor_groups,
)
from nkisim.core.context import LIVE, KernelContext, current
from nkisim.core.dtypes import F32
from nkisim.core.instr import B_PSUM, B_SBUF, E_TENSOR, E_UNKNOWN, E_VECTOR, UNVERIFIED, Engine
from nkisim.core.ops.common import (
    ENGINE_LABEL,
    check_partitions,
    deliver,
    finish,
    free_of,
    mask_values,
    need_on_chip,
    need_tensor,
    new_result,
    parts_of,
    shape_str,
    transposed_mask,
)
from nkisim.core.ops.elementwise import tensor_copy
from nkisim.core.rules import NKISimulationWarning, applies, error, fail, message
from nkisim.core.tensor import Tensor

# nc_matmul hints that buy speed on a promise about the data, checked on the values (_check_matmul_promises)
_PROMISE_HINTS = ("is_stationary_onezero", "is_moving_onezero", "is_transpose")
_MATMUL_DTYPES = {"float8_e4m3", "float8_e4m3fn", "float8_e5m2", "bfloat16", "float16", "tfloat32", "float32"}
_FP32_CLASS = ("float32", "tfloat32")


# Toolchains that stage a PSUM matmul operand through SBUF (the legacy compiler: see stage_psum_operand); the current
# API says the operands "must be SBUF tiles" (nki.isa.nc_matmul, NKI 0.6): there a PSUM operand is an error.
STAGING_ERAS = frozenset({"2024", "2025"})


def stage_psum_operand(ctx: KernelContext, t: Tensor, op_name: str, name: str) -> Tensor:
    """A matmul operand must sit in SBUF: TensorE reads only SBUF ("The nc_matmul instruction must read inputs
    from SBUF", nki.isa.nc_matmul, Neuron 2.21 docs). AWS's own legacy kernels nevertheless hand a PSUM tile
    straight to the matmul (nki-samples flash_attn_bwd: an nc_transpose result as stationary; the attention
    tutorial's attn_fwd_v1: an nl.transpose result as nl.matmul's y) and run on hardware and in
    nki.simulate_kernel, so the legacy compiler stages the tile through SBUF. nkisim does the same with an explicit
    VectorE PSUM->SBUF tensor_copy, so the copy is costed and shows in the profile under this op's name.  Direct
    allocation leaves no compiler-owned SBUF to stage through: there the documented error stands."""
    if t.kind == B_PSUM and not ctx.direct_alloc and ctx.era in STAGING_ERAS:
        staged = tensor_copy(t, op_name=op_name)
        ctx.settle()  # the copy's values land now: the matmul reads them below
        return staged
    need_on_chip(t, op_name, name, (B_SBUF,))
    return t


def check_pe_tiling(stationary: Tensor, tile_position, tile_size, *, strict: bool = False,
                    double_row: bool = False) -> None:
    """PE tiling requirements of nki.isa.nc_matmul (2.2x docs): both ``tile_position`` and ``tile_size`` set, (row,
    column) values that are multiples of 32, ``tile_size`` at least the stationary tile ([K, M]), not 32 x 32 on
    NeuronCore-v2; the tile must fit the 128 x 128 PE array.  Values only: the model does not time PE tiling.

    ``strict``: NKI 0.6's "Tiling mode" text as well (nki/api/nki/isa/__init__.py): the PE rows are sliced "into 2x
    64 row tiles (NeuronCore-v2 or newer), or 4x 32 row tiles (NeuronCore-v3 or newer)", the columns "in the same
    fashion", so a size is 128, 64 or 32 (not 32 on NeuronCore-v2); "The start_row must be a multiple of row_size
    ... Similarly, the start_column must be a multiple of column_size"; and "double_row performance mode cannot be
    combined with Tensor Engine column tiling mode"."""
    def bad(why: str):
        fail("nkisim_bad_argument", op="nc_matmul", detail=f"tile_position={tuple(tile_position)!r}, "
              f"tile_size={tuple(tile_size)!r}: {why}")
    if not tile_position or not tile_size:
        bad("both must be set to enable PE tiling")
    pos, size = tuple(int(v) for v in tile_position), tuple(int(v) for v in tile_size)
    if len(pos) != 2 or len(size) != 2:
        bad("each is a (row, column) pair")
    if any(v % 32 for v in pos + size) or min(size) <= 0:
        bad("values must be multiples of 32")
    if pos[0] + size[0] > 128 or pos[1] + size[1] > 128:
        bad("the tile must fit the 128 x 128 PE array")
    k, m = stationary.shape[0], 1
    for d in stationary.shape[2 if double_row else 1:]:  # double_row: [K, 2, M], the 2 is contracted
        m *= d
    if size[0] < k or size[1] < m:
        bad(f"tile_size must be at least the stationary tile [{k}, {m}]")
    ctx = current("nc_matmul")
    if ctx.target == "trn1" and size == (32, 32):
        bad("row and column sizes cannot both be 32 on NeuronCore-v2")
    if strict:
        if any(v not in (32, 64, 128) for v in size):
            bad("a tile size is 128, 64 (2 tiles) or 32 (4 tiles)")
        if ctx.target == "trn1" and 32 in size:
            bad("32-wide tiles (4 per array) need NeuronCore-v3 (trn2); NeuronCore-v2 slices into 2 x 64")
        if pos[0] % size[0] or pos[1] % size[1]:
            bad("the start row and start column must be multiples of the row and column tile sizes")
        if double_row and size[1] != 128:
            bad("double_row performance mode cannot be combined with column tiling")


def check_psum_bank(ctx: KernelContext, dst: Tensor, op: str) -> None:
    opnd = operand(dst)
    bank = ctx.limits.psum_bank_bytes
    r = opnd.region
    bb = allocation(dst).block_bytes
    if 0 < bb <= bank and r.b_lo // bb == (r.b_hi - 1) // bb:
        return  # one block of a block-dimension tensor: a (P, F) tile of its own, placed within one bank
    if r.b_lo // bank != (r.b_hi - 1) // bank:
        fail("nkisim_matmul_psum_bank", op=op, shape=list(dst.shape), nbytes=r.b_hi - r.b_lo, offset=r.b_lo,
             bank=bank)


def nc_matmul(stationary: Tensor, moving: Tensor, *, is_transpose: bool = False, mask=None,
              op_name: str = "nc_matmul", double_row: bool = False, is_stationary_onezero: bool = False,
              is_moving_onezero: bool = False, dst: Tensor | None = None, accumulate: bool | None = None) -> Tensor:
    """``stationary.T @ moving`` into a fresh fp32 PSUM tile, or into ``dst`` (the current API): ``accumulate``
    None -- the first write to a PSUM location overwrites, later ones accumulate; True -- accumulate; False --
    overwrite (nki.isa.nc_matmul, "Accumulation mode")."""
    ctx = current(op_name)
    ctx.settle()
    stationary = need_tensor(stationary, op_name, "stationary")
    moving = need_tensor(moving, op_name, "moving")
    stationary = stage_psum_operand(ctx, stationary, op_name, "stationary")
    moving = stage_psum_operand(ctx, moving, op_name, "moving")
    if stationary.pdim or moving.pdim:
        fail("err_failed_to_infer_tile_from_local_tensor",
             name=(stationary if stationary.pdim else moving).name or "stationary/moving")
    lim = ctx.limits
    k1 = check_partitions(stationary, lim.pmax)
    k2 = check_partitions(moving, lim.pmax)
    if k1 != k2:
        fail("err_num_partition_mismatch", params=f"{shape_str(stationary, 'stationary')}, "
             f"{shape_str(moving, 'moving')}", op=op_name)
    if double_row:
        return _double_row_matmul(ctx, stationary, moving, k1, mask, op_name, dst, accumulate)
    m = free_of(stationary)
    n = free_of(moving)
    if m > lim.gemm_stationary_fmax:
        fail("nkisim_matmul_stationary_fmax", m=m, limit=lim.gemm_stationary_fmax, shape=list(stationary.shape))
    if n > lim.gemm_moving_fmax:
        fail("nkisim_matmul_moving_fmax", n=n, limit=lim.gemm_moving_fmax, shape=list(moving.shape))
    d1, d2 = dtypes.name(stationary.dtype), dtypes.name(moving.dtype)
    for d, who in ((d1, "stationary"), (d2, "moving")):
        if d not in _MATMUL_DTYPES:
            fail("nkisim_matmul_dtype", detail=f"{who} dtype {d} is not supported (fp8/bf16/fp16/tf32/fp32)")
    if (d1 in _FP32_CLASS) != (d2 in _FP32_CLASS):
        fail("nkisim_matmul_dtype", detail=f"fp32/tf32 operands must pair with fp32/tf32, got {d1} and {d2}")
    out_shape = (m,) + tuple(moving.shape[1:]) if moving.ndim > 1 else (m, 1)
    # NeuronCore-v3 transpose mode writes a 16-bit result for a 16-bit input ("FP16/BF16 PSUM output for FP16/BF16
    # transpose", trainium2_arch.rst, "Tensor Engine"; AWS's nki-library MoE CTE transposes bf16 into bf16 PSUM)
    same16 = (stationary.dtype if is_transpose and ctx.target != "trn1" and d1 in ("bfloat16", "float16")
              and d2 == d1 else None)
    out = _matmul_out(ctx, out_shape, dst, op_name, same16)
    attrs = {"K": k1, "M": m, "N": n, "accumulate": dst is not None and accumulate is not False,
             "is_transpose": bool(is_transpose)}
    # the ones/zeros hints make an fp32 matmul up to 2x faster (nki.isa.nc_matmul docs, is_*_onezero): the cost
    # model reads them (perf/model.py), so they travel with the instruction
    if is_stationary_onezero:
        attrs["is_stationary_onezero"] = True
    if is_moving_onezero:
        attrs["is_moving_onezero"] = True
    if not ctx.full and (is_stationary_onezero or is_moving_onezero or is_transpose):
        # no values to check the hints' promises on (_check_matmul_promises): say so in the trace
        attrs[UNVERIFIED] = [h for h in _PROMISE_HINTS if attrs.get(h)]
    ins = ctx.emit("nc_matmul", E_TENSOR, (stationary, moving), (out,), attrs)
    values = chain = None
    if ctx.full and ctx.share is not None and not (is_stationary_onezero or is_moving_onezero or is_transpose):
        # a run of a lockstep group (core.sharing): the product of bit-identical operands another run just made
        # (the moving operand is handed back as the raw tile or a contiguous copy of it: the same values in the
        # layout reshape(k1, n) gives either way).  A product the group keeps for later members is a fresh array;
        # one it does not keep is read once by psum_write below (dst) and may be this thread's scratch
        # (the moving operand handed back may be a copy made for the group, not the tile's view: the float16
        # conversion cache reads the tile's storage only when it is the view itself)
        st, mr = read(stationary), read(moving)
        values = ctx.share.product(st, mr, (d1, d2, k1, m, n), lambda mv, keep: _product(
            _matrix(st, d1, k1, m, "s", stationary), _matrix(mv, d2, k1, n, "m", moving if mv is mr else None),
            keep if keep.__class__ is not bool else keep or dst is None).reshape(out_shape), (stationary, moving))
        # a product taken from an earlier member may be added to an accumulation chain that member made too: the
        # PSUM tile's values are then a copy of that member's (core.sharing, ShareGroup.chain)
        chain = ctx.share.chain
    elif ctx.full:
        if is_stationary_onezero or is_moving_onezero or is_transpose:
            s = _operand_values(stationary, d1).reshape(k1, m)
            mv = _operand_values(moving, d2).reshape(k1, n)
            _check_matmul_promises(ctx, op_name, attrs, (s, d1, is_stationary_onezero), (mv, d2, is_moving_onezero))
            if attrs["is_transpose"] and ctx.target != "trn1":
                values = s.T.reshape(out_shape)  # bit-accurate: NaN/Inf stay where they are (trainium2_arch.rst)
            else:
                values = (s.T @ mv).reshape(out_shape)
        else:
            values = _product(_matrix(read(stationary), d1, k1, m, "s", stationary),
                              _matrix(read(moving), d2, k1, n, "m", moving), dst is None).reshape(out_shape)
    return _matmul_done(ctx, ins, out, values, mask_values(mask, out_shape, stationary, moving), dst, accumulate,
                        chain)


# Per thread (a lockstep group's members are threads), arrays a matmul's operands are converted or copied into and
# its product is written to when nothing keeps it: a fresh 227 KB array per operand and product of the course's
# [128, 128] x [128, 444] matmuls costs its allocation and page faults every time (docs/grading.md, "The value path
# of grouped replays").  A buffer is written and read within one matmul (_matrix / _product), never across one.
_SCRATCH = threading.local()


def _scratch(slot: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    bufs = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    key = (slot, shape, dtype)
    buf = bufs.get(key)
    if buf is None:
        if len(bufs) >= 16:  # shapes vary between kernels: keep the set small
            bufs.clear()
        buf = bufs[key] = np.empty(shape, dtype)
    return buf


def _merges(raw: np.ndarray) -> bool:
    """Whether ``raw``'s free axes (all but the first) merge into one without a copy: those longer than 1 lie
    contiguously one within the next, so ``raw.reshape(raw.shape[0], -1)`` is a view (NumPy copies otherwise)."""
    shape, strides = raw.shape, raw.strides
    inner = None
    for i in range(len(shape) - 1, 0, -1):
        n = shape[i]
        if n == 1:
            continue
        if inner is not None and strides[i] != inner:
            return False
        inner = strides[i] * n
    return True


def _matrix(raw: np.ndarray, dtype_name: str, k: int, n: int, slot: str, view: Tensor | None = None) -> np.ndarray:
    """The matmul operand ``raw`` as the fp32 [k, n] matrix TensorE multiplies, as ``_as_operand(raw).reshape(k, n)``
    gives it -- the same values in the same layout, hence the same BLAS call -- but converted or copied into this
    thread's ``slot`` buffer instead of a fresh array (a view of ``raw`` when the reshape needs no copy).  ``view``:
    the tensor view ``raw`` is the values of (None when ``raw`` is a copy), whose storage version a float16 operand
    may be converted from once (:func:`_f16_from_version`)."""
    if raw.dtype == F32 and dtype_name != "tfloat32":
        if raw.flags.c_contiguous or not raw.shape or raw.shape[0] != k or _merges(raw):
            return raw.reshape(k, n)
        buf = _scratch(slot, raw.shape, F32)
        np.copyto(buf, raw)
        return buf.reshape(k, n)
    if dtype_name == "tfloat32" or raw.dtype.kind not in "fV":
        return _as_operand(raw, dtype_name).reshape(k, n)
    buf = _scratch(slot, raw.shape, F32)
    if raw.dtype == F16:
        # NumPy converts float16 one element at a time (3 ns each: 185 us for a [128, 444] moving window); a table of
        # NumPy's own conversion of all 65,536 bit patterns gives the same bits 3x faster; a storage version many
        # operands read is converted once and each operand copied or kept from it (_f16_from_version)
        got = _f16_from_version(view, raw, buf) if view is not None else None
        if got is not None:
            return got.reshape(k, n)
        np.take(_f16_table(), raw.view(np.uint16), out=buf, mode="clip")
    else:  # bf16 / fp8: astype(float32)'s conversion, into the buffer
        np.copyto(buf, raw, casting="unsafe")
    return buf.reshape(k, n)


F16 = np.dtype(np.float16)
_F16_TABLE: list = []


def _f16_table() -> np.ndarray:
    """float32 value of every float16 bit pattern, as ``astype(float32)`` converts it (built once, 256 KB)."""
    if not _F16_TABLE:
        table = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
        table.flags.writeable = False
        _F16_TABLE.append(table)
    return _F16_TABLE[0]


# A float16 storage version (Allocation uid and gen, core.sharing) is converted to float32 whole once its operands
# have read 1/F16_VERSION_SHARE of its bytes; each later operand of it is then copied from the converted values, and
# an operand of the same offset, shape and strides read again in the version is kept converted, contiguous, from its
# second read on.  The staff conv's timed float16 call converted 7,992 operands one at a time (a quarter of its
# leader's CPU): its input bands are read by 288 moving windows per version (each element 18 times) and its resident
# weights by every stationary (each of its 36 blocks 111 times).  The threshold keeps the whole conversion paid for
# (at most F16_VERSION_SHARE times what the operands converted); at most F16_CACHE_BYTES of converted values are kept
# per thread (a group's members are threads), a version's dropped when its storage is written
F16_VERSION_SHARE = 4
F16_CACHE_BYTES = 32 << 20


def _f16_from_version(view: Tensor, raw: np.ndarray, buf: np.ndarray) -> np.ndarray | None:
    """Float16 operand ``raw`` (the values of ``view``) as float32 from this thread's conversion of its whole storage
    version: written into ``buf``, or an array kept for an operand read again (read only: the product reads it);
    None (nothing written) when the view's storage does not qualify or is not converted yet.

    Exact: ``(uid, gen)`` names one version of the storage's bits (every write bumps ``gen``, a new allocation has a
    new ``uid``: the invariant core.sharing's equality memo rests on, ``access.own_storage``), the conversion is the
    table's, element by element, and the operand is the same offset and strides in the converted array (twice the
    bytes per element), so the result has the bits the table gives ``raw``, in ``buf``'s layout (C-contiguous).
    ``NKISIM_SHARE_SELFCHECK=1`` checks that on every use."""
    root = own_storage(view)
    if root is None:
        return None
    a, base, off = root
    if base.dtype != F16 or not base.flags.c_contiguous:
        return None
    cache = getattr(_SCRATCH, "f16", None)
    if cache is None:
        cache = _SCRATCH.f16 = {}
        _SCRATCH.f16_bytes = 0
    st = cache.get(a.uid)
    if st is None or st[0] != a.gen:
        if st is not None:
            _SCRATCH.f16_bytes -= st[4]
        if len(cache) >= 4096:  # storages that died or moved on
            cache.clear()
            _SCRATCH.f16_bytes = 0
        # [gen, bytes operands read before the conversion, the conversion, {(offset, shape, strides): reads or the
        # operand kept converted}, bytes held]
        st = cache[a.uid] = [a.gen, 0, None, {}, 0]
    conv = st[2]
    if conv is None:
        st[1] += raw.nbytes
        if st[1] * F16_VERSION_SHARE < base.nbytes:
            return None
        conv = st[2] = _f16_hold(cache, st, np.take(_f16_table(), base.view(np.uint16), mode="clip"))
    key = (off, raw.shape, raw.strides)
    kept = st[3].get(key)
    if kept.__class__ is np.ndarray:
        out = kept
    else:
        src = np.ndarray(raw.shape, dtype=F32, buffer=conv, offset=2 * off, strides=tuple(2 * s for s in raw.strides))
        if kept is None:  # its first read in this version: into the scratch buffer
            st[3][key] = 1
            np.copyto(buf, src)
            out = buf
        else:
            out = st[3][key] = _f16_hold(cache, st, np.array(src, order="C"))
    if sharing.SELF_CHECK and not np.array_equal(
            out.view(np.uint32), np.take(_f16_table(), raw.view(np.uint16), mode="clip").view(np.uint32)):
        raise sharing.SharingSelfCheckError(f"the float16 conversion of storage '{a.name}' is not its operand's "
                                            "values (a write path that does not bump Allocation.gen)")
    return out


def _f16_hold(cache: dict, st: list, arr: np.ndarray) -> np.ndarray:
    """Count ``arr`` (converted values of version ``st``) against F16_CACHE_BYTES; past it, the other versions'
    conversions are let go first (they are converted again if read again)."""
    if _SCRATCH.f16_bytes + arr.nbytes > F16_CACHE_BYTES:
        for e in cache.values():
            if e is not st:
                e[2] = None
                e[3].clear()
                e[4] = 0
        _SCRATCH.f16_bytes = st[4]
    st[4] += arr.nbytes
    _SCRATCH.f16_bytes += arr.nbytes
    return arr


def _product(s: np.ndarray, mv: np.ndarray, fresh: bool | np.ndarray) -> np.ndarray:
    """``s.T @ mv``; into this thread's scratch buffer unless ``fresh`` (the caller keeps the array), or into
    ``fresh`` when it is an array (a lockstep producer's channel slot: the same BLAS call, core.channel)."""
    if fresh.__class__ is np.ndarray:
        return np.matmul(s.T, mv, out=fresh)
    if fresh:
        return s.T @ mv
    return np.matmul(s.T, mv, out=_scratch("o", (s.shape[1], mv.shape[1]), F32))


def _operand_values(t: Tensor, dtype_name: str) -> np.ndarray:
    """A matmul operand as TensorE multiplies it: fp32, with a tf32 tile's values rounded to tf32's 10-bit mantissa
    (whatever bits a DMA left in its 32-bit container: "tfloat32 (1S,8E,10M)", nki.api.shared.rst)."""
    return _as_operand(read(t), dtype_name)


def _as_operand(raw: np.ndarray, dtype_name: str) -> np.ndarray:
    v = execute.to_f32(raw)
    return dtypes.round_tf32(v) if dtype_name == "tfloat32" else v


def _check_matmul_promises(ctx: KernelContext, op_name: str, attrs: dict, stationary: tuple, moving: tuple) -> None:
    """The promises an nc_matmul's hints make about its data, checked on the values (full mode), because the cost
    model grants their speed-up (docs/grading-security.md, G3/G4).

    * ``is_*_onezero`` on an fp32 operand: the tile holds only 0 and 1 (the hint has no effect on other dtypes,
      nki.isa.nc_matmul).  Hardware runs fewer fp32 passes for it; what it computes for other values is not
      documented, so a broken promise is an error, not a silently exact product.
    * ``is_transpose``: on NeuronCore-v3 the transpose mode transposes the stationary and needs the [K, K]
      identity as the moving tile; anything else is an error.  On NeuronCore-v2 the flag only labels the
      instruction for the profiler ("Tensor Engine does not support transpose mode natively"): the matmul is
      computed and, with a moving tile that is not an identity, costed as the matmul it is."""
    for (vals, dtype, hinted), who in ((stationary, "stationary"), (moving, "moving")):
        if hinted and dtype == "float32":
            bad = (vals != 0) & (vals != 1)
            if bad.any():  # the message names no value or position (a fault's text never does: S2, S10)
                _broken_promise(ctx, "nkisim_matmul_onezero_hint", op=op_name, hint=f"is_{who}_onezero",
                                operand=who, dtype=dtype)
                return
    if attrs.get("is_transpose"):
        mv = moving[0]
        k, n = mv.shape
        why = None
        if n != k:
            why = f"has {n} columns for {k} partitions"
        elif not np.array_equal(mv, np.eye(k, dtype=mv.dtype)):
            why = "is not the identity"
        if why is not None:
            if ctx.target == "trn1":
                attrs["is_transpose"] = False  # a profiler label on NeuronCore-v2: a plain matmul, costed as one
            else:
                _broken_promise(ctx, "nkisim_matmul_transpose_mode", op=op_name, shape=[k, n], why=why)


def _broken_promise(ctx: KernelContext, code: str, **fields) -> None:
    """A promise broken by the values: a fault of the run, raised by ``run_kernel`` once the kernel's Python has
    returned (the first one; the run's later faults are dropped), never inside the call.  Raised inside it, the
    error was a reader of device data: a ``try`` around a hinted matmul learnt whether a tile held only 0 and 1,
    and the message named the first other value and its position (docs/grading-security.md S10)."""
    if ctx.fault is None:
        ctx.fault = error(code, **fields)
    ctx.faulted = True
    LIVE[0] = True  # the front ends' later calls take the executor's path, which runs them dry after a fault


def _matmul_out(ctx: KernelContext, out_shape: tuple, dst: Tensor | None, op_name: str, same16=None) -> Tensor:
    """The PSUM tile a matmul writes: fresh, or ``dst`` (fp32 on NeuronCore-v2/v3: "The dst tile must be a float32
    tile in NeuronCore-v2 and NeuronCore-v3", nki.isa.nc_matmul; ``same16``: the 16-bit input dtype of a v3
    transpose-mode matmul, which may also write that dtype)."""
    if dst is None:
        out = new_result(ctx, out_shape, F32, B_PSUM)
    else:
        seen = ctx.matmul_dst
        if seen is not None and seen[0]() is dst and seen[1] == out_shape and seen[2] is same16:
            # the previous matmul into this view passed the checks below with this result shape: they read only
            # the view's immutable state (kind, dtype, shape, partition axis, Operand, allocation's block size) and
            # the run's limits
            return dst
        out = need_tensor(dst, op_name, "dst")
        need_on_chip(out, op_name, "dst", (B_PSUM,))
        if out.dtype != F32 and (same16 is None or out.dtype != same16):
            fail("nkisim_matmul_dtype", detail=f"dst '{out.name}' is {out.dtype}: the matmul output must be a "
                 "float32 PSUM tile on NeuronCore-v2 and -v3 (a NeuronCore-v3 transpose-mode matmul, "
                 "is_transpose=True, may also write its bfloat16/float16 input dtype)")
        if parts_of(out) != out_shape[0] or free_of(out) * parts_of(out) != out_shape[0] * free_of_shape(out_shape):
            fail("nkisim_dst_mismatch", op=op_name, dst=list(out.shape), result=list(out_shape),
                 detail=" (the stationary's free size x the moving's free size)")
    check_psum_bank(ctx, out, op_name)
    if dst is not None:
        ctx.matmul_dst = (weakref.ref(out), out_shape, same16)
    return out


def free_of_shape(shape: tuple) -> int:
    n = 1
    for d in shape[1:]:
        n *= d
    return n


def _matmul_done(ctx: KernelContext, ins, out: Tensor, values, mask, dst: Tensor | None, accumulate,
                 chain=None) -> Tensor:
    if dst is None:
        return finish(ctx, ins, out, values, mask)
    if access.FROZEN[0]:
        return dst  # a dynamic loop body being recorded: the flags are checked when it executes
    # the rules read the accumulation-group flags, which both modes keep: they fire with or without values
    if accumulate is True and not holds_data(dst):
        _psum_rule(ctx, "nkisim_matmul_accumulate_uninit", op=ins.op, dst=list(dst.shape))
    # every target nkisim models (trn1, trn2) is NeuronCore-v2/v3, where the note below applies
    if accumulate is True and holds_value_init(dst) and applies("nkisim_matmul_accumulate_value_init", ctx.era):
        _psum_rule(ctx, "nkisim_matmul_accumulate_value_init", op=ins.op, dst=list(dst.shape), target=ctx.target)
    if accumulate is None:
        start_tensor_groups(dst)  # a placed tensor's first matmul: new groups, whatever aliased it before
        start_group_over_value_init(dst, mask)  # the compiler's inferred flag: a memset is no matmul write
    if values is not None:
        psum_write(dst, np.asarray(values).reshape(dst.shape), accumulate is not False, mask,
                   force=accumulate is True, chain=chain)
    else:
        psum_flags(dst, accumulate is not False, mask)
    return dst


def _psum_rule(ctx: KernelContext, code: str, **fields) -> None:
    """A PSUM accumulation pattern that gives wrong results on hardware: an error when compiling; under the CPU
    simulator a warning, after which the matmul accumulates onto whatever the PSUM holds ("nki.isa.nc_matmul warns
    on PSUM accumulation patterns that produce incorrect results on hardware", NKI 0.6.0 release notes, nki.simulate
    fixes; nkisim's simulator mode treats the compiler's other checks the same way).  The legacy API's
    ``nki.simulate_kernel`` keeps the error: the release note is about NKI 0.6's simulator."""
    if ctx.mem.simulate and ctx.era == "nki":
        warnings.warn(NKISimulationWarning(message(code, **fields)), stacklevel=4)
    else:
        fail(code, **fields)


def _double_row_matmul(ctx: KernelContext, stationary: Tensor, moving: Tensor, k: int, mask, op_name: str,
                       dst: Tensor | None = None, accumulate: bool | None = None) -> Tensor:
    """FP8 double-row mode (NeuronCore-v3): stationary [K, 2, M] and moving [K, 2, N] hold two K-rows of fp8 per
    partition; the result [M, N] is st[:, 0].T @ mv[:, 0] + st[:, 1].T @ mv[:, 1] (contraction 2K) at the cycle cost
    of one [K, M] x [K, N] matmul ("Double FP8 mode, 2x matmul throughput by packing two FP8 weight/ifmap element
    pairs", nki.isa.matmul_perf_mode; AWS's nki-samples double_row_matmul uses these shapes)."""
    if ctx.target != "trn2":
        fail("nkisim_matmul_dtype", detail="perf_mode double_row needs NeuronCore-v3 (trn2); on NeuronCore-v2 "
             "performance mode is not supported")
    for t, who in ((stationary, "stationary"), (moving, "moving")):
        if t.dtype.name not in ("float8_e4m3", "float8_e4m3fn", "float8_e5m2"):
            fail("nkisim_matmul_dtype", detail=f"perf_mode double_row needs fp8 operands, {who} is {t.dtype.name}")
        if t.ndim != 3 or t.shape[1] != 2:
            fail("nkisim_matmul_dtype", detail=f"perf_mode double_row needs {who} of shape [K, 2, F], got "
                 f"{list(t.shape)}")
    lim = ctx.limits
    m, n = stationary.shape[2], moving.shape[2]
    if m > lim.gemm_stationary_fmax:
        fail("nkisim_matmul_stationary_fmax", m=m, limit=lim.gemm_stationary_fmax, shape=list(stationary.shape))
    if n > lim.gemm_moving_fmax:
        fail("nkisim_matmul_moving_fmax", n=n, limit=lim.gemm_moving_fmax, shape=list(moving.shape))
    out_shape = (m, n)
    out = _matmul_out(ctx, out_shape, dst, op_name)
    ins = ctx.emit("nc_matmul", E_TENSOR, (stationary, moving), (out,),
                   {"K": 2 * k, "M": m, "N": n, "accumulate": dst is not None and accumulate is not False,
                    "is_transpose": False, "perf_mode": "double_row"})
    values = None
    if ctx.full:
        s = execute.to_f32(read(stationary)).reshape(k, 2, m)
        mv = execute.to_f32(read(moving)).reshape(k, 2, n)
        values = s[:, 0].T @ mv[:, 0] + s[:, 1].T @ mv[:, 1]
    return _matmul_done(ctx, ins, out, values, mask_values(mask, out_shape, stationary, moving), dst, accumulate)


def nc_transpose(data: Tensor, *, engine: Engine = E_UNKNOWN, dtype=None, mask=None,
                 op_name: str = "nc_transpose", dst: Tensor | None = None) -> Tensor:
    """The partition axis and the (flattened) free axes of ``data`` swapped, into a fresh tile (TensorE: PSUM,
    VectorE: SBUF) or into ``dst`` (the current API: same dtype as ``data``, and an engine that is Tensor or Vector:
    "engine: specify which engine to use for transpose: nki.isa.engine.tensor or nki.isa.engine.vector", NKI 0.6)."""
    ctx = current(op_name)
    ctx.settle()
    data = need_tensor(data, op_name, "data")
    if dst is not None and engine not in (E_UNKNOWN, E_TENSOR, E_VECTOR):
        fail("nkisim_bad_argument", op=op_name, detail=f"transposes run on nisa.engine.tensor or nisa.engine.vector, "
             f"not {ENGINE_LABEL.get(engine, str(engine))}")
    p = parts_of(data)
    f = free_of(data)
    lim = ctx.limits
    if engine == E_UNKNOWN:
        small = p <= lim.vector_transpose_max and f <= lim.vector_transpose_max
        if dst is None:
            engine = E_VECTOR if small and data.kind != B_SBUF else E_TENSOR
        else:  # TensorE writes PSUM only: an SBUF destination needs the Vector Engine
            engine = E_VECTOR if small and (data.kind != B_SBUF or dst.kind == B_SBUF) else E_TENSOR
    limit = lim.pmax if engine == E_TENSOR else lim.vector_transpose_max
    if p > limit or f > limit:
        fail("nkisim_transpose_limit", engine=ENGINE_LABEL.get(engine, str(engine)), shape=list(data.shape),
             limit=limit)
    if engine == E_TENSOR:
        need_on_chip(data, op_name, "data", (B_SBUF,))
        if ctx.direct_alloc:
            fail("err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel", op=op_name)
        out_buf = B_PSUM
    else:
        need_on_chip(data, op_name, "data")
        out_buf = B_SBUF
    dt = dtypes.to_dtype(dtype) if dtype is not None else data.dtype
    if dst is None:
        out = new_result(ctx, (f, p), data.dtype, out_buf)
    else:
        out = need_tensor(dst, op_name, "dst")
        need_on_chip(out, op_name, "dst", (B_PSUM,) if engine == E_TENSOR else (B_SBUF, B_PSUM))
        if out.dtype != data.dtype:
            fail("nkisim_dst_mismatch", op=op_name, dst=f"{list(out.shape)} {out.dtype}",
                 result=f"{[f, p]} {data.dtype}", detail=" (the output has the input's dtype)")
        if parts_of(out) != f or free_of(out) != p:
            fail("nkisim_dst_mismatch", op=op_name, dst=list(out.shape), result=[f, p], detail="")
        if engine == E_TENSOR:
            check_psum_bank(ctx, out, op_name)
    ins = ctx.emit("nc_transpose", engine, (data,), (out,), {"P": p, "F": f})
    values = execute.to_f32(read(data)).reshape(p, f).T if ctx.full else None
    # no mask and an in-bounds source (the usual call): nothing to evaluate
    tmask = None if mask is None and not data.oob else transposed_mask(mask, data, (f, p),
                                                                         lambda m: m.reshape(p, f).T)
    if dst is not None:
        return deliver(ctx, ins, out, values, tmask, dst)
    out = finish(ctx, ins, out, values, tmask)
    if dt != data.dtype:
        # nki.isa.nc_transpose docs: "if [dtype is] specified and it's different from the data type of input tile
        # data, an additional nki.isa.cast instruction will be inserted to cast the transposed data"
        out = tensor_copy(out, dtype=dt, op_name=op_name)
    return out
