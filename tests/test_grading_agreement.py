# STAFF-ONLY: runs the calibration corpus (complete solutions); excluded from the student release.
"""The grader's nkisim credit against the credit the hardware gave, on the corpus's hardware rows (issue 9:
"performance credit equal to the hardware's for >= 90% of kernels")."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))

import grading_agreement as ga  # noqa: E402

pytestmark = pytest.mark.slow  # make test-fast leaves it out: see docs/maintainers.md


REF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "grader", "reference")


def test_tier_credit_follows_the_rubric_tiers():
    assert ga.tier_credit(100.0, 120.0, 100.0, 0.9) == 1.0
    assert ga.tier_credit(100.1, 120.0, 100.0, 0.9) == 0.9
    assert ga.tier_credit(120.0, 120.0, 100.0, 0.9) == 0.9
    assert ga.tier_credit(120.1, 120.0, 100.0, 0.9) == 0.0


def test_graded_configs_are_the_rubric_performance_cases():
    graded = ga.graded_conv_configs()
    assert ("float32", 224, 1) in graded and ("float16", 32, 2) in graded
    assert all(h in (224, 32) for _, h, _ in graded)


@pytest.mark.skipif(not os.path.isdir(REF), reason="staff reference absent (student release)")
def test_nkisim_credit_matches_the_hardware_on_our_rows():
    rows = ga.agreement_rows("trn2")
    assert len(rows) >= 10
    agree = sum(r.agrees for r in rows)
    # seed 004's kernel is the issue's clearest case: full credit on hardware in every configuration
    assert all(r.agrees for r in rows if r.kernel == "seed004-conv"), [r for r in rows if not r.agrees]
    assert agree / len(rows) >= 0.9, [r for r in rows if not r.agrees]
