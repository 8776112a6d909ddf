"""neuronxcc.nki.isa (``nisa``) as nkisim implements it: one function per hardware instruction.

Signatures are the union of SDK 2.21 and 2.26 (e.g. ``dma_copy(src, dst)`` positional and ``dma_copy(dst=, src=)``).
"""

from __future__ import annotations

from enum import IntEnum as _IntEnum

import numpy as _np

from nkisim.core import config as _config
from nkisim.core import context as _ctx
from nkisim.core.ops import dma as _dma
from nkisim.core.ops import elementwise as _ew
from nkisim.core.ops import gpsimd as _gps
from nkisim.core.ops import reduce as _red
from nkisim.core.ops import registers as _reg
from nkisim.core.ops import tensor_engine as _te
from nkisim.core.rules import fail as _fail
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.core.sealed import SealedEnum as _SealedEnum
from nkisim.frontends._operators import act as _act
from nkisim.frontends._operators import alu as _alu
from nkisim.frontends._operators import engine as _engine


class engine(_IntEnum, metaclass=_SealedEnum):  # noqa: N801 - NKI name
    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    vector = 5
    sync = 6


dma_engine = engine.sync  # DMA queues are triggered from the sync engine: nkisim's engine for DMA-side choices
unknown_engine = engine.unknown
tensor_engine = engine.tensor
scalar_engine = engine.scalar
gpsimd_engine = engine.gpsimd
vector_engine = engine.vector
sync_engine = engine.sync


class constants(metaclass=_Sealed):  # noqa: N801 - older alias nisa.constants.engine.*
    engine = engine


class dge_mode(_IntEnum, metaclass=_SealedEnum):  # noqa: N801
    unknown = 0
    none = 1
    swdge = 2
    hwdge = 3


_DGE_NAMES = {int(dge_mode.none): "none", int(dge_mode.swdge): "swdge", int(dge_mode.hwdge): "hwdge"}  # cost model
_DGE_LOWERED = (int(dge_mode.swdge), int(dge_mode.hwdge))  # explicit DGE lowerings (dma_transpose: 2-byte only)


class oob_mode(_IntEnum, metaclass=_SealedEnum):  # noqa: N801
    error = 0
    skip = 1


_OOB_SKIP = int(oob_mode.skip)  # dma_copy's oob_mode parameter shadows the enum


class reduce_cmd(_IntEnum, metaclass=_SealedEnum):  # noqa: N801
    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3


def dma_copy(*args, dst=None, src=None, mask=None, dst_rmw_op=None, oob_mode=oob_mode.error,
             dge_mode=dge_mode.unknown, **kwargs) -> None:
    """Copy src to dst on the DMA engines (HBM/SBUF only; casts via fp32 when dtypes differ)."""
    if args:  # SDK 2.21 positional form dma_copy(src, dst)
        if len(args) > 2:
            raise TypeError("dma_copy takes at most two positional arguments (src, dst)")
        src = args[0] if src is None else src
        if len(args) == 2:
            dst = args[1] if dst is None else dst
    if src is None or dst is None:
        raise TypeError("dma_copy() requires src= and dst=")
    rmw = _alu(dst_rmw_op, "dma_copy") if dst_rmw_op is not None else None
    skip = int(oob_mode) == _OOB_SKIP
    if skip and rmw is not None:  # 2.26 docs: "If dst_rmw_op is specified, only oob_mode=oob_mode.error is allowed."
        _fail("nkisim_bad_argument", op="dma_copy", detail="dst_rmw_op cannot be combined with oob_mode=skip (only "
              "oob_mode.error is allowed with a read-modify-write)")
    _dma.dma_copy(src, dst, mask=mask, dst_rmw_op=rmw, oob_skip=skip, dge=_DGE_NAMES.get(int(dge_mode)))


def dma_transpose(src, *, axes=None, mask=None, dtype=None, dge_mode=dge_mode.unknown, **kwargs):
    """Transpose on the DMA engines into a new SBUF tile.

    The 2-byte dtype rule belongs to the explicit DGE lowerings ("If hwdge ... dtype is 2 bytes", swdge likewise:
    nki.isa.dma_transpose docs); with the default ``dge_mode.unknown`` the legacy API takes any dtype (AWS's
    ``load_transpose2d`` doc test transposes float32 through ``nisa.dma_transpose`` in its simulator)."""
    return _dma.dma_transpose(src, axes, dtype=dtype, mask=mask, two_byte_only=int(dge_mode) in _DGE_LOWERED)


def nc_matmul(stationary, moving, *, is_stationary_onezero=False, is_moving_onezero=False, is_transpose=False,
              tile_position=(), tile_size=(), mask=None, perf_mode=None, **kwargs):
    """stationary.T @ moving on TensorE into a fresh fp32 PSUM tile ([K,M] x [K,N] -> [M,N]).

    ``perf_mode='double_row_gen3'`` (the 2.2x spelling; 'double_row' later) is the FP8 double-row mode."""
    if tile_position or tile_size:
        _te.check_pe_tiling(stationary, tile_position, tile_size)
    mode = str(getattr(perf_mode, "name", perf_mode) or "none")
    if mode not in ("none", "double_row", "double_row_gen3"):
        raise ValueError(f"nc_matmul: unknown perf_mode {perf_mode!r} (expected None or 'double_row_gen3')")
    return _te.nc_matmul(stationary, moving, is_transpose=is_transpose, mask=mask,
                          double_row=mode != "none", is_stationary_onezero=is_stationary_onezero,
                          is_moving_onezero=is_moving_onezero)


def nc_transpose(data, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    return _te.nc_transpose(data, engine=_engine(engine), dtype=dtype, mask=mask)


def tensor_tensor(data1, data2, op, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    return _ew.tensor_tensor(data1, data2, _alu(op, "tensor_tensor"), dtype=dtype, engine=_engine(engine),
                              mask=mask)


def tensor_scalar(data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False, *, dtype=None,
                  mask=None, engine=engine.unknown, **kwargs):
    return _ew.tensor_scalar(data, _alu(op0, "tensor_scalar", unary=True), operand0, reverse0,
                              _alu(op1, "tensor_scalar", unary=True) if op1 is not None else None, operand1, reverse1,
                              dtype=dtype, engine=_engine(engine), mask=mask)


def tensor_copy(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    return _ew.tensor_copy(src, dtype=dtype, engine=_engine(engine), mask=mask)


def tensor_reduce(op, data, axis, *, mask=None, dtype=None, negate=False, keepdims=False, **kwargs):
    return _red.tensor_reduce(_alu(op, "tensor_reduce"), data, axis, negate=negate, keepdims=keepdims, dtype=dtype,
                              mask=mask)


def activation(op, data, *, bias=None, scale=1.0, reduce_op=None, reduce_res=None, reduce_cmd=reduce_cmd.idle,
               mask=None, dtype=None, **kwargs):
    return _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dtype, mask=mask,
                           reduce_op=_alu(reduce_op) if reduce_op is not None else None, reduce_res=reduce_res,
                           reduce_cmd=int(reduce_cmd))


def memset(shape, value, dtype, *, mask=None, engine=engine.unknown, **kwargs):
    return _ew.memset(shape, value, dtype, engine=_engine(engine), mask=mask)


def iota(expr, dtype, *, mask=None, **kwargs):
    return _gps.iota(expr, dtype, mask=mask)


def activation_reduce(op, data, *, reduce_op, reduce_res, bias=None, scale=1.0, mask=None, dtype=None, **kwargs):
    """nisa.activation plus a reduction of each partition's results into reduce_res (ScalarE, one instruction):
    "equivalent to calling nisa.activation with reduce_cmd=nisa.reduce_cmd.reset_reduce" (2.26 docs)."""
    return _ew.activation(_act(op), data, bias=bias, scale=scale, dtype=dtype, mask=mask,
                           reduce_op=_alu(reduce_op, "activation_reduce"), reduce_res=reduce_res,
                           reduce_cmd=reduce_cmd.reset_reduce)


def affine_select(pred, on_true_tile, on_false_value, *, mask=None, dtype=None, **kwargs):
    return _gps.affine_select(pred, on_true_tile, on_false_value, dtype=dtype, mask=mask)


def range_select(*, on_true_tile, comp_op0, comp_op1, bound0, bound1, reduce_cmd=reduce_cmd.idle, reduce_res=None,
                 reduce_op=_np.amax, range_start=0, on_false_value=-3.4028235e38, mask=None, dtype=None, **kwargs):
    return _red.range_select(on_true_tile, _alu(comp_op0, "range_select"), _alu(comp_op1, "range_select"), bound0,
                            bound1, reduce_res=reduce_res, reduce_op=_alu(reduce_op, "range_select"),
                            reduce_cmd=int(reduce_cmd), range_start=range_start, on_false_value=on_false_value,
                            dtype=dtype, mask=mask)


def scalar_tensor_tensor(*, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, dtype=None,
                         mask=None, engine=engine.unknown, **kwargs):
    return _ew.scalar_tensor_tensor(data, _alu(op0, "scalar_tensor_tensor"), operand0,
                                    _alu(op1, "scalar_tensor_tensor"), operand1, reverse0=reverse0,
                                    reverse1=reverse1, dtype=dtype, engine=_engine(engine), mask=mask)


def tensor_scalar_reduce(*, data, op0, operand0, reduce_op, reduce_res, reverse0=False, dtype=None, mask=None,
                         **kwargs):
    return _red.tensor_scalar_reduce(data, _alu(op0, "tensor_scalar_reduce", unary=True), operand0,
                                    _alu(reduce_op, "tensor_scalar_reduce"), reduce_res, reverse0=reverse0,
                                    dtype=dtype, mask=mask)


def tensor_partition_reduce(op, data, *, mask=None, dtype=None, **kwargs):
    return _red.tensor_partition_reduce(_alu(op, "tensor_partition_reduce"), data, dtype=dtype, mask=mask)


def tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=False, reverse1=False, *, dtype=None, mask=None,
                       **kwargs):
    return _red.tensor_tensor_scan(data0, data1, initial, _alu(op0, "tensor_tensor_scan"),
                                  _alu(op1, "tensor_tensor_scan"), reverse0=reverse0, reverse1=reverse1,
                                  dtype=dtype, mask=mask)


def select_reduce(*, dst, predicate, on_true, on_false, reduce_res=None, reduce_cmd=reduce_cmd.idle,
                  reduce_op=_np.amax, reverse_pred=False, mask=None, dtype=None, **kwargs):
    """dst = predicate ? on_true : on_false with an optional max reduction into VectorE's registers (2.26)."""
    return _red.select_reduce(dst, predicate, on_true, on_false, reduce_res=reduce_res, reduce_cmd=int(reduce_cmd),
                             reduce_op=_alu(reduce_op, "select_reduce"), reverse_pred=reverse_pred, dtype=dtype,
                             mask=mask)


def sequence_bounds(*, segment_ids, dtype=None, **kwargs):
    """[start, end) of each element's run of equal segment ids (GpSimdE, 2.26); id 0 is padding."""
    return _gps.sequence_bounds(segment_ids, dtype=dtype)


def tensor_copy_predicated(*, src, dst, predicate, mask=None, dtype=None, reverse_pred=False, **kwargs):
    return _ew.tensor_copy_predicated(src, dst, predicate, reverse_pred=reverse_pred, dtype=dtype, mask=mask)


def reciprocal(data, *, dtype=None, mask=None, engine=engine.unknown, **kwargs):
    return _ew.reciprocal(data, dtype=dtype, mask=mask, engine=_engine(engine))


def dropout(data, prob, *, mask=None, dtype=None, **kwargs):
    return _gps.dropout(data, prob, dtype=dtype, mask=mask)


def bn_stats(data, *, mask=None, dtype=None, **kwargs):
    return _red.bn_stats(data, dtype=dtype, mask=mask)


def bn_aggr(data, *, mask=None, dtype=None, **kwargs):
    return _red.bn_aggr(data, dtype=dtype, mask=mask)


def max8(*, src, mask=None, dtype=None, **kwargs):
    return _red.max8(src, dtype=dtype, mask=mask)


def nc_find_index8(*, data, vals, mask=None, dtype=_np.uint32, **kwargs):
    return _red.nc_find_index8(data, vals, dtype=dtype, mask=mask)


def nc_match_replace8(*, data, vals, imm, dst_idx=None, mask=None, dtype=None, **kwargs):
    return _red.nc_match_replace8(data, vals, imm, dst_idx=dst_idx, dtype=dtype, mask=mask)


def nc_stream_shuffle(*, src, dst, shuffle_mask, dtype=None, mask=None, **kwargs):
    return _gps.nc_stream_shuffle(src, dst, shuffle_mask, dtype=dtype, mask=mask)


def tensor_copy_dynamic_src(src, *, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """Copy of an on-chip tile read at a run-time offset (``src`` indexed with an SBUF index tile value)."""
    return _ew.tensor_copy_dynamic(src, which="src", dtype=dtype, engine=_engine(engine), mask=mask)


def tensor_copy_dynamic_dst(*args, dst=None, src=None, mask=None, dtype=None, engine=engine.unknown, **kwargs):
    """Copy of ``src`` into an on-chip tile at a run-time offset (``dst`` indexed with an SBUF index tile value)."""
    if args:
        dst, src = (args + (src,))[:2] if len(args) == 1 else args[:2]
    return _ew.tensor_copy_dynamic(src, dst, which="dst", dtype=dtype, engine=_engine(engine), mask=mask)


def local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None, *, mask=None, **kwargs):
    """Gather within each GpSimd core's 16 partitions (nkisim.core._gps.local_gather)."""
    return _gps.local_gather(src_buffer, index, num_elem_per_idx, num_valid_indices, mask=mask)


class nc_version(_IntEnum, metaclass=_SealedEnum):  # noqa: N801 - NKI name
    """NeuronCore generation: gen2 = NeuronCore-v2 (trn1/inf2), gen3 = NeuronCore-v3 (trn2)."""

    gen2 = 2
    gen3 = 3


def get_nc_version() -> nc_version:
    """Generation of the target NeuronCore (NEURON_PLATFORM_TARGET_OVERRIDE, default trn2)."""
    ctx = _ctx.active()
    target = ctx.target if ctx is not None else _config.current_target()
    return nc_version.gen2 if target == "trn1" else nc_version.gen3


# every instruction is written down when the kernel's program is recorded (nkisim.stream: the grader replays it)
_reg.wrap_recorded(globals(), exclude={"get_nc_version"})


def __getattr__(name: str):
    from nkisim.frontends import LEGACY, _unsupported

    return _unsupported.missing(LEGACY, "nisa", name)


del annotations  # the __future__ import must not leak as an NKI name
