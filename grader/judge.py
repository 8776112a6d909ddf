"""Compare a kernel's output with the parent's reference: shape, dtype, finiteness, then np.allclose."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Verdict:
    passed: bool
    message: str
    max_abs_error: float | None = None
    mismatches: int | None = None


def judge_output(
    outputs: list[np.ndarray],
    expected: np.ndarray,
    expected_dtype: np.dtype,
    tolerances: dict[str, tuple[float, float]],
) -> Verdict:
    if not outputs:
        return Verdict(False, "the kernel returned no output tensor")
    if len(outputs) > 1:
        return Verdict(False, f"the kernel returned {len(outputs)} tensors; expected exactly one")
    out = outputs[0]
    if out.shape != expected.shape:
        return Verdict(False, f"wrong output shape: expected {expected.shape}, got {out.shape}")
    if out.dtype != expected_dtype:
        return Verdict(False, f"wrong output dtype: expected {expected_dtype}, got {out.dtype}")
    if out.dtype.kind == "f":
        n_nan = int(np.isnan(out).sum())
        if n_nan:
            return Verdict(False, f"output contains {n_nan} NaN value(s)", mismatches=n_nan)
        n_inf = int(np.isinf(out).sum())
        if n_inf and not np.isinf(expected).any():
            return Verdict(False, f"output contains {n_inf} infinite value(s)", mismatches=n_inf)
    rtol, atol = tolerances.get(str(expected_dtype), (1e-5, 1e-8))
    got = out.astype(np.float64)
    # np.isclose semantics (|got - expected| <= atol + rtol * |expected|), computed in place: outputs reach
    # 50 M values and this runs once per test.
    diff = np.subtract(got, expected)
    np.abs(diff, out=diff)
    tol = np.abs(expected)
    tol *= rtol
    tol += atol
    far = diff > tol
    if np.isinf(expected).any():
        far &= ~(np.isinf(expected) & (got == expected))
    max_err = float(diff.max()) if diff.size else 0.0
    bad = int(np.count_nonzero(far))
    del tol
    if bad:
        first = tuple(int(i) for i in np.argwhere(far)[0])
        return Verdict(
            False,
            f"{bad} of {far.size} values differ from the reference (rtol={rtol:g}, atol={atol:g}); "
            f"max abs error {max_err:.4g}; first at index {first}: got {got[first]:.6g}, "
            f"expected {expected[first]:.6g}",
            max_err,
            bad,
        )
    return Verdict(True, f"matches the reference (max abs error {max_err:.3g})", max_err, 0)
