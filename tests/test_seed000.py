# STAFF-ONLY: checks the seed-000 calibration kernels (complete solutions); excluded from the student release.
"""Seed 000's depthwise conv1d kernels (AWS conv1d_depthwise_default and Autocomp's steps 1-6) against an
independent float64 NumPy reference, and their instruction counts.

Every step runs in full mode on a reduced shape (2 images, 256 channels = 2 channel tiles, width 320, so step 4's
512-column PSUM blocks are exercised with width 1024 in a separate case); step 0 (the baseline, whose
instruction stream steps 1-2 share) and step 5 also run on the seed's full shape (N=8, C=512, W=2048, K=3) in full
mode (``slow``: ~130k instructions each).
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from nkisim.calibration.corpus import seed000
from nkisim.core.runtime import run_kernel


def conv1d_float64(img: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Depthwise 1-D cross-correlation, K // 2 zeros of padding on both sides, output width = input width."""
    n, c, _, w = img.shape
    k = filters.shape[-1]
    pad = k // 2
    x = np.zeros((n, c, w + 2 * pad))
    x[:, :, pad:pad + w] = img[:, :, 0, :]
    f = filters[:, 0, 0, :].astype(np.float64)
    out = np.zeros((n, c, w))
    for j in range(k):
        out += x[:, :, j:j + w] * f[None, :, j, None]
    return out[:, :, None, :]


def inputs(n: int, c: int, w: int, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng([0, n, c, w, k])
    return (rng.uniform(-1, 1, (n, c, 1, w)).astype(np.float32), rng.uniform(-1, 1, (c, 1, 1, k)).astype(np.float32))


def run(step: int, img: np.ndarray, filters: np.ndarray, mode: str = "full"):
    return run_kernel(seed000.STEPS[step], (img, filters), mode=mode, target="trn1")


def check(step: int, img: np.ndarray, filters: np.ndarray) -> None:
    r = run(step, img, filters)
    out = r.outputs[0] if isinstance(r.outputs, (list, tuple)) else r.outputs
    np.testing.assert_allclose(np.asarray(out, dtype=np.float64), conv1d_float64(img, filters), rtol=1e-5, atol=1e-5)


def test_reference_is_a_convolution():
    """The reference itself, against np.convolve (flipped filter = cross-correlation), one channel at a time."""
    img, filters = inputs(2, 3, 17)
    ref = conv1d_float64(img, filters)
    for n in range(2):
        for c in range(3):
            want = np.convolve(img[n, c, 0].astype(np.float64), filters[c, 0, 0, ::-1].astype(np.float64), "same")
            np.testing.assert_allclose(ref[n, c, 0], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("step", range(7))
def test_step_matches_reference_small(step):
    img, filters = inputs(2, 256, 320)
    check(step, img, filters)


def test_step4_several_psum_blocks():
    img, filters = inputs(1, 128, 1024)
    check(4, img, filters)


@pytest.mark.parametrize("step", range(7))
def test_instruction_counts(step):
    """One tensor_tensor and one tensor_reduce per output column and channel tile (65,536 each at the seed's
    shape): what the source says.  (The hardware profile of steps 5/6 shows fewer: compiler grouping, not
    modelled.)"""
    n, c, w = 2, 256, 128
    img, filters = inputs(n, c, w)
    ops = Counter(i.op for i in run(step, img, filters, mode="timing").trace)
    cols = n * (c // 128) * w
    assert ops["tensor_tensor"] == cols and ops["tensor_reduce"] == cols


@pytest.mark.slow
@pytest.mark.parametrize("step", (0, 5))
def test_full_seed_shape(step):
    img, filters = inputs(8, 512, 2048)
    check(step, img, filters)


def test_report_script_prints_counts(capsys):
    from nkisim.calibration.corpus import seed000_report

    assert seed000_report.main(["--steps", "0,6", "--shape", "1,128,64"]) == 0
    out = capsys.readouterr().out
    assert "step 0: nkisim" in out and "step 6: nkisim" in out
    assert len(re.findall(r"tensor_tensor\s+64 instrs", out)) == 2


def test_calibration_rows_are_validation_only():
    """measurements.tsv's seed-000 rows: one per step, trn1, measured values of the seed, never fitted."""
    from nkisim.calibrate import _kernel
    from nkisim.calibration.rows import load_rows

    rows = {r.id: r for r in load_rows() if r.id.startswith("seed000-conv1d-")}
    want = {"baseline": 8007.0, "step1": 8007.0, "step2": 8010.0, "step3": 7934.0, "step4": 5602.0,
            "step5": 4955.0, "step6": 461.0}
    assert sorted(rows) == sorted(f"seed000-conv1d-{k}" for k in want)
    for k, us in want.items():
        r = rows[f"seed000-conv1d-{k}"]
        assert (r.role, r.target, r.metric, r.measured_us) == ("validation", "trn1", "nc_latency", us)
        step = 0 if k == "baseline" else int(k[4:])
        assert _kernel(r) is seed000.STEPS[step]
