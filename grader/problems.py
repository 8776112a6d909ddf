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
    # X and W come from the case's stream, bias from a stream of its own, so that cases differing only in
    # bias/pooling share X and W (and the parent can share their float64 convolution).
    x = rng.random(x_shape, dtype=np.float32).astype(dtype, copy=False)
    w = rng.random(w_shape, dtype=np.float32).astype(dtype, copy=False)
    rng = np.random.default_rng(rng.integers(0, 2**63))
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


def conv2d_float64(x: np.ndarray, w: np.ndarray, chunk_rows: int = 32) -> np.ndarray:
    """Valid cross-correlation (PyTorch conv2d, stride 1, no padding) in float64.

    im2col over bands of ``chunk_rows`` output rows: one (Cout x Cin*K*K) @ (Cin*K*K x rows*Wo) matmul per band
    keeps BLAS efficient (K = 2304 for the course shapes) while the column buffer stays ~100 MB.
    """
    b, cin, h, wd = x.shape
    cout, _, k, _ = w.shape
    ho, wo = h - k + 1, wd - k + 1
    w2 = np.ascontiguousarray(w.astype(np.float64).transpose(0, 2, 3, 1).reshape(cout, k * k * cin))
    out = np.empty((b, cout, ho, wo), dtype=np.float64)
    # one column buffer and one product buffer for every band (fresh ~100 MB arrays per band cost page faults:
    # 15-20% of the CPU time on the course shapes); each band uses a contiguous prefix of them
    band = max(1, min(chunk_rows, ho))
    col_buf = np.empty(k * k * cin * band * wo, dtype=np.float64)
    prod_buf = np.empty(cout * band * wo, dtype=np.float64)
    for n in range(b):
        xn = x[n].astype(np.float64)
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
    return INVOCATIONS[problem](case, np.random.default_rng(seed))


def reference_output(problem: str, inv: Invocation) -> np.ndarray:
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
