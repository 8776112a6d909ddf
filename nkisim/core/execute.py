"""Value semantics: the NumPy arithmetic behind ALU operators and activation functions.

Engines compute in fp32 (trainium arch guide: "All arithmetic is done in FP32, with free input and output
casting"); bitvec operators work on the raw integers.  The front end rounds once to the destination dtype.
"""

from __future__ import annotations

import math

import numpy as np

from nkisim.core import dtypes

F32 = np.float32


def _erf(x):
    v = np.vectorize(math.erf, otypes=[np.float64])
    return v(x).astype(F32)


def _gelu(x):
    return (0.5 * x * (1.0 + _erf(x / np.sqrt(2.0)))).astype(F32)


def _gelu_tanh(x):
    return (0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))).astype(F32)


def _sigmoid(x):
    return (1.0 / (1.0 + np.exp(-x))).astype(F32)


def _softplus(x):
    return np.logaddexp(0.0, x).astype(F32)


# name -> (function on fp32/int arrays, is_bitvec)
ALU = {
    "add": (np.add, False),
    "subtract": (np.subtract, False),
    "multiply": (np.multiply, False),
    "divide": (np.divide, False),
    "maximum": (np.maximum, False),
    "minimum": (np.minimum, False),
    "power": (np.power, False),
    "mod": (np.mod, False),
    "fmod": (np.fmod, False),
    "equal": (np.equal, False),
    "not_equal": (np.not_equal, False),
    "greater": (np.greater, False),
    "greater_equal": (np.greater_equal, False),
    "less": (np.less, False),
    "less_equal": (np.less_equal, False),
    "logical_and": (np.logical_and, False),
    "logical_or": (np.logical_or, False),
    "logical_xor": (np.logical_xor, False),
    "bitwise_and": (np.bitwise_and, True),
    "bitwise_or": (np.bitwise_or, True),
    "bitwise_xor": (np.bitwise_xor, True),
    "left_shift": (np.left_shift, True),
    "right_shift": (np.right_shift, True),
    # nki.language.abs_max / abs_min (NKI 0.6): "returns the original (signed) value of whichever input has the
    # larger [smaller] absolute value": "x if |x| > |y| [<], else y" (a tie gives y: the docstrings' examples)
    "abs_max": (lambda x, y: np.where(np.abs(x) > np.abs(y), x, y), False),
    "abs_min": (lambda x, y: np.where(np.abs(x) < np.abs(y), x, y), False),
    # nki.language.average: a reduction operator ("the reduction operator (add, average, max, bitwise_or,
    # bitwise_and)", nki.isa.tensor_partition_reduce); element-wise, the mean of the two operands
    "average": (lambda x, y: (x + y) * np.float32(0.5), False),
    # The "Arithmetic Unary" rows of the operator table (nki.api.shared, "Supported Math Operators", SDK 2.26 and
    # NKI 0.6) and its Bitwise Not: operators of tensor_scalar / tensor_scalar_reduce whose operand is ignored
    # ("Must be None or 0 when op0 is a unary operator (e.g., nl.abs)", nki.isa.tensor_scalar docs, NKI 0.6)
    "abs": (lambda x, y: np.abs(x), False),
    "square": (lambda x, y: np.square(x), False),
    "relu": (lambda x, y: np.maximum(x, np.float32(0.0)), False),
    "rsqrt": (lambda x, y: np.float32(1.0) / np.sqrt(x), False),
    "reciprocal": (lambda x, y: np.float32(1.0) / x, False),
    "invert": (lambda x, y: np.invert(x), True),
}

# Operators of one operand (see above): only tensor_scalar-style instructions take them, with no operand or 0
UNARY_ALU = frozenset({"abs", "square", "relu", "rsqrt", "reciprocal", "invert"})
# Operators of NeuronCore-v4 (trn3) only: "These are trn3 only and run on the Vector Engine" (release notes, NKI
# 0.4.0, nl.abs_max / nl.abs_min; their 0.6 docstrings: "Available only on NeuronCore-v4 (trn3) and newer").
# Their values are defined above; no target nkisim models accepts them (core.ops.elementwise.v4_operators).
V4_ALU = frozenset({"abs_max", "abs_min"})

def _fold(ufunc):
    """A left fold along the given axes in row-major order (x0 op x1 op x2 ...), for operators NumPy will not
    reduce over several axes at once (subtract is not reorderable)."""
    def reduce(x, axis, keepdims=False):
        x = np.asarray(x)
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(int(a) % x.ndim for a in axis)
        keep = [d for d in range(x.ndim) if d not in axes]
        moved = np.transpose(x, keep + list(axes)).reshape([x.shape[d] for d in keep] + [-1])
        r = ufunc.reduce(moved, axis=-1)
        if keepdims:
            r = r.reshape([1 if d in axes else x.shape[d] for d in range(x.ndim)])
        return r
    return reduce


# reduction name -> numpy reducer.  The legal reduction operators (nki.api.shared "Supported Math Operators",
# Table 2 "Legal Reduction op"; nki.isa.tensor_scalar_reduce docs: "reduce_op can be any of nl.add, nl.subtract,
# nl.multiply, nl.max or nl.min") include subtract and logical_xor.
REDUCE = {
    "subtract": _fold(np.subtract),
    "logical_xor": _fold(np.logical_xor),
    "add": np.sum,
    "maximum": np.max,
    "minimum": np.min,
    "multiply": np.prod,
    "average": np.mean,
    "bitwise_and": np.bitwise_and.reduce,
    "bitwise_or": np.bitwise_or.reduce,
    "bitwise_xor": np.bitwise_xor.reduce,
    "logical_and": np.logical_and.reduce,
    "logical_or": np.logical_or.reduce,
}

def _gelu_dx(x):
    cdf = 0.5 * (1.0 + _erf(x / np.sqrt(2.0)))
    pdf = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    return (cdf + x * pdf).astype(F32)


def _gelu_sigmoid_dx(x):
    """d/dx of gelu_apprx_sigmoid, x * sigmoid(1.702 x): s + 1.702 x s (1 - s)."""
    s = _sigmoid(1.702 * x)
    return (s + 1.702 * x * s * (1.0 - s)).astype(F32)


def _silu_dx(x):
    s = _sigmoid(x)
    return (s * (1.0 + x * (1.0 - s))).astype(F32)


ACTIVATION = {
    "copy": lambda x: x,
    "identity": lambda x: x,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "reciprocal": lambda x: 1.0 / x,
    "tanh": np.tanh,
    "sigmoid": _sigmoid,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": _gelu,
    "gelu_apprx_tanh": _gelu_tanh,
    "gelu_apprx_sigmoid": lambda x: x * _sigmoid(1.702 * x),
    "gelu_apprx_sigmoid_dx": _gelu_sigmoid_dx,
    "silu": lambda x: x * _sigmoid(x),
    "softplus": _softplus,
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "erf": _erf,
    "erf_dx": lambda x: (2.0 / np.sqrt(np.pi) * np.exp(-x * x)).astype(F32),
    "gelu_dx": _gelu_dx,
    "silu_dx": _silu_dx,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "arctan": np.arctan,
    "square": np.square,
    "abs": np.abs,
    "sign": np.sign,
    "negative": np.negative,
    "floor": np.floor,
    "ceil": np.ceil,
    "trunc": np.trunc,
}


def to_f32(a: np.ndarray) -> np.ndarray:
    """fp32 working copy of an operand (integers stay integers for bitvec ops)."""
    if a.dtype == F32:
        return a
    if a.dtype.kind in "iub":
        return a
    return a.astype(F32)


def alu(name: str, x, y):
    fn, bitvec = ALU[name]
    if bitvec:
        x = np.asarray(x)
        xi = x.astype(np.int64)
        if name == "right_shift" and x.dtype.kind == "i":
            # numpy.right_shift is the *logical* shift right on the engines ("Arithmetic Shift Right: Support coming
            # soon", nki.api.shared Table 2): the operand's bit pattern shifts in zeros, also for negative values
            # (int64 arrays are intermediates of at most 32-bit data: NKI has no 64-bit integers)
            xi &= (1 << (8 * min(x.dtype.itemsize, 4))) - 1
        if name == "invert":  # NOT of the operand's own bit width (an unsigned result stays in its range)
            r = np.invert(xi)
            return r & ((1 << (8 * min(x.dtype.itemsize, 4))) - 1) if x.dtype.kind == "u" else r
        return fn(xi, np.asarray(y).astype(np.int64))
    r = fn(x, y)  # floating-point warnings are silenced for the whole kernel run (runtime.run_kernel)
    # float64 (12) or bool (0) results become fp32: by type number (comparing a dtype with scalar types is ~4x dearer)
    return r.astype(F32) if r.dtype.num in (12, 0) else r


def activation(name: str, x):
    return np.asarray(ACTIVATION[name](x), dtype=F32)


# How a float becomes an integer on the way to an integer destination, per rule era: "trunc" (towards zero) or
# "nearest" (to nearest, ties to even).  Set by the running kernel's context (core.context.push / pop): one global
# read per cast keeps the per-instruction path free of a context lookup.
FLOAT_TO_INT = {"2024": "trunc", "2025": "trunc", "nki": "nearest"}
_float_to_int = ["trunc"]


def set_float_to_int(era: str) -> str:
    """Select the float -> int rounding of rule era ``era`` (:data:`FLOAT_TO_INT`); returns the previous mode."""
    old = _float_to_int[0]
    _float_to_int[0] = FLOAT_TO_INT.get(era, "trunc")
    return old


def cast(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Convert once to the destination dtype: floats round to the float format; float -> int per era.

    NKI 0.6 (the ``nki`` era): "fp32-to-integer casts match hardware (round to nearest, ties to even; saturate to
    the destination range) instead of numpy's default behavior" (release notes, NKI 0.6.0 Bug Fixes, ``nki.simulate``
    correctness fixes).  NaN becomes 0 in both modes (no document names it).

    The legacy eras keep truncation, the behaviour evidenced for their SDKs: float -> int discards the fraction
    (towards zero), saturating at the integer range.  The 2.2x docs ("NKI Type Promotion",
    general/nki/api/nki.api.shared.rst) make ``int32_tile / 38`` an int32 result computed in fp32 and "cast back",
    without naming the rounding; AWS's own sample ``resize_nearest_fixed_dma_kernel`` (nki-samples, vision.py)
    computes ``nl.floor(iota_int32 / out_w, dtype=int32)`` and its test, run both on AWS's simulator and on
    Trainium, expects ``floor(i / out_w)``: 58.53 must become 58, which truncation gives and rounding to nearest
    does not (the two sources disagree about the hardware; each era follows its own SDK's).  One rule for every
    engine and for DMA casts: no document distinguishes them.  Towards zero (not floor) for negatives follows C
    and NumPy's ``astype``.
    """
    if dtype.metadata is not None and dtypes.is_tf32(dtype):
        return dtypes.round_tf32(values if values.dtype.kind == "f" else values.astype(np.float32))
    if values.dtype == dtype:
        return values
    if dtype.kind in "iu" and values.dtype.kind == "f":
        info = np.iinfo(dtype)
        # clip in fp64: int32's max is not an fp32 value (it rounds up to 2**31 and would wrap to INT_MIN)
        rounded = np.rint if _float_to_int[0] == "nearest" else np.trunc  # np.rint: half to even
        return np.clip(np.nan_to_num(rounded(values.astype(np.float64))), info.min, info.max).astype(dtype)
    return values.astype(dtype)
