"""``nki.isa`` (``nisa``) of the current API (NKI 0.6, Neuron SDK 2.32) as nkisim implements it.

Every instruction takes its destination first and writes it in place (``nisa.tensor_tensor(dst, data1, data2,
op)``); the result dtype is the destination's ("The float32 computation results are cast to ``dst.dtype``",
nki.isa.tensor_scalar docs).  Each function is a thin adapter: it resolves the operator and enum arguments and calls
the same core instruction builder as the legacy ``neuronxcc.nki.isa`` (``nkisim.core.ops``), with ``dst=``.
Every instruction returns an ``NkiInstruction`` handle (``.depends_on(*producers)`` adds scheduling edges).
Parameters the API removed (``mask=``, ``dtype=``) are errors naming what replaced them, and enum parameters take
the named members only ("Raw integer values (e.g., dge_mode=2) are no longer accepted", NKI 0.3 migration guide),
except ``dge_mode``, whose integers AWS's own nki-library kernels pass (see ``_dge``).
"""

from __future__ import annotations

import types as _types

from nkisim.core import config as _config
from nkisim.core import context as _ctx
from nkisim.core.instr import Engine as _Engine
from nkisim.core.ops import assign as _assign
from nkisim.core.ops import collectives as _col
from nkisim.core.ops import dma as _dma
from nkisim.core.ops import elementwise as _ew
from nkisim.core.ops import gpsimd as _gps
from nkisim.core.ops import lnc as _lnc
from nkisim.core.ops import reduce as _red
from nkisim.core.ops import registers as _reg
from nkisim.core.ops import tensor_engine as _te
from nkisim.core.rules import fail as _fail
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.frontends._operators import act as _act
from nkisim.frontends._operators import alu as _alu

# ---- enums (nki.isa.constants; re-exported here as the stub does) ----------------------------------------------
from nkisim.frontends.nki.isa import constants  # noqa: E402, F401  (nki.isa.constants)
from nkisim.frontends.nki.isa.constants import (  # noqa: E402, F401  (public NKI names)
    dge_mode,
    dma_engine,
    engine,
    matmul_perf_mode,
    nc_version,
    oob_mode,
    reduce_cmd,
)
from nkisim.frontends.nki.language import NKIObject, NkiTensor, equal, maximum  # noqa: F401  (as the stub does)
from nkisim.frontends.nki.language import is_on_chip as _is_on_chip
from nkisim.frontends.nki.objects import VirtualRegister  # noqa: F401  (public NKI name)

tensor_engine = engine.tensor  # deprecated spellings
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class NkiValidationError(Exception, metaclass=_Sealed):
    """Raised when hardware constraints are violated."""


# the core engine of each member, as a plain attribute: the per-instruction path reads it without hashing the Enum
for _m, _e in ((engine.unknown, _Engine.UNKNOWN), (engine.tensor, _Engine.TENSOR), (engine.vector, _Engine.VECTOR),
               (engine.scalar, _Engine.SCALAR), (engine.gpsimd, _Engine.GPSIMD), (engine.dma, _Engine.DMA),
               (engine.sync, _Engine.SYNC)):
    _m.core = _e
del _m, _e
# module aliases: the parameters of the same names shadow the enum classes inside the instruction functions
_DgeMode, _OobMode, _DmaEngine = dge_mode, oob_mode, dma_engine
_HWDGE, _OOB_SKIP, _OOB_ERROR, _DGE_UNKNOWN = dge_mode.hwdge, oob_mode.skip, oob_mode.error, dge_mode.unknown
_ENGINE_UNKNOWN = engine.unknown


def _member(value, enum, param: str, op: str):
    if not isinstance(value, enum):
        raise TypeError(f"nisa.{op}: {param}={value!r} must be a member of nki.isa.{enum.__name__} (e.g. "
                        f"nisa.{enum.__name__}.{next(iter(enum)).name}): NKI 0.3+ no longer accepts raw integers")
    return value


def _dge(value, op: str):
    """A ``dge_mode`` argument: a member, or the member's integer value.  The NKI 0.3 migration guide says raw
    integers are "no longer accepted for enum parameters" (its example is ``dge_mode=2``), yet AWS's nki-library
    (d2ad3a5), whose fast suite runs on Trainium, passes ``dge_mode=3`` ("Use STATIC DMA mode", i.e.
    ``dge_mode.none``) in its QKV, RMSNorm/LayerNorm TKG and MLP TKG kernels: for ``dge_mode`` nkisim follows the
    kernels that run.  Other enums keep the guide's rule."""
    if value.__class__ is int and 0 <= value <= 3:
        return dge_mode(value)
    return _member(value, _DgeMode, "dge_mode", op)


def _engine(value, op: str) -> _Engine:
    if value.__class__ is engine:
        return value.core
    return _member(value, engine, "engine", op).core


def _removed(op: str, extra: dict) -> None:
    """Keyword arguments the current API does not have: the removed ones name their replacement."""
    name = next(iter(extra))
    why = {
        "mask": "the mask parameter was removed in NKI 0.2: slice the operands to the elements to compute "
                "(t[p0:p1, f0:f1], nl.ds(start, size))",
        "dtype": "the result dtype is the destination's: allocate dst with the dtype you want",
    }.get(name, f"nisa.{op} has no parameter '{name}'")
    raise TypeError(f"nisa.{op}() got an unexpected keyword argument '{name}': {why}")


def _reduce_cmd(value, op: str) -> int:
    return _member(value, reduce_cmd, "reduce_cmd", op).value


# ---- data movement --------------------------------------------------------------------------------------------
def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown, engine=engine.unknown,
             name=None, **removed) -> None:
    """Copy ``src`` to ``dst`` on the DMA engines (HBM/SBUF; casts through fp32 when the dtypes differ)."""
    if removed:
        _removed("dma_copy", removed)
    if dge_mode is _DGE_UNKNOWN and oob_mode is _OOB_ERROR and priority is None and engine is _ENGINE_UNKNOWN:
        _dma.dma_copy(src, dst, oob_skip=False)  # the defaults: the per-instruction fast path
        return
    dge_mode = _dge(dge_mode, "dma_copy")
    skip = _member(oob_mode, _OobMode, "oob_mode", "dma_copy") is _OOB_SKIP
    _dma.check_dma_options("dma_copy", None if dge_mode is _DGE_UNKNOWN else dge_mode.name, priority=priority,
                           engine=_engine(engine, "dma_copy"), src=src, dst=dst)
    if dge_mode is _HWDGE and getattr(src, "dtype", None) != getattr(dst, "dtype", None):
        # "NKI 0.3.0 enforces that source and destination element types must match when using
        # dge_mode=dge_mode.hwdge" (migration guide): the hardware DGE moves raw bytes
        _fail("nkisim_bad_argument", op="dma_copy", detail=f"dge_mode=hwdge moves raw bytes: src ({src.dtype}) and "
              f"dst ({dst.dtype}) must have the same dtype (reinterpret with .view(dtype))")
    _dma.dma_copy(src, dst, oob_skip=skip, dge=None if dge_mode is _DGE_UNKNOWN else dge_mode.name)


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None, **removed) -> None:
    """Transpose ``src`` into ``dst`` on the DMA engines (2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0))."""
    if removed:
        _removed("dma_transpose", removed)
    mode = _dge(dge_mode, "dma_transpose")
    skip = _member(oob_mode, _OobMode, "oob_mode", "dma_transpose") is _OOB_SKIP
    _dma.dma_transpose(src, axes, dst=dst, two_byte_only=mode is _HWDGE, dge=mode.name, oob_skip=skip)


# ---- TensorE --------------------------------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None,
              **removed) -> None:
    """``dst = stationary.T @ moving`` into PSUM; ``accumulate`` None: the first write to a PSUM location
    overwrites, later ones accumulate; True: accumulate; False: overwrite (nki.isa.nc_matmul, "Accumulation
    mode")."""
    if removed:
        _removed("nc_matmul", removed)
    mode = perf_mode if isinstance(perf_mode, matmul_perf_mode) else matmul_perf_mode(perf_mode)
    if tile_position or tile_size:
        _te.check_pe_tiling(stationary, tile_position, tile_size, strict=True,
                            double_row=mode is matmul_perf_mode.double_row)
    _te.nc_matmul(stationary, moving, is_transpose=bool(is_transpose), double_row=mode is matmul_perf_mode.double_row,
                  is_stationary_onezero=bool(is_stationary_onezero), is_moving_onezero=bool(is_moving_onezero),
                  dst=dst, accumulate=accumulate)


def nc_transpose(dst, data, engine=engine.unknown, name=None, **removed) -> None:
    """Transpose ``data``'s partition and (flattened) free axes into ``dst`` (TensorE into PSUM, or VectorE for up
    to 32 x 32); ``dst`` has ``data``'s dtype."""
    if removed:
        _removed("nc_transpose", removed)
    _te.nc_transpose(data, engine=_engine(engine, "nc_transpose"), dst=dst)


# ---- element-wise -------------------------------------------------------------------------------------------------
def tensor_copy(dst, src, engine=engine.unknown, name=None, **removed) -> None:
    if removed:
        _removed("tensor_copy", removed)
    _ew.tensor_copy(src, dtype=dst.dtype, engine=_engine(engine, "tensor_copy"), dst=dst, partition_broadcast=False)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None, **removed) -> None:
    if removed:
        _removed("tensor_tensor", removed)
    _ew.tensor_tensor(data1, data2, _alu(op, "tensor_tensor"), dtype=dst.dtype, engine=_engine(engine, "tensor_tensor"),
                      dst=dst, strict=True)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None, **removed) -> None:
    if removed:
        _removed("tensor_scalar", removed)
    _ew.tensor_scalar(data, _alu(op0, "tensor_scalar", unary=True), operand0, reverse0,
                      _alu(op1, "tensor_scalar", unary=True) if op1 is not None else None, operand1, reverse1,
                      dtype=dst.dtype, engine=_engine(engine, "tensor_scalar"), dst=dst, strict=True)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None,
                         **removed) -> None:
    if removed:
        _removed("scalar_tensor_tensor", removed)
    _assign.into(dst, _ew.scalar_tensor_tensor(data, _alu(op0, "scalar_tensor_tensor"), operand0,
                                               _alu(op1, "scalar_tensor_tensor"), operand1, reverse0=reverse0,
                                               reverse1=reverse1, dtype=dst.dtype, strict=True))


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None, **removed) -> None:
    """``dst = op(data * scale + bias)`` on ScalarE, optionally reducing each partition into the registers."""
    if removed:
        _removed("activation", removed)
    red = _alu(reduce_op, "activation") if reduce_op is not None else None
    if red not in (None, "add"):  # "reduce_op must be nl.add" (nisa.activation; activation_reduce takes others)
        _fail("nkisim_bad_argument", op="activation", detail=f"reduce_op must be nl.add, got nl.{red} (on "
              "NeuronCore-v3, nisa.activation_reduce reduces with other operators)")
    _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dst.dtype, reduce_op=red, reduce_res=reduce_res,
                   reduce_cmd=_reduce_cmd(reduce_cmd, "activation"), dst=dst, any_bias_dtype=True)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None, **removed) -> None:
    if removed:
        _removed("activation_reduce", removed)
    _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dst.dtype, reduce_op=_alu(reduce_op, "activation"),
                   reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce.value, dst=dst, any_bias_dtype=True)


def reciprocal(dst, data, name=None, **removed) -> None:
    if removed:
        _removed("reciprocal", removed)
    _assign.into(dst, _ew.reciprocal(data, dtype=dst.dtype))


def memset(dst, value, engine=engine.unknown, name=None, **removed) -> None:
    """Fill ``dst`` with ``value``, which must suit dst's dtype (an integer for integer tensors: NKI 0.3)."""
    if removed:
        _removed("memset", removed)
    _ew.memset_dst(dst, value, engine=_engine(engine, "memset"), strict=True)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None, **removed) -> None:
    if removed:
        _removed("tensor_copy_predicated", removed)
    _ew.tensor_copy_predicated(src, dst, predicate, reverse_pred=reverse_pred, strict=True)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None, **removed) -> None:
    """``dst[p, ...] = offset + p * channel_multiplier + sum_k step_k * i_k`` over ``pattern = [[step, num], ...]``
    (GpSimdE, int32 arithmetic, cast to dst's dtype)."""
    if removed:
        _removed("iota", removed)
    _gps.iota_pattern(dst, pattern, offset, channel_multiplier)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=equal, offset=0, name=None,
                  **removed) -> None:
    """``dst = on_true_tile where cmp_op(affine, 0) else on_false_value``, affine as in :func:`iota` (GpSimdE)."""
    if removed:
        _removed("affine_select", removed)
    _gps.affine_select_pattern(dst, pattern, channel_multiplier, on_true_tile, on_false_value,
                               _alu(cmp_op, "affine_select"), offset)


def dropout(dst, data, prob, name=None, **removed) -> None:
    if removed:
        _removed("dropout", removed)
    _assign.into(dst, _gps.dropout(data, prob, dtype=dst.dtype, strict=True))


def nc_stream_shuffle(dst, src, shuffle_mask, name=None, **removed) -> None:
    if removed:
        _removed("nc_stream_shuffle", removed)
    _gps.nc_stream_shuffle(src, dst, shuffle_mask, strict=True)


def local_gather(dst, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, name=None, **removed) -> None:
    if removed:
        _removed("local_gather", removed)
    _assign.into(dst, _gps.local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices))


def sequence_bounds(dst, segment_ids, name=None, **removed) -> None:
    if removed:
        _removed("sequence_bounds", removed)
    _assign.into(dst, _gps.sequence_bounds(segment_ids, dtype=dst.dtype))


# ---- reductions, scans, statistics ------------------------------------------------------------------------------
def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None, **removed) -> None:
    """Reduce the last contiguous free axes of ``data`` into ``dst`` (VectorE)."""
    if removed:
        _removed("tensor_reduce", removed)
    _red.tensor_reduce(_alu(op, "tensor_reduce"), data, axis, negate=negate, keepdims=keepdims, dtype=dst.dtype,
                       dst=dst)


def tensor_partition_reduce(dst, op, data, name=None, **removed) -> None:
    if removed:
        _removed("tensor_partition_reduce", removed)
    _assign.into(dst, _red.tensor_partition_reduce(_alu(op, "tensor_partition_reduce"), data, dtype=dst.dtype,
                                                   strict=True))


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None,
                         **removed) -> None:
    """``dst = data op0 operand0`` and its free-axis reduction into VectorE's registers (``reduce_res``: read out)."""
    if removed:
        _removed("tensor_scalar_reduce", removed)
    _assign.into(dst, _red.tensor_scalar_reduce(data, _alu(op0, "tensor_scalar_reduce", unary=True), operand0,
                                                _alu(reduce_op, "tensor_scalar_reduce"), reduce_res,
                                                reverse0=reverse0,
                                                reduce_cmd=_reduce_cmd(reduce_cmd, "tensor_scalar_reduce"),
                                                reduce_init=reduce_init, negate=bool(reduce_res_negate),
                                                dtype=dst.dtype))


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None,
                       **removed) -> None:
    if removed:
        _removed("tensor_tensor_scan", removed)
    _assign.into(dst, _red.tensor_tensor_scan(data0, data1, initial, _alu(op0, "tensor_tensor_scan"),
                                              _alu(op1, "tensor_tensor_scan"), reverse0=reverse0, reverse1=reverse1,
                                              dtype=dst.dtype, strict=True))


def bn_stats(dst, data, name=None, **removed) -> None:
    if removed:
        _removed("bn_stats", removed)
    _assign.into(dst, _red.bn_stats(data, dtype=dst.dtype))


def bn_aggr(dst, data, name=None, **removed) -> None:
    if removed:
        _removed("bn_aggr", removed)
    _assign.into(dst, _red.bn_aggr(data, dtype=dst.dtype))


def range_select(dst, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.reset_reduce,
                 reduce_res=None, reduce_op=maximum, range_start=0, on_false_value=-3.4028235e38, name=None,
                 **removed) -> None:
    if removed:
        _removed("range_select", removed)
    _assign.into(dst, _red.range_select(on_true_tile, _alu(comp_op0, "range_select"), _alu(comp_op1, "range_select"),
                                        bound0, bound1, reduce_res=reduce_res,
                                        reduce_op=_alu(reduce_op, "range_select"),
                                        reduce_cmd=_reduce_cmd(reduce_cmd, "range_select"), range_start=range_start,
                                        on_false_value=on_false_value, dtype=dst.dtype, strict=True))


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_op=maximum,
                  reverse_pred=False, name=None, **removed) -> None:
    if removed:
        _removed("select_reduce", removed)
    _red.select_reduce(dst, predicate, on_true, on_false, reduce_res=reduce_res,
                       reduce_cmd=_reduce_cmd(reduce_cmd, "select_reduce"), reduce_op=_alu(reduce_op, "select_reduce"),
                       reverse_pred=reverse_pred, strict=True)


def max8(dst, src, name=None, **removed) -> None:
    if removed:
        _removed("max8", removed)
    _assign.into(dst, _red.max8(src, dtype=dst.dtype))


def nc_find_index8(dst, data, vals, name=None, **removed) -> None:
    if removed:
        _removed("nc_find_index8", removed)
    _assign.into(dst, _red.nc_find_index8(data, vals, dtype=dst.dtype))


def nc_match_replace8(dst, data, vals, imm, dst_idx=None, name=None, **removed) -> None:
    if removed:
        _removed("nc_match_replace8", removed)
    _assign.into(dst, _red.nc_match_replace8(data, vals, imm, dst_idx=dst_idx, dtype=dst.dtype))


# ---- added in NKI 0.4-0.6 -------------------------------------------------------------------------------------
def tensor_scalar_cumulative(dst, src, op0, op1, imm0, imm1=None, reduce_cmd=reduce_cmd.reset_reduce, name=None,
                             **removed) -> None:
    """``reg = op1(op0(src[i], imm0), reg); dst[i] = reg`` along each partition (VectorE running scan)."""
    if removed:
        _removed("tensor_scalar_cumulative", removed)
    _red.tensor_scalar_cumulative(src, dst, _alu(op0, "tensor_scalar_cumulative"), imm0,
                                  _alu(op1, "tensor_scalar_cumulative"), imm1,
                                  reduce_cmd=_reduce_cmd(reduce_cmd, "tensor_scalar_cumulative"))


def nc_n_gather(dst, data, indices, name=None, **removed) -> None:
    """``dst[p, j] = data[p].flatten()[indices[p, j]]`` within each partition (GpSimdE, uint32 indices); ``dst`` has
    ``data``'s dtype and ``indices``' shape."""
    if removed:
        _removed("nc_n_gather", removed)
    if getattr(dst, "dtype", None) != getattr(data, "dtype", None):
        _fail("nkisim_bad_argument", op="nc_n_gather", detail=f"dst ({dst.dtype}) must have data's dtype "
              f"({data.dtype})")
    _assign.into(dst, _gps.gather_flattened(data, indices, dtype=dst.dtype))


def nonzero_with_count(dst, src, index_offset=0, padding_val=-1, name=None, **removed) -> None:
    """Indices of the nonzero elements (+ index_offset), padding, then their count, on partitions 0, 16, ..., 112
    (GpSimdE, NeuronCore-v3+)."""
    if removed:
        _removed("nonzero_with_count", removed)
    _gps.nonzero_with_count(src, dst, index_offset, padding_val)


def topk(val_dst, idx_dst, src, n, name=None, **removed) -> None:
    """The K largest of the ``n`` bf16 values of each 16-partition snake of ``src`` and their indices, ascending
    (GpSimdE; K is ``val_dst``'s free size)."""
    if removed:
        _removed("topk", removed)
    _gps.topk(src, val_dst, idx_dst, n)


def dma_compute(dst, srcs, reduce_op, scales=None, unique_indices=True, oob_mode=oob_mode.error, name=None,
                **removed) -> None:
    """``dst = srcs[0] + srcs[1] + ...`` computed by the DMA engines in fp32 (``reduce_op`` nl.add and ``scales``
    all 1.0 are the only documented values)."""
    if removed:
        _removed("dma_compute", removed)
    op = _alu(reduce_op, "dma_compute")
    if op != "add":
        _fail("nkisim_bad_argument", op="dma_compute", detail=f"reduce_op must be nl.add (the only supported "
              f"operation), not {op}")
    if scales is not None and any(float(x) != 1.0 for x in scales):
        _fail("nkisim_bad_argument", op="dma_compute", detail="every scale must be 1.0 (or scales=None)")
    if not unique_indices:
        _fail("nkisim_bad_argument", op="dma_compute", detail="unique_indices must be True")
    skip = _member(oob_mode, _OobMode, "oob_mode", "dma_compute") is _OOB_SKIP
    _col.dma_compute(dst, srcs, op, scales, oob_skip=skip)


def rng(dst, engine=engine.vector, name=None, **removed) -> None:
    """32 random bits per element of the integer tile ``dst`` (their least significant bits), on VectorE or
    (NeuronCore-v3+) GpSimdE."""
    if removed:
        _removed("rng", removed)
    eng = _engine(engine, "rng")
    if eng not in (_Engine.VECTOR, _Engine.GPSIMD):
        _fail("nkisim_bad_argument", op="rng", detail="engine must be nisa.engine.vector or nisa.engine.gpsimd")
    _gps.rng(dst, eng)


def set_rng_seed(src_seeds, name=None, **removed) -> None:
    """Seed VectorE's generator with the 32-bit value of a [1, 1] SBUF/PSUM tensor."""
    if removed:
        _removed("set_rng_seed", removed)
    if tuple(getattr(src_seeds, "shape", ())) != (1, 1) or src_seeds.dtype.itemsize != 4 \
            or not _is_on_chip(src_seeds.buffer):
        _fail("nkisim_bad_argument", op="set_rng_seed", detail="src_seeds must be a [1, 1] tensor of a 32-bit dtype "
              "in SBUF or PSUM")
    _gps.random_seed(src_seeds)


def rand_set_state(src_seeds, engine=engine.gpsimd, name=None, **removed) -> None:
    """Seed each GpSimd lane's XORWOW generator from its partition of ``src_seeds`` ([P, 6] uint32, SBUF)."""
    if removed:
        _removed("rand_set_state", removed)
    _gps.rand_set_state(src_seeds, _engine(engine, "rand_set_state"))


def rand_get_state(dst, engine=engine.gpsimd, name=None, **removed) -> None:
    """Store each GpSimd lane's XORWOW state into its partition of ``dst`` ([P, 6] uint32, SBUF)."""
    if removed:
        _removed("rand_get_state", removed)
    _gps.rand_get_state(dst, _engine(engine, "rand_get_state"))


# ---- engine-sequencer registers ----------------------------------------------------------------------------------
def register_alloc(x=None) -> VirtualRegister:
    """A new virtual register, uninitialised or holding the integer ``x`` (no instruction: the compiler allocates
    registers; a value is an immediate)."""
    if x is not None and (isinstance(x, bool) or not isinstance(x, int)):
        raise TypeError(f"nisa.register_alloc: x must be None or an integer, got {type(x).__name__}")
    _ctx.current("register_alloc")
    return VirtualRegister(x)


def register_move(dst, src) -> None:
    """``dst = src``: an immediate integer or another register (no memory access)."""
    _reg.register_move(_need_register(dst, "register_move"), src)


def register_load(dst, src) -> None:
    """Load the one element of ``src`` (SBUF/HBM, shape [1] or [1, 1], up to 32 bits) into register ``dst``."""
    _reg.register_load(_need_register(dst, "register_load"), src)


def register_store(dst, src) -> None:
    """Store register ``src`` into the one element of ``dst`` (SBUF/HBM), cast to dst's dtype."""
    _reg.register_store(dst, _need_register(src, "register_store"))


def _need_register(r, op: str):
    if not isinstance(r, _reg.Register):
        raise TypeError(f"nisa.{op}: expected a VirtualRegister (nisa.register_alloc()), got {type(r).__name__}")
    return r


# ---- instruction handles ---------------------------------------------------------------------------------------
class NkiInstruction(NKIObject):
    """Handle of the instruction(s) one ``nisa`` call emitted (every ``nisa`` instruction returns one).

    ``consumer.depends_on(*producers)`` adds scheduling edges: the consumer starts only after every producer has
    completed ("A dependency is not a trace-time hint: it lowers to a hardware semaphore wait", nki.isa.
    NkiInstruction).  nkisim records the edges in the trace (``attrs['after']``) and the scheduler honours them on
    top of the data dependencies.  A producer must come earlier in program order (nkisim's trace is in program
    order; an edge to a later instruction would be a wait on something not yet issued)."""

    __slots__ = ("_span",)  # (trace list, first index, end index): resolved only when depends_on needs it

    def __init__(self, handle) -> None:
        handle = list(handle)
        self._span = (handle, 0, len(handle))

    @property
    def _instrs(self) -> list:
        instrs, lo, hi = self._span
        return instrs[lo:hi]

    def depends_on(self, *producers) -> NkiInstruction:
        ctx = _ctx.active()
        if ctx is not None and ctx.stream is not None and not ctx.api_depth:
            ctx.stream.depends(self, producers)
        mine = self._instrs
        if not mine:
            return self
        first = min(i.seq for i in mine)
        for prod in producers:
            if not isinstance(prod, NkiInstruction):
                raise TypeError(f"depends_on takes NkiInstruction handles (what nisa calls return), got "
                                f"{type(prod).__name__}")
            theirs = prod._instrs
            if not theirs:
                continue
            last = max(i.seq for i in theirs)
            if last >= first:
                raise ValueError("depends_on: the producer must be an instruction issued before the consumer "
                                 "(nkisim traces in program order)")
            for ins in mine:
                ins.attrs = {**ins.attrs, "after": tuple(ins.attrs.get("after", ())) + (last,)}  # never shared
        return self

    def __repr__(self) -> str:
        return f"NkiInstruction({', '.join(i.op for i in self._instrs) or 'no instruction'})"


def _returns_instruction(fn):
    """Wrap a nisa instruction so that it returns the handle of what it emitted (kept lean: it sits on the
    per-instruction path, ``python -m nkisim.bench``)."""
    stack = _ctx._STACK
    new = object.__new__
    cls = NkiInstruction
    live = _ctx.LIVE
    executor = _reg.api(fn)  # recorded in a dynamic loop body, run-time offsets resolved (core.ops.registers)

    def call(*args, **kwargs):
        if not stack:
            return fn(*args, **kwargs)  # raises "outside a kernel" as the function itself does
        instrs = stack[-1].trace.instrs
        n0 = len(instrs)
        if live[0]:
            executor(*args, **kwargs)
            h = new(cls)
            h._span = (instrs, n0, len(instrs))
            st = stack[-1].stream
            if st is not None and not stack[-1].api_depth:
                st.handle(h)  # the program's handle, for depends_on (nkisim.stream)
            return h
        fn(*args, **kwargs)
        h = new(cls)
        h._span = (instrs, n0, len(instrs))
        return h

    call.__name__ = call.__qualname__ = fn.__name__
    call.__doc__ = fn.__doc__
    call.__wrapped__ = fn
    _ctx.TRAMPOLINES.add(call.__code__)  # the namespace check looks through it to ``fn``
    return call


# ---- cross-core (LNC=2) ---------------------------------------------------------------------------------------
def sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, dma_engine=dma_engine.dma, name=None,
             **removed) -> None:
    """Send ``src`` to the other NeuronCore's ``dst`` while receiving its ``src`` into this core's ``dst`` (an
    LNC=2 launch; both cores' calls meet: nkisim.core.ops.lnc)."""
    if "use_gpsimd_dma" in removed:
        raise TypeError("nisa.sendrecv(use_gpsimd_dma=...) was replaced by the dma_engine enum in NKI 0.3 (migration "
                        "guide): pass dma_engine=nisa.dma_engine.gpsimd_dma, or dma_engine=nisa.dma_engine.dma for "
                        "use_gpsimd_dma=False")
    if removed:
        _removed("sendrecv", removed)
    mode = _member(dma_engine, _DmaEngine, "dma_engine", "sendrecv")
    _lnc.sendrecv(src, dst, send_to_rank, recv_from_rank, pipe_id, gpsimd_dma=mode is _DmaEngine.gpsimd_dma)


def core_barrier(data, cores, engine=engine.gpsimd, name=None) -> None:
    """Wait until both NeuronCores of an LNC=2 launch reach this barrier on ``data`` (shared HBM); only ``engine``
    is blocked (nkisim.core.ops.lnc)."""
    _lnc.core_barrier(data, cores, _engine(engine, "core_barrier"))


def get_nc_version() -> nc_version:
    """Generation of the target NeuronCore: gen2 (trn1), gen3 (trn2)."""
    ctx = _ctx.active()
    target = ctx.target if ctx is not None else _config.current_target()
    return nc_version.gen2 if target == "trn1" else nc_version.gen3


def get_nc_sub_version() -> int:
    """Silicon revision within the generation (nkisim models the first: 0)."""
    return 0


for _name in ("dma_copy", "dma_transpose", "nc_matmul", "nc_transpose", "tensor_copy", "tensor_tensor", "tensor_scalar",
              "scalar_tensor_tensor", "activation", "activation_reduce", "reciprocal", "memset",
              "tensor_copy_predicated", "iota", "affine_select", "dropout", "nc_stream_shuffle", "local_gather",
              "sequence_bounds", "tensor_reduce", "tensor_partition_reduce", "tensor_scalar_reduce",
              "tensor_tensor_scan", "bn_stats", "bn_aggr", "range_select", "select_reduce", "max8", "nc_find_index8",
              "nc_match_replace8", "tensor_scalar_cumulative", "nc_n_gather", "nonzero_with_count", "dma_compute",
              "rng", "set_rng_seed", "rand_set_state", "rand_get_state", "register_move", "register_load",
              "register_store", "sendrecv", "core_barrier"):
    globals()[_name] = _returns_instruction(globals()[_name])
_INSTRUCTIONS = {_n for _n in globals() if isinstance(globals()[_n], _types.FunctionType)
                 and getattr(globals()[_n], "__wrapped__", None) is not None}
del _name
# the other calls that make instructions go through the executor's wrapper too
_reg.wrap_api(globals(), exclude=_INSTRUCTIONS | {"register_alloc"})
register_alloc = _reg.stream_only(register_alloc)


_V4 = "a NeuronCore-v4 (trn3) instruction; nkisim models trn1 and trn2, where the compiler rejects it"
_WHY = {"activate2": _V4, "exponential": _V4, "rand2": _V4, "nc_matmul_mx": _V4, "quantize_mx": _V4,
        "topk": "the docs do not say how the K results are laid out over a 16-partition snake group"}


# removed from the API, with their replacements (NKI migration guide, "nki.isa.tensor_copy_dynamic_src /
# nki.isa.tensor_copy_dynamic_dst — removed": "removed in NKI 0.4.0 (they were deprecated in 0.3.0)")
_REMOVED = {name: "removed in NKI 0.4.0: use nisa.tensor_copy(dst, src) with a run-time offset view, "
                  "t.ap(pattern, scalar_offset=register_or_tensor, indirect_dim=d)"
            for name in ("tensor_copy_dynamic_src", "tensor_copy_dynamic_dst")}


def __getattr__(name: str):
    from nkisim.frontends import NKI, _unsupported

    return _unsupported.missing(NKI, "nisa", name, _REMOVED, why=_WHY)


del annotations  # the __future__ import must not leak as an NKI name
