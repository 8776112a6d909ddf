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
# tfloat32 is stored as float32 (its 10-bit mantissa only matters inside TensorE's multipliers).
tfloat32 = np.float32
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


def name(d: np.dtype) -> str:
    """dtype name, cached (np.dtype.name is slow and sits on the per-instruction path)."""
    n = _NAMES.get(d)
    if n is None:
        n = _NAMES[d] = np.dtype(d).name
    return n
