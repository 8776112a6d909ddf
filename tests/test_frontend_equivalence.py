"""One core, two front ends: the course's part 1 vector adds written in the legacy API (the legacy edition's starter
editions/legacy/part1/kernels.py, and the calibration kernels with their knobs) and in the current nki API (the
default starter part1/kernels.py; tests/kernels/vector_add_nki.py with the knobs as arguments) compute the same
bits, emit the same instructions on the same engines and have the same modelled latency (within 1%).  The staff
transpose and conv twins are in tests/test_reference_nki_twins.py (not released)."""

from __future__ import annotations

import numpy as np
import pytest
from nki_equivalence import REPO, compare, load_file

from nkisim.calibration import load_kernels

NKI = load_file(REPO / "tests" / "kernels" / "vector_add_nki.py", "nkisim_test_vector_add_nki")
PART1_LEGACY = load_file(REPO / "editions" / "legacy" / "part1" / "kernels.py", "nkisim_test_part1_legacy_kernels")
PART1 = load_file(REPO / "part1" / "kernels.py", "nkisim_test_part1_kernels")
CAL = load_kernels()


def _vectors(n, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random(n).astype(dtype), rng.random(n).astype(dtype)


@pytest.mark.parametrize("target", ["trn2", "trn1"])
@pytest.mark.parametrize("name,n", [("vector_add_naive", 128), ("vector_add_tiled", 2048),
                                    ("vector_add_stream", 25600)])
def test_course_starters_equal_in_both_apis(name, n, target):
    """The two editions' starters as distributed (ROW_CHUNK=1, FREE_DIM=2)."""
    r = compare(getattr(PART1_LEGACY, name), getattr(PART1, name), _vectors(n), target=target)
    assert r["values_equal"]
    assert r["ops"][0] == r["ops"][1]
    assert abs(r["ratio"] - 1) < 0.01, r


@pytest.mark.parametrize("knob,value", [("ROW_CHUNK", 128), ("ROW_CHUNK", 64), ("FREE_DIM", 200), ("FREE_DIM", 100)])
def test_course_knobs_equal_in_both_apis(knob, value):
    """The knobs students turn (ROW_CHUNK, FREE_DIM), through the calibration kernels' legacy spelling."""
    legacy = CAL.vector_add_tiled_2025 if knob == "ROW_CHUNK" else CAL.vector_add_stream_2025
    current = NKI.vector_add_tiled if knob == "ROW_CHUNK" else NKI.vector_add_stream
    a, b = _vectors(25600, np.float16)
    r = compare(legacy, current, (a, b), {knob: value})
    assert r["values_equal"]
    assert r["ops"][0] == r["ops"][1]
    assert abs(r["ratio"] - 1) < 0.01, r
