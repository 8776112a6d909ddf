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
    # A zeroed PSUM accumulator costs nothing when a matmul consumes it: the first matmul of the accumulation
    # group overwrites (trainium arch guide, "Near-memory accumulation"); the scheduler elides the memset then,
    # and runs it when VectorE/ScalarE read the zeros as data (perf/scheduler.py, _materialize).
    _ops.memset_into(ctx, t, value, _Engine.VECTOR)
    return t


# ---- loops ----------------------------------------------------------------------------------------------------
def affine_range(*args, **kwargs) -> _rt.SymbolicRange:
    """Loop without carried dependencies; nkisim runs iterations in order with plain int indices (NKI traces the
    body once: see runtime.SymbolicRange)."""
    return _rt.SymbolicRange(range(*(int(a) for a in args)))


def sequential_range(*args, **kwargs) -> _rt.SymbolicRange:
    return _rt.SymbolicRange(range(*(int(a) for a in args)))


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


def all(x, axis, *, dtype=bool_, mask=None, keepdims=False, **kwargs):  # noqa: A001
    """Whether all elements along ``axis`` are true: "a boolean tile" (nki.language.all docs, ``dtype=bool``)."""
    return _ops.tensor_reduce("logical_and", x, axis, dtype=dtype, mask=mask, keepdims=keepdims, op_name="all")


all.nki_alu = "logical_and"


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """Arithmetic mean; "float32 intermediate and return values are used for integer inputs" (nki.language.mean
    docs), other inputs keep their dtype unless ``dtype`` is given."""
    s = _ops.tensor_reduce("add", x, axis, dtype=float32, mask=mask, keepdims=keepdims, op_name="mean")
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    if dtype is None:
        dtype = float32 if _np.dtype(x.dtype).kind in "iub" else x.dtype
    return _ops.tensor_scalar(s, "multiply", 1.0 / count, dtype=dtype, op_name="mean")


# ---- TensorE --------------------------------------------------------------------------------------------------
def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> _Tensor:
    """x @ y (or x.T @ y with transpose_x=True) on TensorE; result in PSUM, fp32."""
    if not transpose_x:
        ctx = _rt.current("matmul")
        ctx.settle()
        if x.ndim != 2:
            _fail("err_exceed_max_supported_dimension", param=f"x{list(x.shape)}", op="matmul", limit=2)
        # the compiler's transpose of x reads SBUF: a PSUM x is staged first, as for transpose_x=True
        x = _ops.stage_psum_operand(ctx, _ops.need_tensor(x, "matmul", "x"), "matmul", "x")
        hoisted = _rt.hoisted_transpose(ctx, x)
        if hoisted is not None:
            x = hoisted
        else:
            src = x
            xt = _ops.nc_transpose(x, engine=_Engine.TENSOR, op_name="matmul")
            x = _ops.tensor_copy(xt, op_name="matmul")
            _rt.remember_transpose(ctx, src, x)
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
    return _ops.tensor_tensor(e, r, "multiply", dtype=_composite_dtype(dtype, compute_dtype, x), nl_style=True,
                              op_name="softmax")


def _composite_dtype(dtype, compute_dtype, x):
    """Result dtype of nl.softmax / nl.rms_norm: nki.language.rms_norm docs (2.2x): "currently `dtype` and
    `compute_dtype` behave the same, both sets internal compute and return dtype"."""
    if dtype is not None:
        return dtype
    return compute_dtype if compute_dtype is not None else x.dtype


def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> _Tensor:
    """x * w / sqrt(mean(x^2) + epsilon) along free axis ``axis``."""
    sq = _ops.activation("square", x, dtype=float32, op_name="rms_norm")
    ss = _ops.tensor_reduce("add", sq, axis, keepdims=True, dtype=float32, op_name="rms_norm")
    ms = _ops.tensor_scalar(ss, "multiply", 1.0 / n, op1="add", operand1=float(epsilon), op_name="rms_norm")
    inv = _ops.activation("rsqrt", ms, dtype=float32, op_name="rms_norm")
    xn = _ops.tensor_tensor(x, inv, "multiply", dtype=float32, nl_style=True, op_name="rms_norm")
    return _ops.tensor_tensor(xn, w, "multiply", dtype=_composite_dtype(dtype, compute_dtype, x), nl_style=True,
                              op_name="rms_norm")


def dropout(x, rate, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Zero elements with probability ``rate`` (a scalar or a [P, 1] tile); the rest are NOT rescaled: the docs say
    "randomly zeroes some of the elements" and AWS's flash attention multiplies by 1/(1-p) itself afterwards
    (nki-samples reference/attention.py, "TODO: Remove this once the dropout supports scale prob")."""
    from nkisim.core import ops_isa

    return ops_isa.dropout(x, rate, dtype=dtype, mask=mask)


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


# ---- SPMD launch grid ([nl] program_id / num_programs / program_ndim / nc / spmd_dim) ----------------------------
def program_id(axis: int = 0) -> int:
    """Index of the running program along ``axis`` of the launch grid (0 without a grid)."""
    ctx = _rt.current("program_id")
    axis = _grid_axis(ctx, axis, "program_id")
    return ctx.program_ids[axis] if ctx.grid else 0


def num_programs(axes=None) -> int:
    """Number of programs along ``axes`` (an axis or a tuple of axes); all programs when axes is None."""
    ctx = _rt.current("num_programs")
    if axes is None:
        axes = tuple(range(len(ctx.grid)))
    elif not isinstance(axes, (tuple, list)):
        axes = (axes,)
    n = 1
    for a in axes:
        a = _grid_axis(ctx, a, "num_programs")
        n *= ctx.grid[a] if ctx.grid else 1
    return n


def program_ndim() -> int:
    """Number of axes of the launch grid (0 for a kernel launched without one)."""
    return len(_rt.current("program_ndim").grid)


def _grid_axis(ctx, axis, api: str) -> int:
    a = int(axis)
    nd = len(ctx.grid)
    if nd == 0:
        if a == 0:
            return 0
        raise IndexError(f"nl.{api}({axis}): the kernel was launched without an SPMD grid (launch it as "
                         "kernel[n0, n1, ...](...))")
    if not -nd <= a < nd:
        raise IndexError(f"nl.{api}({axis}): axis out of range for a launch grid with {nd} dimension(s)")
    return a % nd


class _SpmdDim:
    """A launch-grid dimension: ``nl.nc(n)`` (n physical NeuronCores) or ``nl.spmd_dim(*parts)``."""

    def __init__(self, parts: tuple, cores_at: int | None) -> None:
        self.parts = parts  # sizes, outermost first
        self.cores_at = cores_at  # which part is spread over NeuronCores (None: one core)
        size = 1
        for p in parts:
            size *= p
        self.size = size

    def __repr__(self) -> str:
        return f"spmd_dim{self.parts}" if self.cores_at is None or len(self.parts) > 1 else f"nc({self.size})"

    def __mul__(self, other) -> _SpmdDim:
        # nki.language.nc docs (2.2x): ``nl.nc(2) * 2`` is "syntactic sugar" for ``nl.spmd_dim(nl.nc(2), 2)``
        # and ``2 * nl.nc(2)`` for ``nl.spmd_dim(2, nl.nc(2))``: the left operand is the outer sub-dimension.
        if isinstance(other, bool) or not isinstance(other, (int, _np.integer, _SpmdDim)):
            return NotImplemented
        return spmd_dim(self, other)

    def __rmul__(self, other) -> _SpmdDim:
        if isinstance(other, bool) or not isinstance(other, (int, _np.integer)):
            return NotImplemented
        return spmd_dim(other, self)

    def core_of(self, i: int) -> int:
        """NeuronCore of index ``i`` along this dimension (the nc part's digit of i in the parts' mixed radix)."""
        if self.cores_at is None:
            return 0
        inner = 1
        for p in self.parts[self.cores_at + 1:]:
            inner *= p
        return (i // inner) % self.parts[self.cores_at]


def nc(n: int) -> _SpmdDim:
    """A launch-grid dimension whose programs are distributed over ``n`` physical NeuronCores.

    ``kernel[nl.nc(2), 2]``: NC 0 runs kernel[0, 0], kernel[0, 1]; NC 1 runs kernel[1, 0], kernel[1, 1]
    (nki.language.nc docs).
    """
    n = int(n)
    if n < 1:
        raise ValueError(f"nl.nc({n}): the number of NeuronCores must be at least 1")
    return _SpmdDim((n,), 0)


def spmd_dim(*parts) -> _SpmdDim:
    """A launch-grid dimension tiled into sub-dimensions, e.g. ``nl.spmd_dim(nl.nc(2), 2)``: 4 programs, NC 0 runs
    indices 0-1 and NC 1 indices 2-3 (nki.language.spmd_dim docs)."""
    sizes: list[int] = []
    cores_at = None
    for p in parts:
        if isinstance(p, _SpmdDim):
            if p.cores_at is not None:
                if cores_at is not None:
                    raise ValueError("nl.spmd_dim: at most one nl.nc(...) part per dimension")
                cores_at = len(sizes) + p.cores_at
            sizes.extend(p.parts)
        else:
            sizes.append(int(p))
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"nl.spmd_dim{tuple(parts)}: every part must be a positive size")
    return _SpmdDim(tuple(sizes), cores_at)


def _parse_grid(grid) -> tuple[tuple[int, ...], list[int] | None]:
    """Launch grid sizes and the NeuronCore of each program (row-major), None when all run on one core."""
    dims = grid if isinstance(grid, tuple) else (grid,)
    if not dims:
        raise ValueError("an SPMD launch grid needs at least one dimension")
    sizes = []
    for d in dims:
        if isinstance(d, _SpmdDim):
            sizes.append(d.size)
        elif isinstance(d, (int, _np.integer)) and not isinstance(d, bool) and int(d) >= 1:
            sizes.append(int(d))
        else:
            raise ValueError(f"SPMD launch grid {dims!r}: each dimension must be a positive int, nl.nc(n) or "
                             "nl.spmd_dim(...)")
    spread = [d for d in dims if isinstance(d, _SpmdDim) and d.cores_at is not None]
    if not spread:
        return tuple(sizes), None
    import itertools

    cores = []
    for ids in itertools.product(*(range(n) for n in sizes)):
        core, radix = 0, 1
        for d, i in zip(reversed(dims), reversed(ids)):
            if isinstance(d, _SpmdDim) and d.cores_at is not None:
                core += d.core_of(i) * radix
                radix *= d.parts[d.cores_at]
        cores.append(core)
    return tuple(sizes), cores


# ---- more legacy names (issue 13): slices, constants, host helpers, creation, bitwise/logical, statistics -------
def ds(start, size) -> slice:
    """Dynamic slice ``[start, start + size)`` of one axis: ``t[:, nl.ds(i * 512, 512)]``."""
    return slice(start, start + size)


class _FloatConsts:
    """nl.fp32 / nl.bfp16: the most negative finite value of the type (``.min``, stub docs: bit pattern 0xff7fffff
    for fp32, 0xff80 for bf16), used as "-inf" fill values."""

    def __init__(self, name: str, dtype) -> None:
        self._name = name
        self.min = float(_ml_finfo(dtype).min)

    def __repr__(self) -> str:
        return f"nl.{self._name}"


def _ml_finfo(dtype):
    import ml_dtypes

    try:
        return ml_dtypes.finfo(dtype)
    except (TypeError, ValueError):
        return _np.finfo(dtype)


fp32 = _FloatConsts("fp32", float32)
bfp16 = _FloatConsts("bfp16", bfloat16)


def finfo(dtype):
    """Machine limits of a float dtype, including bfloat16 and fp8 (``nl.finfo(nl.bfloat16).max``)."""
    return _ml_finfo(_np.dtype(dtype))


def static_cast(data, dtype):
    """Host-side helper: a NumPy array converted to an NKI dtype (e.g. bf16/fp8 test inputs), like ndarray.astype."""
    if isinstance(data, _Tensor):
        raise TypeError("nl.static_cast converts host NumPy arrays; inside a kernel use nl.copy(x, dtype=...)")
    dt = _np.dtype(dtype)
    _dt.to_dtype(dt)  # rejects dtypes NKI does not have
    return _np.asarray(data).astype(dt)


def shared_constant(constant, dtype=None, **kwargs) -> _Tensor:
    """An HBM tensor holding a compile-time constant array (read-only, visible to every SPMD program)."""
    ctx = _rt.current("shared_constant")
    ctx.settle()
    arr = _np.asarray(constant)
    if dtype is not None:
        arr = static_cast(arr, dtype)
    return _rt.host_tensor(ctx, arr, "shared_constant")


def shared_identity_matrix(n, dtype=uint8, **kwargs) -> _Tensor:
    """``shared_constant(np.identity(n), dtype)``: an n x n identity matrix in HBM."""
    return shared_constant(_np.identity(int(n)), dtype=dtype)


def invert(x, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Bitwise NOT of an integer tile (one VectorE instruction: x XOR all-ones)."""
    return _ops.invert(x, dtype=dtype, mask=mask)


def logical_not(x, *, dtype=bool_, mask=None, **kwargs) -> _Tensor:
    """NOT x element-wise (x == 0), one VectorE instruction; bool result by default."""
    return _ops.tensor_scalar(x, "equal", 0, dtype=dtype, mask=mask, op_name="logical_not")


def var(x, axis, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Population variance along free axis/axes ``axis``: mean((x - mean(x))^2), composed like nl.softmax."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count = 1
    for ax in axes:
        count *= x.shape[ax]
    s = _ops.tensor_reduce("add", x, axes, dtype=float32, mask=mask, keepdims=True, op_name="var")
    m = _ops.tensor_scalar(s, "multiply", 1.0 / count, dtype=float32, op_name="var")
    d = _ops.tensor_tensor(x, m, "subtract", dtype=float32, nl_style=True, op_name="var")
    sq = _ops.activation("square", d, dtype=float32, op_name="var")
    ss = _ops.tensor_reduce("add", sq, axes, dtype=float32, mask=mask, op_name="var")
    return _ops.tensor_scalar(ss, "multiply", 1.0 / count, dtype=dtype if dtype is not None else x.dtype,
                              op_name="var")


def rand(shape, dtype=float32, **kwargs) -> _Tensor:
    """A tile of uniform random values in [0, 1) (values differ from hardware's generator)."""
    from nkisim.core import ops_isa

    return ops_isa.rand(shape, dtype, mask=kwargs.get("mask"))


def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Seed the random number generator used by nl.rand / nisa.dropout (a scalar or a [1, 1] tile)."""
    from nkisim.core import ops_isa

    ops_isa.random_seed(seed)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    """Per partition, the elements of data's flattened free dimensions at ``indices`` (uint32); output shaped like
    indices (nki.language.gather_flattened docs)."""
    from nkisim.core import ops_isa

    return ops_isa.gather_flattened(data, indices, dtype=dtype, mask=mask)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs) -> None:
    """dst = op(dst, value) atomically on HBM through an indirect (SBUF-tile-indexed) access; op: np.add."""
    from nkisim.api.isa import _alu

    _ops.atomic_rmw(dst, value, _alu(op, "atomic_rmw"), mask=mask)


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False, **kwargs):
    """Reduce ``x`` with ``op`` over the SPMD programs along ``program_axes`` (nki.language.all_reduce docs).

    nkisim runs the programs of a launch grid one after another, so a program cannot wait for the others' tiles:
    with one program along ``program_axes`` (no grid, or extent 1) the reduction is over that program alone, i.e. a
    copy (cast to ``dtype``); over several programs it raises "nkisim does not support nl.all_reduce ... yet"."""
    from nkisim.api._unsupported import NkisimUnsupportedError
    from nkisim.api.isa import _alu

    _alu(op, "all_reduce")
    n = num_programs(program_axes)
    if n > 1:
        raise NkisimUnsupportedError(
            f"nkisim does not support nl.all_reduce across {n} SPMD programs yet: nkisim runs the programs of a "
            "launch grid one after another, so no program can combine its tile with the others' (see docs/nkisim.md "
            "'Unsupported API'); with one program along program_axes the reduction is a copy")
    return _ops.tensor_copy(x, dtype=dtype, mask=mask, op_name="all_reduce")


def __getattr__(name: str):
    from nkisim.api import _unsupported

    return _unsupported.missing("neuronxcc.nki.language", "nl", name)


del annotations  # the __future__ import must not leak as an NKI name
