"""``nki.isa`` (``nisa``) of the current API (NKI 0.6, Neuron SDK 2.32) as nkisim implements it.

Every instruction takes its destination first and writes it in place (``nisa.tensor_tensor(dst, data1, data2,
op)``); the result dtype is the destination's ("The float32 computation results are cast to ``dst.dtype``",
nki.isa.tensor_scalar docs).  Each function is a thin adapter: it resolves the operator and enum arguments and calls
the same core instruction builder as the legacy ``neuronxcc.nki.isa`` (``nkisim.core.ops``), with ``dst=``.
Parameters the API removed (``mask=``, ``dtype=``) are errors naming what replaced them, and enum parameters take
the named members only ("Raw integer values (e.g., dge_mode=2) are no longer accepted", NKI 0.3 migration guide).
"""

from __future__ import annotations

from enum import Enum as _Enum

from nkisim.core import config as _config
from nkisim.core import context as _ctx
from nkisim.core.instr import Engine as _Engine
from nkisim.core.ops import assign as _assign
from nkisim.core.ops import dma as _dma
from nkisim.core.ops import elementwise as _ew
from nkisim.core.ops import gpsimd as _gps
from nkisim.core.ops import reduce as _red
from nkisim.core.ops import tensor_engine as _te
from nkisim.core.rules import fail as _fail
from nkisim.frontends._operators import act as _act
from nkisim.frontends._operators import alu as _alu
from nkisim.frontends.nki.language import NKIObject, NkiTensor, equal, maximum  # noqa: F401  (as the stub does)


# ---- enums ----------------------------------------------------------------------------------------------------
class engine(_Enum):  # noqa: N801 - NKI name
    tensor = 1
    vector = 5
    scalar = 2
    gpsimd = 3
    dma = 4
    sync = 6
    unknown = 0


tensor_engine = engine.tensor  # deprecated spellings
vector_engine = engine.vector
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
unknown_engine = engine.unknown


class reduce_cmd(_Enum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(_Enum):  # noqa: N801
    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(_Enum):  # noqa: N801
    error = 0
    skip = 1


class matmul_perf_mode(_Enum):  # noqa: N801
    none = "none"
    double_row = "double_row"


class nc_version(_Enum):  # noqa: N801
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(_Enum):  # noqa: N801
    dma = 1
    gpsimd_dma = 2


class NkiValidationError(Exception):
    """Raised when hardware constraints are violated."""


# the core engine of each member, as a plain attribute: the per-instruction path reads it without hashing the Enum
for _m, _e in ((engine.unknown, _Engine.UNKNOWN), (engine.tensor, _Engine.TENSOR), (engine.vector, _Engine.VECTOR),
               (engine.scalar, _Engine.SCALAR), (engine.gpsimd, _Engine.GPSIMD), (engine.dma, _Engine.DMA),
               (engine.sync, _Engine.SYNC)):
    _m.core = _e
del _m, _e
# module aliases: the parameters of the same names shadow the enum classes inside the instruction functions
_DgeMode, _OobMode = dge_mode, oob_mode
_HWDGE, _OOB_SKIP, _OOB_ERROR, _DGE_UNKNOWN = dge_mode.hwdge, oob_mode.skip, oob_mode.error, dge_mode.unknown


def _member(value, enum, param: str, op: str):
    if not isinstance(value, enum):
        raise TypeError(f"nisa.{op}: {param}={value!r} must be a member of nki.isa.{enum.__name__} (e.g. "
                        f"nisa.{enum.__name__}.{next(iter(enum)).name}): NKI 0.3+ no longer accepts raw integers")
    return value


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
    if dge_mode is _DGE_UNKNOWN and oob_mode is _OOB_ERROR:  # the defaults: the per-instruction fast path
        _dma.dma_copy(src, dst, oob_skip=False)
        return
    _member(dge_mode, _DgeMode, "dge_mode", "dma_copy")
    skip = _member(oob_mode, _OobMode, "oob_mode", "dma_copy") is _OOB_SKIP
    if dge_mode is _HWDGE and getattr(src, "dtype", None) != getattr(dst, "dtype", None):
        # "NKI 0.3.0 enforces that source and destination element types must match when using
        # dge_mode=dge_mode.hwdge" (migration guide): the hardware DGE moves raw bytes
        _fail("nkisim_bad_argument", op="dma_copy", detail=f"dge_mode=hwdge moves raw bytes: src ({src.dtype}) and "
              f"dst ({dst.dtype}) must have the same dtype (reinterpret with .view(dtype))")
    _dma.dma_copy(src, dst, oob_skip=skip)


def dma_transpose(dst, src, axes=None, priority=None, dge_mode=dge_mode.unknown, oob_mode=oob_mode.error,
                  name=None, **removed) -> None:
    """Transpose ``src`` into ``dst`` on the DMA engines (2-D (1,0), 3-D (2,1,0), 4-D (3,1,2,0))."""
    if removed:
        _removed("dma_transpose", removed)
    mode = _member(dge_mode, _DgeMode, "dge_mode", "dma_transpose")
    _dma.dma_transpose(src, axes, dst=dst, two_byte_only=mode is _HWDGE)


# ---- TensorE --------------------------------------------------------------------------------------------------
def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              accumulate=None, tile_position=(), tile_size=(), perf_mode=matmul_perf_mode.none, name=None,
              **removed) -> None:
    """``dst = stationary.T @ moving`` into PSUM; ``accumulate`` None: the first write to a PSUM location
    overwrites, later ones accumulate; True: accumulate; False: overwrite (nki.isa.nc_matmul, "Accumulation
    mode")."""
    if removed:
        _removed("nc_matmul", removed)
    if tile_position or tile_size:
        _te.check_pe_tiling(stationary, tile_position, tile_size)
    mode = perf_mode if isinstance(perf_mode, matmul_perf_mode) else matmul_perf_mode(perf_mode)
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
    _ew.tensor_copy(src, dtype=dst.dtype, engine=_engine(engine, "tensor_copy"), dst=dst)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None, **removed) -> None:
    if removed:
        _removed("tensor_tensor", removed)
    _ew.tensor_tensor(data1, data2, _alu(op, "tensor_tensor"), dtype=dst.dtype, engine=_engine(engine, "tensor_tensor"),
                      dst=dst)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None, **removed) -> None:
    if removed:
        _removed("tensor_scalar", removed)
    _ew.tensor_scalar(data, _alu(op0, "tensor_scalar"), operand0, reverse0,
                      _alu(op1, "tensor_scalar") if op1 is not None else None, operand1, reverse1,
                      dtype=dst.dtype, engine=_engine(engine, "tensor_scalar"), dst=dst)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None,
                         **removed) -> None:
    if removed:
        _removed("scalar_tensor_tensor", removed)
    _assign.into(dst, _ew.scalar_tensor_tensor(data, _alu(op0, "scalar_tensor_tensor"), operand0,
                                               _alu(op1, "scalar_tensor_tensor"), operand1, reverse0=reverse0,
                                               reverse1=reverse1, dtype=dst.dtype))


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               name=None, **removed) -> None:
    """``dst = op(data * scale + bias)`` on ScalarE, optionally reducing each partition into the registers."""
    if removed:
        _removed("activation", removed)
    _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dst.dtype,
                   reduce_op=_alu(reduce_op, "activation") if reduce_op is not None else None, reduce_res=reduce_res,
                   reduce_cmd=_reduce_cmd(reduce_cmd, "activation"), dst=dst)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None, **removed) -> None:
    if removed:
        _removed("activation_reduce", removed)
    _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dst.dtype, reduce_op=_alu(reduce_op, "activation"),
                   reduce_res=reduce_res, reduce_cmd=reduce_cmd.reset_reduce.value, dst=dst)


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
    _ew.tensor_copy_predicated(src, dst, predicate, reverse_pred=reverse_pred)


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
    _assign.into(dst, _gps.dropout(data, prob, dtype=dst.dtype))


def nc_stream_shuffle(dst, src, shuffle_mask, name=None, **removed) -> None:
    if removed:
        _removed("nc_stream_shuffle", removed)
    _gps.nc_stream_shuffle(src, dst, shuffle_mask)


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
    _assign.into(dst, _red.tensor_partition_reduce(_alu(op, "tensor_partition_reduce"), data, dtype=dst.dtype))


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res=None, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, reduce_res_negate=False, name=None,
                         **removed) -> None:
    if removed:
        _removed("tensor_scalar_reduce", removed)
    if reduce_res is None or _reduce_cmd(reduce_cmd, "tensor_scalar_reduce") != 3 or reduce_init is not None \
            or reduce_res_negate:
        from nkisim.frontends._unsupported import NkisimUnsupportedError

        raise NkisimUnsupportedError("nkisim does not support nisa.tensor_scalar_reduce with reduce_cmd other than "
                                     "reset_reduce, reduce_init, reduce_res_negate or without reduce_res yet")
    _assign.into(dst, _red.tensor_scalar_reduce(data, _alu(op0, "tensor_scalar_reduce"), operand0,
                                                _alu(reduce_op, "tensor_scalar_reduce"), reduce_res,
                                                reverse0=reverse0, dtype=dst.dtype))


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None,
                       **removed) -> None:
    if removed:
        _removed("tensor_tensor_scan", removed)
    _assign.into(dst, _red.tensor_tensor_scan(data0, data1, initial, _alu(op0, "tensor_tensor_scan"),
                                              _alu(op1, "tensor_tensor_scan"), reverse0=reverse0, reverse1=reverse1,
                                              dtype=dst.dtype))


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
                                        on_false_value=on_false_value, dtype=dst.dtype))


def select_reduce(dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_op=maximum,
                  reverse_pred=False, name=None, **removed) -> None:
    if removed:
        _removed("select_reduce", removed)
    _red.select_reduce(dst, predicate, on_true, on_false, reduce_res=reduce_res,
                       reduce_cmd=_reduce_cmd(reduce_cmd, "select_reduce"), reduce_op=_alu(reduce_op, "select_reduce"),
                       reverse_pred=reverse_pred)


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


# ---- the target -----------------------------------------------------------------------------------------------------
def get_nc_version() -> nc_version:
    """Generation of the target NeuronCore: gen2 (trn1), gen3 (trn2)."""
    ctx = _ctx.active()
    target = ctx.target if ctx is not None else _config.current_target()
    return nc_version.gen2 if target == "trn1" else nc_version.gen3


def get_nc_sub_version() -> int:
    """Silicon revision within the generation (nkisim models the first: 0)."""
    return 0


def __getattr__(name: str):
    from nkisim.frontends import NKI, _unsupported

    return _unsupported.missing(NKI, "nisa", name)


del annotations  # the __future__ import must not leak as an NKI name
