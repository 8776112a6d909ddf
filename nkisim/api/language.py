"""neuronxcc.nki.language (``nl``) as nkisim implements it (legacy API, Neuron SDK 2.20-2.26).

Only NKI names are public: helpers are underscored so that a misspelled or non-existent name raises
AttributeError exactly as on the real module.
"""

from __future__ import annotations

import numpy as _np

from nkisim.core import config as _config
from nkisim.core import dtypes as _dt
from nkisim.core import ops as _ops
from nkisim.core import runtime as _rt
from nkisim.core.indexing import arange, mgrid  # noqa: F401  (public NKI names)
from nkisim.core.instr import Buf as _Buf
from nkisim.core.instr import Engine as _Engine
from nkisim.core.rules import fail as _fail
from nkisim.core.tensor import ParDim as _ParDim
from nkisim.core.tensor import Tensor as _Tensor

# ---- data types ([SHARED] "Supported Data Types") -----------------------------------------------------------
float32 = _dt.float32
float16 = _dt.float16
bfloat16 = _dt.bfloat16
tfloat32 = _dt.tfloat32
float8_e4m3 = _dt.float8_e4m3
float8_e5m2 = _dt.float8_e5m2
int8, int16, int32 = _dt.int8, _dt.int16, _dt.int32
uint8, uint16, uint32 = _dt.uint8, _dt.uint16, _dt.uint32
bool_ = _dt.bool_

# ---- memory spaces --------------------------------------------------------------------------------------------
sbuf = _rt.SBUF_SPEC
psum = _rt.PSUM_SPEC
hbm = _rt.HBM_SPEC
private_hbm = _rt.BufferSpec(_Buf.HBM, "private_hbm")
shared_hbm = _rt.BufferSpec(_Buf.HBM, "shared_hbm")


def par_dim(size) -> _ParDim:
    """Mark the partition dimension inside a shape tuple: (NB, par_dim(128), F)."""
    return _ParDim(size)


class _TileSize:
    """nl.tile_size: hardware tile limits of the current target (values: nki.language.tile_size docs)."""

    pmax = 128
    psum_fmax = 512
    psum_bank_fmax = 512
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_num_banks = 8
    psum_min_align = 4
    sbuf_min_align = 1

    @property
    def total_available_sbuf_size(self) -> int:
        return _config.limits().sbuf_usable_bytes

    @property
    def sbuf_fmax_bytes(self) -> int:
        return _config.limits().sbuf_usable_bytes


tile_size = _TileSize()


# ---- tensor creation ------------------------------------------------------------------------------------------
def ndarray(shape, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    """New tensor with undefined contents (nkisim poisons it: NaN / 4)."""
    return _rt.allocate(shape, dtype, buffer, name=name)


def zeros(shape, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _filled(shape, dtype, buffer, name, 0)


def ones(shape, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _filled(shape, dtype, buffer, name, 1)


def full(shape, fill_value, dtype=float32, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _filled(shape, dtype, buffer, name, fill_value)


def zeros_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _filled(a.shape, dtype or a.dtype, buffer, name, 0)


def ones_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _filled(a.shape, dtype or a.dtype, buffer, name, 1)


def empty_like(a, dtype=None, *, buffer=None, name: str = "", **kwargs) -> _Tensor:
    return _rt.allocate(a.shape, dtype or a.dtype, buffer, name=name)


def _filled(shape, dtype, buffer, name, value) -> _Tensor:
    """On-chip init values cost a memset instruction, as the compiler emits one."""
    ctx = _rt.current("nl.zeros")
    ctx.settle()
    if buffer is not None and getattr(buffer, "kind", None) == _Buf.HBM:
        # rejected by the 2025 toolchain; the 2024 one filled it (rules.py, era note)
        return _ops.hbm_init(ctx, _rt.allocate(shape, dtype, buffer, name=name, ctx=ctx, fill=value), value)
    if buffer is not None and getattr(buffer, "direct", None) is not None:
        _fail("nkisim_direct_alloc", detail="tensors with an init value cannot be created with direct allocation "
              "(err_tensor_creation_on_scratchpad_with_init_value_not_supported)")
    t = _rt.allocate(shape, dtype, buffer, name=name, ctx=ctx)
    if value == 0 and getattr(buffer, "kind", None) == _Buf.PSUM:
        # A zeroed PSUM accumulator costs nothing: the first matmul of the accumulation group overwrites
        # (trainium arch guide, "Near-memory accumulation"), so the compiler emits no memset for it.
        if ctx.full:
            from nkisim.core.tensor import write

            write(t, _np.zeros((), dtype=t.dtype))
        return t
    _ops.memset_into(ctx, t, value, _Engine.VECTOR)
    return t


# ---- loops ----------------------------------------------------------------------------------------------------
def affine_range(*args, **kwargs) -> range:
    """Loop without carried dependencies; nkisim runs iterations in order with plain int indices."""
    return range(*(int(a) for a in args))


def sequential_range(*args, **kwargs) -> range:
    return range(*(int(a) for a in args))


def static_range(*args, **kwargs) -> range:
    return range(*(int(a) for a in args))


# ---- data movement --------------------------------------------------------------------------------------------
def load(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _ops.load(src, mask=mask, dtype=dtype)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _ops.load(src, mask=mask, dtype=dtype, transpose=True)


def store(dst, value=None, *, mask=None, **kwargs) -> None:
    if value is None:
        value = kwargs.pop("data", None)
    _ops.store(dst, value, mask=mask)


def copy(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _ops.tensor_copy(src, dtype=dtype, mask=mask, op_name="copy")


def broadcast_to(src, *, shape, **kwargs) -> _Tensor:
    return _ops.broadcast_to(src, shape)


# ---- element-wise -----------------------------------------------------------------------------------------------
def _binary(alu: str):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _ops.binary(alu, x, y, dtype=dtype, mask=mask)

    fn.__name__ = alu
    fn.__qualname__ = alu
    fn.nki_alu = alu
    return fn


add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide")
power = _binary("power")
maximum = _binary("maximum")
minimum = _binary("minimum")
fmod = _binary("fmod")
mod = _binary("mod")
bitwise_and = _binary("bitwise_and")
bitwise_or = _binary("bitwise_or")
bitwise_xor = _binary("bitwise_xor")
left_shift = _binary("left_shift")
right_shift = _binary("right_shift")
equal = _binary("equal")
not_equal = _binary("not_equal")
greater = _binary("greater")
greater_equal = _binary("greater_equal")
less = _binary("less")
less_equal = _binary("less_equal")
logical_and = _binary("logical_and")
logical_or = _binary("logical_or")
logical_xor = _binary("logical_xor")


def _unary(func: str):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _ops.activation(func, x, dtype=dtype, mask=mask, op_name=func)

    fn.__name__ = func
    fn.__qualname__ = func
    fn.nki_act = func
    return fn


exp = _unary("exp")
log = _unary("log")
sqrt = _unary("sqrt")
rsqrt = _unary("rsqrt")
sin = _unary("sin")
cos = _unary("cos")
tan = _unary("tan")
tanh = _unary("tanh")
arctan = _unary("arctan")
sigmoid = _unary("sigmoid")
relu = _unary("relu")
gelu = _unary("gelu")
gelu_apprx_tanh = _unary("gelu_apprx_tanh")
gelu_apprx_sigmoid = _unary("gelu_apprx_sigmoid")
silu = _unary("silu")
erf = _unary("erf")
erf_dx = _unary("erf_dx")
gelu_dx = _unary("gelu_dx")
silu_dx = _unary("silu_dx")
softplus = _unary("softplus")
mish = _unary("mish")
square = _unary("square")
abs = _unary("abs")  # noqa: A001 - NKI name
sign = _unary("sign")
negative = _unary("negative")
trunc = _unary("trunc")
floor = _unary("floor")
ceil = _unary("ceil")
reciprocal = _unary("reciprocal")
identity = _unary("identity")


def _reduction(alu: str, name: str):
    def fn(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        return _ops.tensor_reduce(alu, x, axis, dtype=dtype, mask=mask, keepdims=keepdims, op_name=name)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.nki_alu = alu
    return fn


max = _reduction("maximum", "max")  # noqa: A001
min = _reduction("minimum", "min")  # noqa: A001
sum = _reduction("add", "sum")  # noqa: A001
prod = _reduction("multiply", "prod")
all = _reduction("logical_and", "all")  # noqa: A001


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    s = _ops.tensor_reduce("add", x, axis, dtype=float32, mask=mask, keepdims=keepdims, op_name="mean")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    return _ops.tensor_scalar(s, "multiply", 1.0 / count, dtype=dtype if dtype is not None else x.dtype,
                              op_name="mean")


# ---- TensorE --------------------------------------------------------------------------------------------------
def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> _Tensor:
    """x @ y (or x.T @ y with transpose_x=True) on TensorE; result in PSUM, fp32."""
    if not transpose_x:
        ctx = _rt.current("matmul")
        ctx.settle()
        if x.ndim != 2:
            _fail("err_exceed_max_supported_dimension", param=f"x{list(x.shape)}", op="matmul", limit=2)
        xt = _ops.nc_transpose(x, engine=_Engine.TENSOR, op_name="matmul")
        x = _ops.tensor_copy(xt, op_name="matmul")
    return _ops.nc_matmul(x, y, mask=mask, op_name="matmul")


def transpose(x, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    if x.ndim > 2:
        _fail("err_exceed_max_supported_dimension", param=f"x{list(x.shape)}", op="transpose", limit=2)
    for i, d in enumerate(x.shape):
        if d > 128:
            _fail("err_size_of_dimension_exceed_arch_limit", dim=i, param=f"x{list(x.shape)}", op="transpose",
                  limit=128)
    return _ops.nc_transpose(x, engine=_Engine.TENSOR, dtype=dtype, mask=mask, op_name="transpose")


def where(condition, x, y, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Element-wise select on VectorE: x where condition is true, else y."""
    return _ops.select(condition, x, y, dtype=dtype, mask=mask)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> _Tensor:
    """exp(x - max) / sum(exp(x - max)) along free axis ``axis`` (composed from reduce/scalar/activation)."""
    m = _ops.tensor_reduce("maximum", x, axis, keepdims=True, dtype=float32, op_name="softmax")
    shifted = _ops.tensor_tensor(x, m, "subtract", dtype=float32, nl_style=True, op_name="softmax")
    e = _ops.activation("exp", shifted, dtype=float32, op_name="softmax")
    s = _ops.tensor_reduce("add", e, axis, keepdims=True, dtype=float32, op_name="softmax")
    r = _ops.activation("reciprocal", s, dtype=float32, op_name="softmax")
    return _ops.tensor_tensor(e, r, "multiply", dtype=dtype if dtype is not None else x.dtype, nl_style=True,
                              op_name="softmax")


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> _Tensor:
    """x * w / sqrt(mean(x^2) + epsilon) along free axis ``axis``."""
    sq = _ops.activation("square", x, dtype=float32, op_name="rms_norm")
    ss = _ops.tensor_reduce("add", sq, axis, keepdims=True, dtype=float32, op_name="rms_norm")
    ms = _ops.tensor_scalar(ss, "multiply", 1.0 / n, op1="add", operand1=float(epsilon), op_name="rms_norm")
    inv = _ops.activation("rsqrt", ms, dtype=float32, op_name="rms_norm")
    xn = _ops.tensor_tensor(x, inv, "multiply", dtype=float32, nl_style=True, op_name="rms_norm")
    return _ops.tensor_tensor(xn, w, "multiply", dtype=dtype if dtype is not None else x.dtype, nl_style=True,
                              op_name="rms_norm")


def dropout(x, rate, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Zero elements with probability ``rate`` and scale the rest by 1/(1-rate) (deterministic seed)."""
    return _ops.dropout(x, float(rate), dtype=dtype, mask=mask)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` into the destination across loop iterations: ``b = nl.loop_reduce(a, op, [k])`` is
    ``b = nisa.tensor_tensor(data1=b, data2=a, op=op)`` written in place into ``b`` (nki.language.loop_reduce
    docs: "The destination tile is also the rhs input to op"); ``loop_indices`` only informs the compiler."""
    import sys as _sys

    from nkisim.api.isa import _alu
    from nkisim.core.stmt import assignment_target

    found = assignment_target(_sys._getframe(1), "loop_reduce")
    if found is None or not isinstance(found[1], _Tensor):
        what = f"'{found[0]}' holds no tile yet" if found else "its result is not assigned to a tile"
        _fail("nkisim_bad_argument", op="loop_reduce", detail=f"the destination is the assignment target and "
              f"also an input, but {what}: create it before the loop (b = nl.zeros(..., buffer=nl.sbuf))")
    dst = found[1]
    return _ops.tensor_tensor(dst, x, _alu(op, "loop_reduce"), dtype=dtype, mask=mask, dst=dst, nl_style=True,
                              op_name="loop_reduce")


def expand_dims(data, axis):
    return data.expand_dims(axis)


def device_print(prefix, x=None, *, mask=None, **kwargs) -> None:
    """Print a tile's values (only effective in simulation, as on the real toolchain)."""
    ctx = _rt.current("device_print")
    ctx.settle()
    if x is None and kwargs:
        x = next(iter(kwargs.values()))
    if not ctx.full or not isinstance(x, _Tensor):
        return
    from nkisim.core.tensor import read

    print(prefix, _np.array(read(x)))


def program_id(axis: int = 0) -> int:
    return 0


def num_programs(axes=None) -> int:
    return 1


def __getattr__(name: str):
    raise AttributeError(f"module 'neuronxcc.nki.language' has no attribute '{name}'")


del annotations  # the __future__ import must not leak as an NKI name
