"""neuronxcc.nki.language (``nl``) as nkisim implements it (legacy API, Neuron SDK 2.20-2.26).

Only NKI names are public: helpers are underscored so that a misspelled or non-existent name raises
AttributeError exactly as on the real module.
"""

from __future__ import annotations

import numpy as _np

from nkisim.core import buffers as _buffers
from nkisim.core import composites as _comp
from nkisim.core import config as _config
from nkisim.core import context as _ctx
from nkisim.core import dtypes as _dt
from nkisim.core import launchinfo as _launch
from nkisim.core import semantics as _sem
from nkisim.core.indexing import arange, mgrid  # noqa: F401  (public NKI names)
from nkisim.core.instr import Buf as _Buf
from nkisim.core.ops import dma as _dma
from nkisim.core.ops import elementwise as _ew
from nkisim.core.ops import gpsimd as _gps
from nkisim.core.ops import reduce as _red
from nkisim.core.ops import registers as _reg
from nkisim.core.rules import fail as _fail
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.core.tensor import ParDim as _ParDim
from nkisim.core.tensor import Tensor as _Tensor
from nkisim.frontends import LEGACY as _LEGACY
from nkisim.frontends import _operators, _unsupported
from nkisim.frontends._operators import alu as _alu

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
sbuf = _buffers.SBUF_SPEC
psum = _buffers.PSUM_SPEC
hbm = _buffers.HBM_SPEC
private_hbm = _buffers.BufferSpec(_Buf.HBM, "private_hbm")
shared_hbm = _buffers.BufferSpec(_Buf.HBM, "shared_hbm")


def par_dim(size) -> _ParDim:
    """Mark the partition dimension inside a shape tuple: (NB, par_dim(128), F)."""
    return _ParDim(size)


class _TileSize(metaclass=_Sealed):
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
    return _buffers.allocate(shape, dtype, buffer, name=name)


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
    return _buffers.allocate(a.shape, dtype or a.dtype, buffer, name=name)


def _filled(shape, dtype, buffer, name, value) -> _Tensor:
    return _comp.filled(shape, dtype, buffer, name, value)


# ---- loops ----------------------------------------------------------------------------------------------------
def affine_range(*args, **kwargs) -> _ctx.SymbolicRange:
    """Loop without carried dependencies; nkisim runs iterations in order with plain int indices (NKI traces the
    body once: see runtime.SymbolicRange).  ``map``, not a generator: a kernel's innermost loops make one per
    iteration of the loops around them."""
    return _ctx.SymbolicRange(range(*map(int, args)))


def sequential_range(*args, **kwargs) -> _ctx.SymbolicRange:
    return _ctx.SymbolicRange(range(*map(int, args)))


def static_range(*args, **kwargs) -> range:
    return range(*map(int, args))


# ---- data movement --------------------------------------------------------------------------------------------
def load(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _dma.load(src, mask=mask, dtype=dtype)


def load_transpose2d(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _dma.load(src, mask=mask, dtype=dtype, transpose=True)


def store(dst, value=None, *, mask=None, **kwargs) -> None:
    if value is None:
        value = kwargs.pop("data", None)
    _dma.store(dst, value, mask=mask)


def copy(src, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    return _ew.tensor_copy(src, dtype=dtype, mask=mask, op_name="copy")


def broadcast_to(src, *, shape, **kwargs) -> _Tensor:
    return _ew.broadcast_to(src, shape)


# ---- element-wise -----------------------------------------------------------------------------------------------
def _binary(alu: str):
    def fn(x, y, *, dtype=None, mask=None, **kwargs):
        return _sem.binary(alu, x, y, dtype=dtype, mask=mask)

    fn.__name__ = alu
    fn.__qualname__ = alu
    fn.nki_alu = alu
    return fn


# every binary ALU operator of the core (core/execute.py ALU) this API documents: nl.add, nl.maximum, ...
_BINARY, _ACTIVATIONS = _operators.language_operators(_unsupported.documented(_LEGACY))
for _name in _BINARY:
    globals()[_name] = _binary(_name)


def _unary(func: str):
    def fn(x, *, dtype=None, mask=None, **kwargs):
        return _ew.activation(func, x, dtype=dtype, mask=mask, op_name=func)

    fn.__name__ = func
    fn.__qualname__ = func
    fn.nki_act = func
    return fn


# every activation function of the core (core/execute.py ACTIVATION) this API documents: nl.exp, nl.abs, ...
for _name in _ACTIVATIONS:
    globals()[_name] = _unary(_name)
del _name
identity = _unary("identity")  # not in the 2.2x symbol list (kept: kernels used it)


def _reduction(alu: str, name: str):
    def fn(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
        return _red.tensor_reduce(alu, x, axis, dtype=dtype, mask=mask, keepdims=keepdims, op_name=name)

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
    return _red.tensor_reduce("logical_and", x, axis, dtype=dtype, mask=mask, keepdims=keepdims, op_name="all")


all.nki_alu = "logical_and"


def mean(x, axis, *, dtype=None, mask=None, keepdims=False, **kwargs):
    """Arithmetic mean; "float32 intermediate and return values are used for integer inputs" (nki.language.mean
    docs), other inputs keep their dtype unless ``dtype`` is given."""
    return _comp.mean(x, axis, dtype=dtype, mask=mask, keepdims=keepdims)


# ---- TensorE --------------------------------------------------------------------------------------------------
def matmul(x, y, *, transpose_x: bool = False, mask=None, **kwargs) -> _Tensor:
    """x @ y (or x.T @ y with transpose_x=True) on TensorE; result in PSUM, fp32."""
    return _comp.matmul(x, y, transpose_x=transpose_x, mask=mask)


def transpose(x, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    return _comp.transpose(x, dtype=dtype, mask=mask)


def where(condition, x, y, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Element-wise select on VectorE: x where condition is true, else y."""
    return _ew.select(condition, x, y, dtype=dtype, mask=mask)


def softmax(x, axis, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> _Tensor:
    """exp(x - max) / sum(exp(x - max)) along free axis ``axis`` (composed from reduce/scalar/activation)."""
    return _comp.softmax(x, axis, dtype=dtype, compute_dtype=compute_dtype)



def rms_norm(x, w, axis, n, epsilon=1e-6, *, dtype=None, compute_dtype=None, mask=None, **kwargs) -> _Tensor:
    """x * w / sqrt(mean(x^2) + epsilon) along free axis ``axis``."""
    return _comp.rms_norm(x, w, axis, n, epsilon, dtype=dtype, compute_dtype=compute_dtype)


def dropout(x, rate, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Zero elements with probability ``rate`` (a scalar or a [P, 1] tile); the rest are NOT rescaled: the docs say
    "randomly zeroes some of the elements" and AWS's flash attention multiplies by 1/(1-p) itself afterwards
    (nki-samples reference/attention.py, "TODO: Remove this once the dropout supports scale prob")."""
    return _gps.dropout(x, rate, dtype=dtype, mask=mask)


def loop_reduce(x, op, loop_indices, *, dtype=None, mask=None, **kwargs):
    """Reduce ``x`` into the destination across loop iterations: ``b = nl.loop_reduce(a, op, [k])`` is
    ``b = nisa.tensor_tensor(data1=b, data2=a, op=op)`` written in place into ``b`` (nki.language.loop_reduce
    docs: "The destination tile is also the rhs input to op"); ``loop_indices`` only informs the compiler."""
    import sys as _sys

    from nkisim.core.stmt import assignment_target

    found = assignment_target(_sys._getframe(1), "loop_reduce")
    if found is None or not isinstance(found[1], _Tensor):
        what = f"'{found[0]}' holds no tile yet" if found else "its result is not assigned to a tile"
        _fail("nkisim_bad_argument", op="loop_reduce", detail=f"the destination is the assignment target and "
              f"also an input, but {what}: create it before the loop (b = nl.zeros(..., buffer=nl.sbuf))")
    return _loop_reduce(found[1], x, _alu(op, "loop_reduce"), dtype, mask)


def _loop_reduce(dst, x, alu: str, dtype, mask):
    """The instruction of ``nl.loop_reduce`` once its destination is known: what a recorded stream names (the
    destination comes from the kernel's frame, which a replay does not have)."""
    return _comp.loop_reduce(dst, x, alu, dtype=dtype, mask=mask)


def expand_dims(data, axis):
    return data.expand_dims(axis)


def device_print(prefix, x=None, *, mask=None, **kwargs) -> None:
    """Print a tile's values when the kernel runs with values (nkisim.core.launchinfo); ``x`` may be given by any
    keyword (``nl.device_print("msg", x=tile)``, as the course's kernels write it); ``mask`` is accepted."""
    if x is None and kwargs:
        x = next(iter(kwargs.values()))
    _launch.device_print(prefix, x)


# ---- SPMD launch grid ([nl] program_id / num_programs / program_ndim / nc / spmd_dim) ----------------------------
def program_id(axis: int = 0) -> int:
    """Index of the running program along ``axis`` of the launch grid (0 without a grid; nkisim.core.launchinfo)."""
    return _launch.program_id(axis)


def num_programs(axes=None) -> int:
    """Programs along ``axes`` (an axis or a tuple of axes); all programs when axes is None."""
    return _launch.num_programs(axes)


def program_ndim() -> int:
    """Number of axes of the launch grid (0 for a kernel launched without one)."""
    return _launch.program_ndim()


class _SpmdDim(metaclass=_Sealed):
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


class _FloatConsts(metaclass=_Sealed):
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
    ctx = _ctx.current("shared_constant")
    ctx.settle()
    arr = _np.asarray(constant)
    if dtype is not None:
        arr = static_cast(arr, dtype)
    return _buffers.wrap_host(ctx, arr, "shared_constant")


def shared_identity_matrix(n, dtype=uint8, **kwargs) -> _Tensor:
    """``shared_constant(np.identity(n), dtype)``: an n x n identity matrix in HBM."""
    return shared_constant(_np.identity(int(n)), dtype=dtype)


def invert(x, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Bitwise NOT of an integer tile (one VectorE instruction: x XOR all-ones)."""
    return _ew.invert(x, dtype=dtype, mask=mask)


invert.nki_alu = "invert"  # also the operator table's Bitwise Not (a unary operator of tensor_scalar)


def logical_not(x, *, dtype=bool_, mask=None, **kwargs) -> _Tensor:
    """NOT x element-wise (x == 0), one VectorE instruction; bool result by default."""
    return _ew.tensor_scalar(x, "equal", 0, dtype=dtype, mask=mask, op_name="logical_not")


def var(x, axis, *, dtype=None, mask=None, **kwargs) -> _Tensor:
    """Population variance along free axis/axes ``axis``: mean((x - mean(x))^2), composed like nl.softmax."""
    return _comp.var(x, axis, dtype=dtype, mask=mask)


def rand(shape, dtype=float32, **kwargs) -> _Tensor:
    """A tile of uniform random values in [0, 1) (values differ from hardware's generator)."""
    return _gps.rand(shape, dtype, mask=kwargs.get("mask"))


def random_seed(seed, *, mask=None, **kwargs) -> None:
    """Seed the random number generator used by nl.rand / nisa.dropout (a scalar or a [1, 1] tile)."""
    _gps.random_seed(seed)


def gather_flattened(data, indices, *, mask=None, dtype=None, **kwargs) -> _Tensor:
    """Per partition, the elements of data's flattened free dimensions at ``indices`` (uint32); output shaped like
    indices (nki.language.gather_flattened docs)."""
    return _gps.gather_flattened(data, indices, dtype=dtype, mask=mask)


def atomic_rmw(dst, value, op, *, mask=None, **kwargs) -> None:
    """dst = op(dst, value) atomically on HBM through an indirect (SBUF-tile-indexed) access; op: np.add."""
    _dma.atomic_rmw(dst, value, _alu(op, "atomic_rmw"), mask=mask)


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False, **kwargs):
    """Reduce ``x`` with ``op`` over the SPMD programs along ``program_axes`` (nki.language.all_reduce docs).

    nkisim runs the programs of a launch grid one after another, so a program cannot wait for the others' tiles:
    with one program along ``program_axes`` (no grid, or extent 1) the reduction is over that program alone, i.e. a
    copy (cast to ``dtype``); over several programs it raises "nkisim does not support nl.all_reduce ... yet"."""
    from nkisim.frontends._unsupported import NkisimUnsupportedError
    _alu(op, "all_reduce")
    n = num_programs(program_axes)
    if n > 1:
        raise NkisimUnsupportedError(
            f"nkisim does not support nl.all_reduce across {n} SPMD programs yet: nkisim runs the programs of a "
            "launch grid one after another, so no program can combine its tile with the others' (see docs/nkisim.md "
            "'Unsupported API'); with one program along program_axes the reduction is a copy")
    return _ew.tensor_copy(x, dtype=dtype, mask=mask, op_name="all_reduce")


# every call that makes instructions or allocations is written down when the kernel's program is recorded
# (nkisim.stream: the grader replays it); loops, launch-grid queries, index helpers and host helpers are not
_reg.wrap_recorded(globals(), exclude={"par_dim", "affine_range", "sequential_range", "static_range", "loop_reduce",
                                       "program_id", "num_programs", "program_ndim", "nc", "spmd_dim", "ds", "finfo",
                                       "static_cast", "expand_dims"})
_loop_reduce = _reg.stream_only(_loop_reduce)


def __getattr__(name: str):
    from nkisim.frontends import LEGACY, _unsupported

    return _unsupported.missing(LEGACY, "nl", name)


del annotations  # the __future__ import must not leak as an NKI name
