"""``nki.language`` (``nl``) of the current API (NKI 0.6, Neuron SDK 2.32) as nkisim implements it.

Thin adapters over ``nkisim.core``: tensor creation (``nl.ndarray`` is uninitialised: nkisim fills it with NaN /
4 as AWS's CPU simulator does, nki/guides/nki_simulator.rst "Uninitialized Memory Detection"), the memory regions
(``nl.hbm`` is an alias of ``nl.private_hbm``; kernel outputs live in ``nl.shared_hbm``), ``nl.tile_size``, the
convenience wrappers that return a new tile (``nl.load``, ``nl.add``, ``nl.sum``, ``nl.matmul``, ...: the same core
operations as the legacy ``nl``), the loop ranges and the SPMD queries.  ``nl.arange``, ``nl.mgrid`` and
``nl.par_dim`` were removed from the API (NKI 0.2): using them is an error naming the replacement.  Only NKI names
are public: helpers are underscored.
"""

from __future__ import annotations

import warnings as _warnings

import numpy as _np

from nkisim.core import buffers as _buffers
from nkisim.core import composites as _comp
from nkisim.core import config as _config
from nkisim.core import context as _ctx
from nkisim.core import dtypes as _dt
from nkisim.core import launchinfo as _launch
from nkisim.core import placement as _placement
from nkisim.core import semantics as _sem
from nkisim.core.instr import B_HBM as _HBM
from nkisim.core.instr import B_PSUM as _PSUM
from nkisim.core.instr import B_SBUF as _SBUF
from nkisim.core.instr import E_GPSIMD as _GPSIMD
from nkisim.core.instr import Buf as _Buf
from nkisim.core.ops import dma as _dma
from nkisim.core.ops import elementwise as _ew
from nkisim.core.ops import gpsimd as _gps
from nkisim.core.ops import reduce as _red
from nkisim.core.ops import registers as _reg
from nkisim.core.ops.common import need_on_chip as _need_on_chip
from nkisim.core.rules import fail as _fail
from nkisim.core.sealed import Sealed as _Sealed
from nkisim.core.tensor import Tensor as _Tensor
from nkisim.frontends import NKI as _NKI
from nkisim.frontends import _operators, _unsupported

# ---- data types (nki.dtype, re-exported as nl.X; the packed MX types are placeholders) -------------------------
from nkisim.frontends.nki.dtype import (  # noqa: F401  (public NKI names)
    DType,  # noqa: F401  (the stub's ``DType = str``: annotations)
    bfloat16,
    bool_,
    float4_e2m1fn_x4,
    float8_e4m3,
    float8_e4m3fn,
    float8_e4m3fn_x4,
    float8_e5m2,
    float8_e5m2_x4,
    float8_e8m0fnu,
    float16,
    float32,
    int8,
    int16,
    int32,
    tfloat32,
    uint8,
    uint16,
    uint32,
)
from nkisim.frontends.nki.objects import NKIObject, private_hbm, psum, sbuf, shared_hbm  # noqa: F401  (NKI names)
from nkisim.frontends.nki.objects import VirtualRegister as _VirtualRegister
from nkisim.frontends.nki.tensor import NkiTensor  # noqa: F401  (public NKI name)

# ---- memory regions (defined in objects.py: NkiTensor.buffer answers them) -------------------------------------
hbm = private_hbm  # "HBM - Alias of private_hbm"


class MemoryRegion(metaclass=_Sealed):
    """Memory region constants for NKI tensors (``nl.MemoryRegion.sbuf is nl.sbuf``)."""

    sbuf = sbuf
    psum = psum
    private_hbm = private_hbm
    shared_hbm = shared_hbm


def is_hbm(buffer) -> bool:
    return getattr(buffer, "kind", None) == _Buf.HBM


def is_on_chip(buffer) -> bool:
    return getattr(buffer, "kind", None) in (_Buf.SBUF, _Buf.PSUM)


def is_psum(buffer) -> bool:
    return getattr(buffer, "kind", None) == _Buf.PSUM


def is_sbuf(buffer) -> bool:
    return getattr(buffer, "kind", None) == _Buf.SBUF


def _buffer(buffer):
    if isinstance(buffer, str):
        raise TypeError(f"buffer={buffer!r}: NKI 0.3+ takes buffer objects, not strings: use nl.{buffer} (NKI "
                        "migration guide, 'String buffer names no longer supported')")
    return buffer


class _TileSize(NKIObject):
    """``nl.tile_size``: hardware tile limits of the current target (nki.language docs, NKI 0.6)."""

    pmax = 128
    psum_fmax = 512  # deprecated 0.4: same as psum_bank_fmax
    psum_bank_fmax = 512
    psum_bank_fmax_bytes = 2048
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    bn_stats_fmax = 512
    psum_min_align = 4
    sbuf_min_align = 1

    @property
    def psum_num_banks(self) -> int:
        return _limits().psum_banks

    @property
    def sbuf_size_bytes(self) -> int:
        """Total SBUF capacity in bytes (all partitions combined)."""
        lim = _limits()
        return lim.pmax * lim.sbuf_bytes_per_partition

    @property
    def sbuf_fmax_bytes(self) -> int:
        """Usable SBUF free size per partition, in bytes."""
        return _limits().sbuf_usable_bytes

    @property
    def sbuf_fmax(self) -> int:
        return _limits().sbuf_usable_bytes // 4

    @property
    def total_available_sbuf_size(self) -> int:
        """Deprecated (0.4): usable SBUF per partition, in bytes (= sbuf_fmax_bytes)."""
        return _limits().sbuf_usable_bytes


def _limits():
    ctx = _ctx.active()
    return ctx.limits if ctx is not None else _config.limits()


tile_size = _TileSize()


# ---- tensor creation ------------------------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=sbuf, name="", address=None) -> NkiTensor:
    """A new uninitialised tensor (nkisim fills it with NaN / 4, as AWS's simulator does).  ``address=
    (partition_offset, free_offset)`` places an SBUF / PSUM tensor at that partition and byte offset of each
    partition (``nkisim.core.placement.placed``): overlapping placements share memory as on hardware."""
    if buffer.__class__ is str:
        _buffer(buffer)
    if address is not None:
        buffer = _placement.placed(buffer, address)
    return _buffers.allocate(shape, dtype, buffer, name=name)


def _describe(x) -> str:
    shape = getattr(x, "shape", None)
    return f"a tensor of shape {list(shape)}" if shape is not None else repr(x)


def _shape(shape):
    return (shape,) if isinstance(shape, int) else tuple(shape)


def zeros(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _comp.filled(_shape(shape), dtype, _buffer(buffer), name, 0)


def ones(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _comp.filled(_shape(shape), dtype, _buffer(buffer), name, 1)


def full(shape, fill_value, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _comp.filled(_shape(shape), dtype, _buffer(buffer), name, fill_value)


def zeros_like(x, dtype=None, buffer=None, name="") -> NkiTensor:
    return _comp.filled(x.shape, dtype or x.dtype, _buffer(buffer) if buffer is not None else sbuf, name, 0)


def empty_like(x, dtype=None, buffer=None, name="") -> NkiTensor:
    return _buffers.allocate(x.shape, dtype or x.dtype, _buffer(buffer) if buffer is not None else x.buffer,
                             name=name)


def shared_constant(constant):
    """A shared HBM tensor holding constant data (a NumPy array, or the path of a .npy file, read as the compiler
    reads it and refused in a graded run: ``core.buffers.shipped_constant``)."""
    ctx = _ctx.current("shared_constant")
    ctx.settle()
    arr = _buffers.shipped_constant(ctx, constant) if isinstance(constant, str) else _np.asarray(constant)
    return _buffers.wrap_host(ctx, arr, "shared_constant", space="shared_hbm")  # "a tensor in shared HBM"


def shared_identity_matrix(n, dtype=uint8, dst=None):
    """"Create an identity matrix in SBUF" (nki.language.shared_identity_matrix, NKI 0.6): an ``(n, n)`` SBUF tile
    (``n`` on the partitions), or ``dst`` when given.  It behaves like ``shared_constant`` (the compiler keeps the
    constant in HBM and shares it between identity matrices of one dtype), so nkisim loads it from a shared HBM
    constant with one DMA per call: a conservative cost, since the compiler may reuse an identity already loaded."""
    ident = shared_constant(_np.identity(int(n)).astype(_dt.to_dtype(dtype)))
    if dst is None:
        dst = _buffers.allocate((int(n), int(n)), dtype, sbuf, name="shared_identity_matrix")
    _dma.dma_copy(ident, dst)
    return dst


# ---- loops (Python semantics: NKI 0.2+ runs loop bodies as Python does) -----------------------------------------
def _range(start, stop=None, step=1) -> range:
    if stop is None:
        start, stop = 0, start
    return range(int(start), int(stop), int(step))


def affine_range(start, stop=None, step=1) -> range:
    """Deprecated alias of ``range`` (fully unrolled)."""
    return _range(start, stop, step)


def sequential_range(start, stop=None, step=1) -> range:
    """Deprecated alias of ``range`` (fully unrolled)."""
    return _range(start, stop, step)


def static_range(start, stop=None, step=1) -> range:
    """Deprecated alias of ``range`` (fully unrolled)."""
    return _range(start, stop, step)


def _new_register():
    return _VirtualRegister()


def dynamic_range(start, stop=None, step=1):
    """A hardware loop with run-time bounds (integers or ``VirtualRegister``s): the ``for`` body runs once in
    Python, with the loop variable a ``VirtualRegister``, and the device repeats it ("the loop body is not unrolled;
    instead, a single copy of the body is generated and the hardware iterates over it at runtime",
    nki/deep-dives/nki-dynamic-loops.rst; ``nkisim.core.ops.registers``).  Deprecated: "NKI emits a deprecation
    warning when it encounters for i in nl.dynamic_range(...)" (NKI 0.6.0 release notes)."""
    _warnings.warn("nl.dynamic_range loops are deprecated and will be removed in a future NKI release: use "
                   "nl.fori_loop(lower, upper, body_fun) (NKI 0.6.0 release notes)", DeprecationWarning, stacklevel=2)
    _ctx.current("dynamic_range")
    return _reg.DynamicRange(start, stop, step, _new_register)


def fori_loop(lower, upper, body_fun, step=1) -> None:
    """``for i in range(lower, upper, step): body_fun(i)`` on the device, with dynamic bounds (ints or registers):
    ``body_fun`` runs once in Python with ``i`` a ``VirtualRegister``; the device repeats it."""
    _ctx.current("fori_loop")
    _reg.fori_loop(lower, upper, body_fun, step, _new_register)


def while_loop(init, body_fun) -> None:
    """``r = init; while r != 0: r = body_fun(r)`` on the device: ``body_fun`` runs once in Python and returns the
    register holding the next condition; the device repeats it while that register is nonzero."""
    _ctx.current("while_loop")
    _reg.while_loop(init, body_fun, _new_register)


def ds(start, size) -> slice:
    """Dynamic slice ``[start, start + size)`` of one axis: ``t[:, nl.ds(i * 512, 512)]``."""
    return slice(start, start + size)


class _NoReorder(_ctx.NoReorder):
    """The core's block, counted so that a register-based dynamic loop inside it is refused (nl.no_reorder, NKI
    0.6: "Register-based dynamic loops (nl.fori_loop, nl.while_loop) are not supported inside a no_reorder block")."""

    def __enter__(self):
        _reg.no_reorder_block(+1)
        return super().__enter__()

    def __exit__(self, *exc):
        _reg.no_reorder_block(-1)
        return super().__exit__(*exc)


def no_reorder():
    """``with nl.no_reorder():``: the block's instructions keep program order on each engine (the scheduler does
    not fill gaps with them)."""
    return _NoReorder()


# ---- data movement --------------------------------------------------------------------------------------------
def load(src, dtype=None) -> NkiTensor:
    return _dma.load(src, dtype=dtype)


def load_transpose2d(src, dtype=None) -> NkiTensor:
    return _dma.load(src, dtype=dtype, transpose=True)


def store(dst, value) -> None:
    """``value``: "an SBUF tile that contains the values to store" (nl.store, NKI 0.6: a DMA, which cannot read
    PSUM; copy a PSUM result to SBUF first, e.g. with nl.copy)."""
    if isinstance(value, _Tensor):
        _need_on_chip(value, "store", "value", (_SBUF,))
    _dma.store(dst, value)


def copy(x, dtype=None) -> NkiTensor:
    return _ew.tensor_copy(x, dtype=dtype, op_name="copy")


def broadcast_to(x, shape, dtype=None) -> NkiTensor:
    out = _ew.broadcast_to(x, shape, same_rank=True)
    if dtype is not None and _dt.to_dtype(dtype) != out.dtype:
        out = _ew.tensor_copy(out, dtype=dtype, op_name="broadcast_to")
    return out


def expand_dims(x, axis):
    return x.expand_dims(axis)


# ---- element-wise -----------------------------------------------------------------------------------------------
def _binary(alu: str):
    def fn(x, y, dtype=None):
        return _sem.binary(alu, x, y, dtype=dtype, bool_result=False)  # NKI 0.6: comparisons keep the input dtype

    fn.__name__ = fn.__qualname__ = alu
    fn.nki_alu = alu
    return fn


# every binary ALU operator of the core (core/execute.py ALU) this API documents: nl.add, nl.maximum, ...
_BINARY, _ACTIVATIONS = _operators.language_operators(_unsupported.documented(_NKI))
for _name in _BINARY:
    globals()[_name] = _binary(_name)


def _unary(func: str):
    def fn(x, dtype=None):
        return _ew.activation(func, x, dtype=dtype, op_name=func)

    fn.__name__ = fn.__qualname__ = func
    fn.nki_act = func
    return fn


# every activation function of the core (core/execute.py ACTIVATION) this API documents: nl.exp, nl.abs, ...
for _name in _ACTIVATIONS:
    globals()[_name] = _unary(_name)
del _name
copy.nki_act = "copy"


def rsqrt(x, dtype=None) -> NkiTensor:
    """NKI 0.5.0 release notes: "The experimental nki.language.rsqrt API now provides higher numerical precision
    using the GpSimd Engine. PSUM inputs are no longer supported; use nki.isa.activation directly if you need PSUM
    input or Scalar Engine throughput": the operator table's rsqrt on GpSimd (which cannot read PSUM)."""
    return _ew.tensor_scalar(x, "rsqrt", 0.0, dtype=dtype, engine=_GPSIMD, op_name="rsqrt")


rsqrt.nki_act = "rsqrt"  # still the activation function when passed as op= (nisa.activation(op=nl.rsqrt))


def invert(x, dtype=None) -> NkiTensor:
    return _ew.invert(x, dtype=dtype)


invert.nki_alu = "invert"  # also the operator table's Bitwise Not (a unary operator of tensor_scalar)


def logical_not(x, dtype=None) -> NkiTensor:
    return _ew.logical_not_xor(x, dtype=dtype)


# ---- reductions and composites --------------------------------------------------------------------------------
def _reduction(alu: str, name: str):
    def fn(x, axis, dtype=None, keepdims=False):
        return _red.tensor_reduce(alu, x, axis, dtype=dtype, keepdims=keepdims, op_name=name)

    fn.__name__ = fn.__qualname__ = name
    fn.nki_alu = alu
    return fn


sum = _reduction("add", "sum")  # noqa: A001 - NKI name
max = _reduction("maximum", "max")  # noqa: A001
min = _reduction("minimum", "min")  # noqa: A001
prod = _reduction("multiply", "prod")


def all(x, axis, dtype=None):  # noqa: A001 - NKI name
    """The logical AND reduction; its dtype "will default to be the same as the data type of the input tile"."""
    return _red.tensor_reduce("logical_and", x, axis, dtype=dtype, op_name="all")


all.nki_alu = "logical_and"


def mean(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    return _comp.mean(x, axis, dtype=dtype, keepdims=keepdims)


def var(x, axis, dtype=None, keepdims=False) -> NkiTensor:
    """NKI 0.6: "keepdims: currently ignored; result always has keepdims=True shape" (nl.var docstring)."""
    return _comp.var(x, axis, dtype=dtype).expand_dims(axis)


def softmax(x, axis=-1, dtype=None) -> NkiTensor:
    return _comp.softmax(x, axis if axis >= 0 else axis + x.ndim, dtype=dtype)


def rms_norm(x, w, axis, n, epsilon=1e-06, dtype=None, compute_dtype=None) -> NkiTensor:
    return _comp.rms_norm(x, w, axis, n, epsilon, dtype=dtype, compute_dtype=compute_dtype)


def where(condition, x, y, dtype=None) -> NkiTensor:
    return _ew.select(condition, x, y, dtype=dtype)


def dropout(x, rate, dtype=None) -> NkiTensor:
    return _gps.dropout(x, rate, dtype=dtype)


def transpose(x, dtype=None) -> NkiTensor:
    return _comp.transpose(x, dtype=dtype)


def matmul(x, y, transpose_x=False) -> NkiTensor:
    return _comp.matmul(x, y, transpose_x=transpose_x)


def gather_flattened(data, indices, axis=0, dtype=None) -> NkiTensor:
    return _gps.gather_flattened(data, indices, dtype=dtype)


def rand(shape, dtype, buffer=sbuf, name="") -> NkiTensor:
    return _gps.rand(_shape(shape), dtype)


def random_seed(seed) -> None:
    """``seed``: "a [1,1] tensor on SBUF or PSUM with a 32-bit seed value" (nl.random_seed, NKI 0.6)."""
    if not (isinstance(seed, _Tensor) and tuple(seed.shape) == (1, 1) and seed.dtype.itemsize == 4
            and seed.kind in (_SBUF, _PSUM)):
        _fail("nkisim_bad_argument", op="random_seed", detail="seed must be a [1, 1] SBUF or PSUM tensor holding a "
              f"32-bit value, got {_describe(seed)}")
    _gps.random_seed(seed)


def device_print(print_prefix, tensor) -> None:
    """Print a tile's values (the simulator prints them; compiled kernels print nothing): nkisim.core.launchinfo.
    NKI 0.6: "print_prefix: ... must be a constant string"; "tensor: tensor to print out. Can be in SBUF or HBM"."""
    if not isinstance(print_prefix, str):
        raise TypeError(f"nl.device_print: print_prefix must be a constant string, got {type(print_prefix).__name__}")
    if isinstance(tensor, _Tensor):
        _need_on_chip(tensor, "device_print", "tensor", (_SBUF, _HBM))
    _launch.device_print(print_prefix, tensor)


# ---- SPMD ---------------------------------------------------------------------------------------------------------
def program_id(axis=0) -> int:
    """Index of the running program along ``axis`` (LNC=2: 0 and 1 along axis 0); nkisim.core.launchinfo."""
    return _launch.program_id(axis)


def num_programs(axes=0) -> int:
    """Programs along ``axes``; the signature's default is AWS's (nki/api/nki/language/__init__.py)."""
    return _launch.num_programs(axes)


def program_ndim() -> int:
    return _launch.program_ndim()


# ---- removed from the API, with their replacements (NKI migration guide, 0.1 -> 0.2) ------------------------------
_REMOVED = {
    "arange": "index with slices (t[0:128, 0:512]), nl.ds(start, size), or an access pattern t.ap([[stride, count], "
              "...]) (NKI 0.2 removed nl.arange/nl.mgrid)",
    "mgrid": "index with slices (t[0:128, 0:512]), nl.ds(start, size), or an access pattern t.ap([[stride, count], "
             "...]) (NKI 0.2 removed nl.arange/nl.mgrid)",
    "par_dim": "the partition dimension is always the first one; keep blocks in a Python list of tensors or in a "
               "free dimension (NKI 0.2 removed block dimensions)",
    "loop_reduce": "reduce in place with nisa.tensor_tensor(dst=acc, data1=acc, data2=x, op=...)",
    "atomic_rmw": "nisa.dma_compute(dst, [src, dst], reduce_op=nl.add)",
    "ones_like": "nl.full(x.shape, 1, x.dtype)",
    "static_cast": "numpy's astype on the host arrays",
}


_NOT_MODELLED = {"prelu": "an operator of nisa.activate2, a NeuronCore-v4 (trn3) instruction",
                 "bypass": "an operator of nisa.activate2, a NeuronCore-v4 (trn3) instruction"}


# every call that makes instructions goes through the executor's wrapper (recorded in a dynamic loop body, run with
# its run-time-offset views resolved elsewhere); allocation, views, loops and compile-time queries do not
_reg.wrap_api(globals(), exclude={"ndarray", "ds", "affine_range", "sequential_range", "static_range",
                                  "dynamic_range", "fori_loop", "while_loop", "no_reorder", "program_id",
                                  "num_programs", "program_ndim", "is_hbm", "is_on_chip", "is_psum", "is_sbuf",
                                  "shared_constant", "expand_dims"})
# an allocation makes no instruction, but the program a recorded stream replays needs it (nkisim.stream)
ndarray = _reg.stream_only(ndarray)
shared_constant = _reg.stream_only(shared_constant)


def __getattr__(name: str):
    from nkisim.frontends import NKI, _unsupported

    return _unsupported.missing(NKI, "nl", name, _REMOVED, why=_NOT_MODELLED)


del annotations  # the __future__ import must not leak as an NKI name
