"""Inputs and NumPy references for the graded problems; runs only in the grader's (trusted) process.

The parent generates every input from a seeded generator and computes the expected output itself, independently
of nkisim, in the precision the tolerances call for (reference_precision): a kernel is judged against arithmetic it
cannot influence.
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


def submission_seed(salt: int, content_hash: str) -> int:
    """Default input seed: derived from the submission's content, so no kernel can be tuned to known inputs
    (changing the file changes the inputs) while a regrade of the same files is bit-for-bit reproducible."""
    digest = hashlib.sha256(f"{salt}|{content_hash}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


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


def transpose_invocation(case: dict[str, Any], seed: int) -> Invocation:
    rows, cols = (int(v) for v in case["shape"])
    a = np.random.default_rng(seed).random((rows, cols), dtype=np.float32).astype(_dtype(case))
    return Invocation([a], {}, (cols, rows), a.dtype, 0.0)


def transpose_reference(inv: Invocation) -> np.ndarray:
    return np.ascontiguousarray(inv.args[0].T)


# ------------------------------------------------------------------------------------------------- conv2d ----


def conv2d_shapes(case: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    b, cin, cout = int(case["batch"]), int(case["in_channels"]), int(case["out_channels"])
    h, w, k, pool = int(case["height"]), int(case["width"]), int(case["kernel"]), int(case.get("pool", 1))
    out = (b, cout, (h - k + 1) // pool, (w - k + 1) // pool)
    return (b, cin, h, w), (cout, cin, k, k), out


def conv2d_data(case: dict[str, Any], seed: int) -> tuple[np.ndarray, np.ndarray, int]:
    """X, W and the seed of the bias stream of a case.

    U(0, 1) inputs like the course harness (np.random.rand), drawn in float32 then cast to the test dtype; the
    references' precision rule (reference_precision) relies on them being non-negative.  X and W come from the
    case's stream, the bias from a stream of its own, so that cases differing only in bias/pooling share X and W
    (and the parent shares their convolution)."""
    rng = np.random.default_rng(seed)
    dtype = _dtype(case)
    x_shape, w_shape, _ = conv2d_shapes(case)
    x = rng.random(x_shape, dtype=np.float32).astype(dtype, copy=False)
    w = rng.random(w_shape, dtype=np.float32).astype(dtype, copy=False)
    return x, w, int(rng.integers(0, 2**63))


def conv2d_with_bias(case: dict[str, Any], x: np.ndarray, w: np.ndarray, bias_seed: int) -> Invocation:
    """The invocation of ``case`` on X and W (from conv2d_data), with the case's bias."""
    dtype = _dtype(case)
    _, w_shape, out_shape = conv2d_shapes(case)
    bias_kind = case.get("bias", "zeros")
    if bias_kind == "zeros":
        bias = np.zeros(w_shape[0], dtype=dtype)
    elif bias_kind == "random":
        bias = np.random.default_rng(bias_seed).random(w_shape[0], dtype=np.float32).astype(dtype)
    else:
        raise ValueError(f"bias must be 'zeros' or 'random', got {bias_kind!r}")
    b, cin, h, wd = x.shape
    cout, _, k, _ = w_shape
    flops = 2.0 * b * cout * cin * k * k * (h - k + 1) * (wd - k + 1)
    return Invocation([x, w, bias], {"pool_size": int(case.get("pool", 1))}, out_shape, np.dtype(dtype), flops)


def conv2d_invocation(case: dict[str, Any], seed: int) -> Invocation:
    return conv2d_with_bias(case, *conv2d_data(case, seed))


def conv2d_accumulate(x: np.ndarray, w: np.ndarray, dtype: type = np.float64, chunk_rows: int = 32) -> np.ndarray:
    """Valid cross-correlation (PyTorch conv2d, stride 1, no padding), accumulated in ``dtype``.

    im2col over bands of ``chunk_rows`` output rows: one (Cout x Cin*K*K) @ (Cin*K*K x rows*Wo) matmul per band
    keeps BLAS efficient (K = 2304 for the course shapes) while the column buffer stays ~100 MB.
    """
    b, cin, h, wd = x.shape
    cout, _, k, _ = w.shape
    ho, wo = h - k + 1, wd - k + 1
    w2 = np.ascontiguousarray(w.astype(dtype).transpose(0, 2, 3, 1).reshape(cout, k * k * cin))
    out = np.empty((b, cout, ho, wo), dtype=dtype)
    # one column buffer and one product buffer for every band (fresh ~100 MB arrays per band cost page faults:
    # 15-20% of the CPU time on the course shapes); each band uses a contiguous prefix of them
    band = max(1, min(chunk_rows, ho))
    col_buf = np.empty(k * k * cin * band * wo, dtype=dtype)
    prod_buf = np.empty(cout * band * wo, dtype=dtype)
    for n in range(b):
        xn = x[n].astype(dtype)
        for r0 in range(0, ho, chunk_rows):
            rows = min(chunk_rows, ho - r0)
            cols = col_buf[: k * k * cin * rows * wo].reshape(k, k, cin, rows, wo)
            for i in range(k):
                for j in range(k):
                    cols[i, j] = xn[:, r0 + i : r0 + i + rows, j : j + wo]
            prod = prod_buf[: cout * rows * wo].reshape(cout, rows * wo)
            np.matmul(w2, cols.reshape(k * k * cin, rows * wo), out=prod)
            out[n, :, r0 : r0 + rows, :] = prod.reshape(cout, rows, wo)
    return out


def conv2d_float64(x: np.ndarray, w: np.ndarray, chunk_rows: int = 32) -> np.ndarray:
    return conv2d_accumulate(x, w, np.float64, chunk_rows)


def maxpool(y: np.ndarray, pool: int) -> np.ndarray:
    """pool x pool max-pool with stride pool; a trailing odd row/column is dropped (PyTorch floor mode).

    The elementwise maximum of the pool*pool strided views: several times faster than a reduction over the window
    axes of a (b, c, h, pool, w, pool) view on the 224x224 outputs."""
    if pool == 1:
        return y
    hp, wp = y.shape[2] // pool, y.shape[3] // pool
    views = [y[:, :, i : hp * pool : pool, j : wp * pool : pool] for i in range(pool) for j in range(pool)]
    out = np.maximum(views[0], views[1]) if len(views) > 1 else views[0].copy()
    for v in views[2:]:
        np.maximum(out, v, out=out)
    return out


maxpool_float64 = maxpool


def conv2d_finish(conv: np.ndarray, bias: np.ndarray, pool: int) -> np.ndarray:
    """The expected output from the convolution: + bias (per output channel), then max-pool; in conv's dtype.

    Pooled first, then the bias added to the (pool^2 times smaller) result: the same values, since rounding is
    monotonic, max_i fl(x_i + b) = fl(max_i x_i + b)."""
    y = maxpool(conv, pool)
    return y + bias.astype(conv.dtype)[None, :, None, None] if bias.any() else y


def conv2d_reference(inv: Invocation, precision: str = "float64") -> np.ndarray:
    x, w, bias = inv.args
    return conv2d_finish(conv2d_accumulate(x, w, ACCUMULATORS[precision]), bias, inv.kwargs["pool_size"])


# ------------------------------------------------------------------------------------- reference precision ----
# The references are sums of products of non-negative inputs (U(0, 1), as the course harness draws them).  For
# such sums the computed value of n terms in a precision with unit roundoff u has a relative error of at most
# gamma_n = n u / (1 - n u), whatever the order of summation (Higham, "Accuracy and Stability of Numerical
# Algorithms", 2nd ed., section 3.1, bound (3.5) with sum |x_i y_i| = |sum x_i y_i| for non-negative terms).
# A float32 reference is used where that bound stays within PRECISION_SHARE of the output dtype's rtol: the
# float16 tests (rtol 1e-2: gamma_2305 = 1.4e-4 in float32).  Float32 outputs (rtol 1e-5) keep float64
# accumulation (gamma_2305 = 2.6e-13).  Products of float16 values are exact in float32 (11 + 11 < 24 bits).
ACCUMULATORS = {"float32": np.float32, "float64": np.float64}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
PRECISION_SHARE = 0.1
DEFAULT_TOLERANCE = (1e-5, 1e-8)  # np.allclose's defaults, for a dtype the rubric does not list


def accumulated_terms(problem: str, case: dict[str, Any]) -> int:
    """Terms summed per output value (0: the reference is an exact copy, e.g. a transpose)."""
    if problem == "conv2d":
        return int(case["in_channels"]) * int(case["kernel"]) ** 2 + 1  # + the bias
    return 0


def accumulation_error_bound(terms: int, precision: str) -> float:
    """gamma_n: the relative error bound of a sum of ``terms`` non-negative products in ``precision``."""
    nu = terms * UNIT_ROUNDOFF[precision]
    return nu / (1.0 - nu) if nu < 1 else float("inf")


def reference_precision(problem: str, case: dict[str, Any], tolerances: dict[str, tuple[float, float]]) -> str:
    """'exact', 'float32' or 'float64': the cheapest accumulation whose error bound is small next to the
    tolerance the output is judged with (see the comment above)."""
    terms = accumulated_terms(problem, case)
    if terms == 0:
        return "exact"
    rtol, _ = tolerances.get(str(case.get("dtype", "float32")), DEFAULT_TOLERANCE)
    if accumulation_error_bound(terms, "float32") <= PRECISION_SHARE * rtol:
        return "float32"
    return "float64"


INVOCATIONS = {"transpose": transpose_invocation, "conv2d": conv2d_invocation}
REFERENCES = {"transpose": transpose_reference, "conv2d": conv2d_reference}


def input_elements(problem: str, case: dict[str, Any]) -> int:
    """How large a case's inputs are (elements of every input array), known without generating them: the
    measure by which a call that hit a time or memory limit stops larger calls of the same kernel.  Elements, not
    bytes: the emulator's time follows the work, which a float16 copy of a float32 case does not halve."""
    if problem == "conv2d":
        x, w, _ = conv2d_shapes(case)
        return int(np.prod(x)) + int(np.prod(w)) + w[0]
    if problem == "transpose":
        return int(np.prod([int(v) for v in case["shape"]]))
    raise ValueError(f"unknown problem {problem!r}")


def make_invocation(problem: str, case: dict[str, Any], seed: int) -> Invocation:
    return INVOCATIONS[problem](case, seed)


def reference_output(problem: str, inv: Invocation, precision: str = "float64") -> np.ndarray:
    if problem == "conv2d":
        return conv2d_reference(inv, precision)
    return REFERENCES[problem](inv)


def hbm_traffic(trace: Any) -> tuple[int, int]:
    """(bytes read from HBM, bytes written to HBM) by the instructions of a trace (computed by the parent)."""
    read = written = 0
    for ins in trace.instrs:
        for opd in ins.srcs:
            if int(opd.region.buf) == 0:  # Buf.HBM
                read += opd.itemsize * opd.partitions * opd.free_elems
        for opd in ins.dsts:
            if int(opd.region.buf) == 0:
                written += opd.itemsize * opd.partitions * opd.free_elems
    return read, written


def io_bytes(inv: Invocation) -> int:
    """Bytes a correct kernel must move at least: every input read once and the output written once."""
    out_bytes = int(np.prod(inv.out_shape)) * inv.out_dtype.itemsize
    return sum(a.nbytes for a in inv.args) + out_bytes
