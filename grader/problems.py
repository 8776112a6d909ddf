"""Inputs and NumPy references for the graded problems; runs only in the grader's (trusted) process.

The parent generates every input from a seeded generator and computes the expected output itself, in float64,
independently of nkisim: a kernel is judged against arithmetic it cannot influence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import numpy as np

DTYPES = {"float32": np.float32, "float16": np.float16}


@dataclass
class Invocation:
    """One kernel call: positional array arguments, keyword constants, and the expected output's shape/dtype."""

    args: list[np.ndarray]
    kwargs: dict[str, Any]
    out_shape: tuple[int, ...]
    out_dtype: np.dtype
    flops: float  # useful floating-point operations (2 per multiply-add), for MFU


def case_seed(seed: int, test_id: str, case_index: int) -> int:
    """Independent, reproducible stream per (seed, test, case)."""
    digest = hashlib.sha256(f"{seed}|{test_id}|{case_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _dtype(case: dict[str, Any]) -> type:
    name = case.get("dtype", "float32")
    if name not in DTYPES:
        raise ValueError(f"unsupported dtype {name!r} in rubric case {case}; use one of {sorted(DTYPES)}")
    return DTYPES[name]


# ---------------------------------------------------------------------------------------------- transpose ----


def transpose_invocation(case: dict[str, Any], rng: np.random.Generator) -> Invocation:
    rows, cols = (int(v) for v in case["shape"])
    a = rng.random((rows, cols), dtype=np.float32).astype(_dtype(case))
    return Invocation([a], {}, (cols, rows), a.dtype, 0.0)


def transpose_reference(inv: Invocation) -> np.ndarray:
    return np.ascontiguousarray(inv.args[0].T)


# ------------------------------------------------------------------------------------------------- conv2d ----


def conv2d_shapes(case: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    b, cin, cout = int(case["batch"]), int(case["in_channels"]), int(case["out_channels"])
    h, w, k, pool = int(case["height"]), int(case["width"]), int(case["kernel"]), int(case.get("pool", 1))
    out = (b, cout, (h - k + 1) // pool, (w - k + 1) // pool)
    return (b, cin, h, w), (cout, cin, k, k), out


def conv2d_invocation(case: dict[str, Any], rng: np.random.Generator) -> Invocation:
    dtype = _dtype(case)
    x_shape, w_shape, out_shape = conv2d_shapes(case)
    # U(0, 1) inputs like the course harness (np.random.rand), drawn in float32 then cast to the test dtype.
    x = rng.random(x_shape, dtype=np.float32).astype(dtype)
    w = rng.random(w_shape, dtype=np.float32).astype(dtype)
    bias_kind = case.get("bias", "zeros")
    if bias_kind == "zeros":
        bias = np.zeros(w_shape[0], dtype=dtype)
    elif bias_kind == "random":
        bias = rng.random(w_shape[0], dtype=np.float32).astype(dtype)
    else:
        raise ValueError(f"bias must be 'zeros' or 'random', got {bias_kind!r}")
    b, cin, h, wd = x_shape
    cout, _, k, _ = w_shape
    flops = 2.0 * b * cout * cin * k * k * (h - k + 1) * (wd - k + 1)
    return Invocation([x, w, bias], {"pool_size": int(case.get("pool", 1))}, out_shape, np.dtype(dtype), flops)


def conv2d_float64(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid cross-correlation (PyTorch conv2d, stride 1, no padding) in float64, one matmul per filter tap."""
    b, cin, h, wd = x.shape
    cout, _, k, _ = w.shape
    ho, wo = h - k + 1, wd - k + 1
    x64 = x.astype(np.float64)
    w64 = w.astype(np.float64)
    out = np.zeros((b, cout, ho * wo), dtype=np.float64)
    for n in range(b):
        for i in range(k):
            for j in range(k):
                patch = np.ascontiguousarray(x64[n, :, i : i + ho, j : j + wo]).reshape(cin, ho * wo)
                out[n] += w64[:, :, i, j] @ patch
    return out.reshape(b, cout, ho, wo)


def maxpool_float64(y: np.ndarray, pool: int) -> np.ndarray:
    """pool x pool max-pool with stride pool; a trailing odd row/column is dropped (PyTorch floor mode)."""
    if pool == 1:
        return y
    b, c, h, w = y.shape
    hp, wp = h // pool, w // pool
    return y[:, :, : hp * pool, : wp * pool].reshape(b, c, hp, pool, wp, pool).max(axis=(3, 5))


def conv2d_reference(inv: Invocation) -> np.ndarray:
    x, w, bias = inv.args
    y = conv2d_float64(x, w) + bias.astype(np.float64)[None, :, None, None]
    return maxpool_float64(y, inv.kwargs["pool_size"])


INVOCATIONS = {"transpose": transpose_invocation, "conv2d": conv2d_invocation}
REFERENCES = {"transpose": transpose_reference, "conv2d": conv2d_reference}


def make_invocation(problem: str, case: dict[str, Any], seed: int) -> Invocation:
    return INVOCATIONS[problem](case, np.random.default_rng(seed))


def reference_output(problem: str, inv: Invocation) -> np.ndarray:
    return REFERENCES[problem](inv)


def io_bytes(inv: Invocation) -> int:
    """Bytes a correct kernel must move at least: every input read once and the output written once."""
    out_bytes = int(np.prod(inv.out_shape)) * inv.out_dtype.itemsize
    return sum(a.nbytes for a in inv.args) + out_bytes
