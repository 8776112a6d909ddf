"""A stand-in for ``neuron_dtypes``, the dtype helper package nki-library's tests import (AWS ships it with the
Neuron toolchain, not on PyPI).  Only what the tests call: ``static_cast``, ``is_float_type``, ``sizeinbytes`` and
``finfo``, over NumPy and ml_dtypes.  Lives in the conformance run's own environment (PYTHONPATH of
tools/nkilib_conformance.py), never in the course's.

``static_cast(array, dtype)`` converts element-wise as a C++ ``static_cast`` of each value does: float -> narrower
float rounds to nearest even (ml_dtypes' conversion), float -> integer truncates toward zero (NumPy's ``astype``).
The tests use it to round their random inputs and torch goldens to the kernel's dtype.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def _np_dtype(dtype) -> np.dtype:
    """NumPy dtype of any spelling the tests use: NumPy types, ml_dtypes types, NKI dtypes (names)."""
    name = getattr(dtype, "name", None) if not isinstance(dtype, (str, type)) else None
    try:
        return np.dtype(dtype if name is None else name)
    except TypeError:
        return np.dtype(str(dtype))


def static_cast(array, dtype) -> np.ndarray:
    if str(getattr(dtype, "name", dtype)).endswith("_x4"):
        raise TypeError(f"static_cast to the packed MX dtype {dtype} is not provided by this stand-in")
    d = _np_dtype(dtype)
    return np.asarray(array).astype(d)


def is_float_type(dtype) -> bool:
    d = _np_dtype(dtype)
    if d.kind == "f":
        return True
    try:
        ml_dtypes.finfo(d)
    except (TypeError, ValueError):
        return False
    return True


def sizeinbytes(dtype) -> int:
    return _np_dtype(dtype).itemsize


def finfo(dtype):
    return ml_dtypes.finfo(_np_dtype(dtype))


# The packed MX types (NeuronCore-v4): named for the tests' module-level tables; static_cast refuses them.
float8_e4m3fn_x4 = "float8_e4m3fn_x4"
float8_e5m2_x4 = "float8_e5m2_x4"
float4_e2m1fn_x4 = "float4_e2m1fn_x4"
