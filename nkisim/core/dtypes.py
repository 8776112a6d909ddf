"""NKI data types, the NKI type-promotion rules and fp32-compute-then-round casting.

Engines compute in fp32 internally and round once to the output dtype (trainium arch guide; nki.api.shared
"Supported Data Types").  Promotion follows "NKI Type Promotion" (nki.api.shared.rst @2.26), which differs from
NumPy: fp16 (+) bf16 -> fp32, python floats count as fp32, (int32, uint32) -> fp32.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from nkisim.core import config

float32 = np.float32
float16 = np.float16
bfloat16 = ml_dtypes.bfloat16
float8_e4m3 = getattr(ml_dtypes, "float8_e4m3", ml_dtypes.float8_e4m3fn)
float8_e4m3fn = ml_dtypes.float8_e4m3fn
float8_e5m2 = ml_dtypes.float8_e5m2
# tfloat32 (1S, 8E, 10M: nki.api.shared.rst "Supported Data Types") lives in a 32-bit container, as float32: a float32
# dtype marked by its metadata, so that it stays float32 for NumPy (``TF32 == float32``) but the core can tell it
# apart (:func:`is_tf32`, :func:`name` says "tfloat32").  Values written into a tf32 tile by an engine are rounded
# to its 10-bit mantissa (:func:`nkisim.core.execute.cast`), and TensorE rounds tf32 operands before multiplying
# (ops.tensor_engine): a tf32 matmul has tf32 accuracy, at the BF16/FP16 rate (perf/model.py).
TF32 = np.dtype(np.float32, metadata={"nki_dtype": "tfloat32"})
tfloat32 = TF32
int8, int16, int32 = np.int8, np.int16, np.int32
uint8, uint16, uint32 = np.uint8, np.uint16, np.uint32
bool_ = np.bool_

_LOW_PRECISION = {np.dtype(bfloat16), np.dtype(float8_e4m3), np.dtype(float8_e5m2)}
SUPPORTED = {
    np.dtype(t)
    for t in (float32, float16, bfloat16, float8_e4m3, float8_e5m2, int8, int16, int32, uint8, uint16, uint32,
              bool_, ml_dtypes.float8_e4m3fn)
}
_LOW_PRECISION.add(np.dtype(ml_dtypes.float8_e4m3fn))
F32 = np.dtype(np.float32)
_FLOAT_WIDENING = {
    frozenset({np.dtype(float16), np.dtype(bfloat16)}): F32,
    frozenset({np.dtype(float8_e4m3), np.dtype(float8_e5m2)}): np.dtype(bfloat16),
}
_PY_SCALAR = {bool: np.dtype(np.uint8), int: np.dtype(np.int32), float: F32}


_TO_DTYPE: dict = {}


def to_dtype(dt) -> np.dtype:
    """Any dtype spelling (nl.float16, np.float16, 'float16', ml_dtypes types) -> storage np.dtype."""
    if dt is TF32 or (dt.__class__ is str and dt == "tfloat32"):
        # before the cache: TF32 == float32 and hashes alike, so a dict lookup would lose the marker.  Only a str is
        # compared with the name: np.dtype == str parses the string as a dtype and fails, ~2 us per allocation
        return TF32
    try:
        hit = _TO_DTYPE.get(dt)
    except TypeError:
        hit = None
    if hit is not None:
        return hit
    d = _to_dtype(dt)
    if d not in _LOW_PRECISION and np.dtype(dt) not in _LOW_PRECISION:
        _TO_DTYPE[dt] = d  # low-precision results depend on NKI_PRECISE_FP: never cached
    return d


def _to_dtype(dt) -> np.dtype:
    try:
        d = np.dtype(dt)
    except TypeError as exc:
        raise TypeError(f"{dt!r} is not a data type NKI supports") from exc
    if d == np.float64:
        d = F32  # numpy's default float: NKI has no fp64, kernels mean fp32
    elif d == np.int64:
        d = np.dtype(np.int32)
    if d not in SUPPORTED:
        raise TypeError(f"data type {d} is not supported by NKI")
    if d.isnative and d.metadata is None:  # a marked dtype (TF32) keeps its marker
        # the type's own descriptor, not an equal copy (an unpickled array's dtype, a '<f4' spelling): to_dtype's
        # cache keeps the first equal key it meets, so a copy returned here would be what every later float32 of
        # the process gets, and the identity checks downstream (aps.rebuild: `arr.dtype is dt`) would fail and
        # copy whole outputs (205 MB for a batch-4 224x224 convolution)
        d = np.dtype(d.type)
    if d in _LOW_PRECISION and not config.precise_fp():
        return F32
    return d


def is_float(d: np.dtype) -> bool:
    return d.kind == "f" or d in _LOW_PRECISION


def _float_rank(d: np.dtype) -> int:
    return d.itemsize


def promote(a, b) -> np.dtype:
    """NKI type promotion of two operand dtypes (python scalars are weakly typed as int32/fp32/uint8)."""
    da = _PY_SCALAR.get(type(a)) if not isinstance(a, np.dtype) else a
    db = _PY_SCALAR.get(type(b)) if not isinstance(b, np.dtype) else b
    if da is None:
        da = to_dtype(a)
    if db is None:
        db = to_dtype(b)
    if da == db:
        return da
    fa, fb = is_float(da), is_float(db)
    if fa and not fb:
        return da
    if fb and not fa:
        return db
    if fa and fb:
        widened = _FLOAT_WIDENING.get(frozenset({da, db}))
        if widened is not None:
            return widened
        return da if _float_rank(da) >= _float_rank(db) else db
    # integers
    if da == np.bool_:
        return db
    if db == np.bool_:
        return da
    sa, sb = da.kind == "i", db.kind == "i"
    if sa == sb:
        return da if da.itemsize >= db.itemsize else db
    signed, unsigned = (da, db) if sa else (db, da)
    if signed.itemsize > unsigned.itemsize:
        return signed
    wider = {1: np.dtype(np.int16), 2: np.dtype(np.int32)}.get(unsigned.itemsize)
    return wider if wider is not None else F32


def dtype_of_value(v) -> np.dtype:
    """dtype of a python scalar or numpy scalar operand."""
    if isinstance(v, (bool, int, float)):
        return _PY_SCALAR[type(v)]
    return to_dtype(np.asarray(v).dtype)


def poison_value(d: np.dtype):
    """Fill value of fresh allocations: NaN for floats, 4 for integers (as AWS's simulator does)."""
    if is_float(d):
        return np.nan
    if d == np.bool_:
        return True
    return 4


_NAMES: dict = {}
# id(object) -> (the object, its name): a dtype's hash is NumPy's PyArray_DescrHash (a front end's dtype object's a
# Python __hash__) and an id's an int's; the few objects a run names (arrays share their dtype objects) are held,
# so an id stays its object's.  A name is a function of the object (its kind and metadata never change).
_BY_ID: dict = {}


def name(d: np.dtype) -> str:
    """dtype name, cached (np.dtype.name is slow and sits on the per-instruction path); "tfloat32" for :data:`TF32`
    (equal to float32 for NumPy, so it shares float32's cache entry and is told apart by its metadata)."""
    known = _BY_ID.get(id(d))
    if known is not None and known[0] is d:
        return known[1]
    n = _NAMES.get(d)
    if n is None:
        n = _NAMES[d] = np.dtype(d).name
    if n == "float32" and d is not F32 and is_tf32(d):  # plain float32 arrays share the canonical dtype object
        n = "tfloat32"
    if len(_BY_ID) >= 256:  # dtype objects made on the fly (np.dtype(...) per call) must not pile up
        _BY_ID.clear()
    _BY_ID[id(d)] = (d, n)
    return n


def is_tf32(d: np.dtype) -> bool:
    """Whether ``d`` is :data:`TF32` (float32 storage marked as tfloat32)."""
    md = d.metadata
    return md is not None and md.get("nki_dtype") == "tfloat32"


def round_tf32(values: np.ndarray) -> np.ndarray:
    """fp32 values rounded to tf32's 10-bit mantissa, round-to-nearest-even ("round-nearest-even for all internal
    rounding operations when casting from FP32 to a reduced precision data type (FP16, BF16, FP8, TF32)",
    aws-neuron-sdk archive/nxd-training/torch-neuron-envvars.rst, NEURON_RT_STOCHASTIC_ROUNDING_EN off by
    default); NaN and Inf stay as they are.  Returned as :data:`TF32`."""
    f = np.ascontiguousarray(values, dtype=np.float32)
    u = f.view(np.uint32)
    special = (u & 0x7F800000) == 0x7F800000
    r = ((u + (np.uint32(0x0FFF) + ((u >> np.uint32(13)) & np.uint32(1)))) & np.uint32(0xFFFFE000)).astype(np.uint32)
    r = np.where(special, u, r).astype(np.uint32)
    return r.view(np.float32).astype(TF32, copy=False).reshape(f.shape)
