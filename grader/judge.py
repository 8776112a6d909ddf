"""Compare a kernel's output with the parent's reference: shape, dtype, finiteness, then np.allclose."""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

CHUNK = 1 << 18  # values compared per slice
FAST_PASS = True  # a slice whose largest error is within its smallest tolerance passes whole (judge_output)
# what a ranked run's failure message says instead of the values (judge_output, reveal=False)
SECRET_NOTE = ("a ranked run's inputs are secret, so no value, position or count is shown: `python -m grader grade` "
               "on your own inputs shows them")


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str
    max_abs_error: float | None = None
    mismatches: int | None = None


@runtime_checkable
class Expected(Protocol):
    """An expected output the judge reads slice by slice, never whole: conv2d's max-pool and bias over its cached
    convolution (grader/problems/conv2d.py ``PooledConv``).  A whole 224x224 batch-4 expected output is 404 MB of
    float64 made afresh for each test from the shared convolution (the bias differs), then read once by the judge:
    making it slice by slice keeps the values in cache and allocates nothing large."""

    shape: tuple[int, ...]
    dtype: np.dtype

    def chunks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        """(flat offset, the next values in C order) in slices of about ``size`` values, in order and covering the
        output; a yielded array is valid only until the next one is asked for (it may be a reused buffer)."""
        ...

    def chunk_limit(self, size: int) -> int:
        """The most values one of :meth:`chunks` ``(size)`` holds."""
        ...

    def at(self, index: tuple[int, ...]) -> float:
        """The value at ``index``, exactly as :meth:`chunks` gives it."""
        ...

    def bounds(self, lo: int, size: int) -> tuple[float, float] | None:
        """The minimum and maximum (NaN when one of them is) of the slice of :meth:`chunks` at ``lo`` of ``size``
        values, exactly np.min's and np.max's of it, or None to have the judge compute them from the slice."""
        ...


class _Whole:
    """An expected output at hand as an array, in slices of CHUNK values (views, no copy)."""

    def __init__(self, expected: np.ndarray) -> None:
        self.array = expected
        self.shape, self.dtype = expected.shape, expected.dtype

    def chunks(self, size: int) -> Iterator[tuple[int, np.ndarray]]:
        flat = self.array.reshape(-1)
        for lo in range(0, flat.size, size):
            yield lo, flat[lo : lo + size]

    def chunk_limit(self, size: int) -> int:
        return min(size, self.array.size)

    def at(self, index: tuple[int, ...]) -> float:
        return float(self.array[index])

    def bounds(self, lo: int, size: int) -> tuple[float, float] | None:
        return None


def judge_output(
    outputs: list[np.ndarray],
    expected: np.ndarray | Expected,
    expected_dtype: np.dtype,
    tolerances: dict[str, tuple[float, float]],
    *,
    reveal: bool = True,
) -> Verdict:
    """The verdict on ``outputs``.  ``reveal=False`` (a ranked run: inputs from the class's secret seed, the same
    for every submission and every resubmission): the message names no value, index, count or error size, and
    ``max_abs_error`` is None.  Each of those is a channel from the secret inputs to the student -- the reference
    value at the first mismatch, and whatever the kernel encodes, on the device, into its own output there, into
    how many values it gets wrong, or into the size of an error small enough to pass -- and with a class seed what
    leaks adds up over resubmissions (docs/grading-security.md, L8).  A student's own run (per-submission seed:
    new inputs whenever a file changes) reveals them all."""
    if not outputs:
        return Verdict(False, "the kernel returned no output tensor")
    if len(outputs) > 1:
        return Verdict(False, f"the kernel returned {len(outputs)} tensors; expected exactly one")
    out = outputs[0]
    source = _Whole(expected) if isinstance(expected, np.ndarray) else expected
    if out.shape != tuple(source.shape):
        return Verdict(False, f"wrong output shape: expected {tuple(source.shape)}, got {out.shape}")
    if out.dtype != expected_dtype:
        return Verdict(False, f"wrong output dtype: expected {expected_dtype}, got {out.dtype}")
    rtol, atol = tolerances.get(str(expected_dtype), (1e-5, 1e-8))
    # np.isclose semantics (|got - expected| <= atol + rtol * |expected|), computed in float64 over slices of at
    # most CHUNK-ish values into buffers reused from slice to slice: outputs reach 50 M values, and slices keep the
    # temporaries in cache (about 3x faster than whole-array passes).  A NaN or an infinity the reference does not
    # have is "far" too (not (diff <= tol)), so they are counted in the same pass and named only when there are any;
    # a NaN in the reference matches nothing (np.allclose with equal_nan=False).  The reference's infinities are
    # looked for slice by slice too (a slice without any is judged by the comparison alone).
    got_flat = out.reshape(-1)
    n = source.chunk_limit(CHUNK)
    diff_buf, tol_buf = np.empty(n), np.empty(n)
    ok_buf, inf_buf = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
    max_err, bad, first, exp_has_inf = 0.0, 0, None, False
    bounded = FAST_PASS and rtol >= 0 and atol >= 0
    for lo, exp in source.chunks(CHUNK):
        k = exp.size
        got = got_flat[lo : lo + k]
        diff, tol, ok, inf = diff_buf[:k], tol_buf[:k], ok_buf[:k], inf_buf[:k]
        # got - exp in float64: the output converted first (exact), then a float64 subtraction -- the values of
        # np.subtract(got, exp, dtype=float64), which converts through a buffered loop at about twice the cost
        np.copyto(diff, got, casting="unsafe")
        with np.errstate(invalid="ignore"):  # inf - inf (an output's infinity where the reference has one)
            np.subtract(diff, exp, out=diff, dtype=np.float64)
        np.abs(diff, out=diff)
        if bounded and k:
            # The slice passes whole when its largest error is within the smallest tolerance any of its values can
            # have: atol + rtol * (a lower bound of |exp| from exp's extremes), computed in float64 as the
            # tolerances below are -- rounding is monotonic, so every value's own tolerance is at least that.  Three
            # reductions instead of the tolerances' five passes and the infinity check's two; the verdict, count and
            # maximum error are the same (a NaN error or a reference with a NaN or an infinity takes the full path:
            # np.max and np.min propagate NaN, and the extremes must be finite).
            # tests/test_grader_units.py::test_judge_slice_bound_gives_the_full_comparisons_verdict
            top = float(np.max(diff))
            # the reference's extremes: the Expected's own when it has them at hand (conv2d's are made once per
            # convolution, beside it: two passes fewer per slice), else from the slice
            known = source.bounds(lo, k)
            e_lo, e_hi = known if known is not None else (float(np.min(exp)), float(np.max(exp)))
            if math.isfinite(e_lo) and math.isfinite(e_hi):
                least = e_lo if e_lo >= 0 else (-e_hi if e_hi <= 0 else 0.0)
                if top <= least * rtol + atol:  # Python floats: IEEE float64, like the arrays' passes below
                    max_err = max(max_err, top)
                    continue
        np.abs(exp, out=tol, dtype=np.float64)
        tol *= rtol
        tol += atol
        np.less_equal(diff, tol, out=ok)
        np.isinf(exp, out=inf)
        if inf.any():
            exp_has_inf = True
            # np.isclose: an infinite reference value is matched by the same infinity only (its tolerance is
            # infinite too, so any finite output would pass the comparison above: |got - inf| <= inf)
            ok &= ~inf
            ok |= inf & (got == exp)
        if k:
            max_err = max(max_err, float(np.fmax.reduce(diff)))
        n_far = k - int(np.count_nonzero(ok))
        if n_far and first is None:
            first = lo + int(np.flatnonzero(~ok)[0])
        bad += n_far
    if bad and not reveal:
        return Verdict(False, f"values differ from the reference (rtol={rtol:g}, atol={atol:g}); {SECRET_NOTE}",
                       None, bad)
    if bad and out.dtype.kind == "f":
        n_nan = int(np.isnan(out).sum())
        if n_nan:
            return Verdict(False, f"output contains {n_nan} NaN value(s)", mismatches=n_nan)
        n_inf = int(np.isinf(out).sum())
        if n_inf and not exp_has_inf:
            return Verdict(False, f"output contains {n_inf} infinite value(s)", mismatches=n_inf)
    if bad:
        at = tuple(int(i) for i in np.unravel_index(first, out.shape))
        return Verdict(
            False,
            f"{bad} of {out.size} values differ from the reference (rtol={rtol:g}, atol={atol:g}); "
            f"max abs error {max_err:.4g}; first at index {at}: got {float(out[at]):.6g}, "
            f"expected {source.at(at):.6g}",
            max_err,
            bad,
        )
    if not reveal:
        return Verdict(True, "matches the reference", None, 0)
    return Verdict(True, f"matches the reference (max abs error {max_err:.3g})", max_err, 0)
