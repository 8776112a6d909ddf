"""Grading security of timed calls made ahead of their tests (docs/grading-security.md, "Correctness calls replayed
together"): a timed test earns nothing unless the correctness tests it requires passed, however early the grader
made its call -- alone, in a group beside the correctness calls (their products shared), or speculatively, before
their outcome was known.

``tests/hostile_timed/batch_probe_nki`` is the staff conv for the first image only: right and fast for a batch of
one (the timed shape), wrong for the batch-2 correctness calls. Graded with and without product sharing: both
correctness tests fail and the timed test does not run, 0 points; with the requirement dropped from the rubric the
same timed call earns its points, so the requirement alone is what denies them."""

from __future__ import annotations

from pathlib import Path

import pytest
from grader_helpers import (
    CONV16,
    FIXED_THRESHOLDS,
    GROUP_IDS,
    TESTS,
    check_reports,
    conv_group_tests,
    conv_rubric,
    conv_test_toml,
)

from grader.pipeline import grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric

PROBE = TESTS / "hostile_timed" / "batch_probe_nki"


def _rubric(tmp_path: Path, requires: bool) -> Path:
    """Two batch-2 correctness tests (no bias, bias) and a batch-1 timed test with easy fixed targets, which requires
    them or not."""
    timed = {**CONV16, "batch": 1, "pool": 1, "bias": "random"}
    return conv_rubric(tmp_path / "rubric.toml", conv_group_tests((60, 60)),
                       conv_test_toml("conv.speed", "conv latency", [timed], kind="performance", points=2,
                                      requires=GROUP_IDS[:2] if requires else (), thresholds=FIXED_THRESHOLDS))


@pytest.mark.slow
@pytest.mark.parametrize(("share", "workers"), [("1", 1), ("1", 2), ("0", 1)],
                         ids=["grouped", "grouped-ahead", "alone"])
def test_a_timed_call_of_a_kernel_that_fails_its_requirements_earns_nothing(share, workers, tmp_path, monkeypatch):
    monkeypatch.setenv("GRADER_SHARE_PRODUCTS", share)
    rubric = _rubric(tmp_path, requires=True)
    out = tmp_path / "out"
    config = GradeConfig(rubric_path=str(rubric), backend="nkisim", timeout_scale=1.0, workers=workers)
    record = grade_submission(PROBE, out, config)
    assert record.status == "graded", record.error
    check_reports(out, load_rubric(str(rubric)).total_points)
    got = {t.id: t.status for t in record.tests}
    assert got == {"conv.plain": "failed", "conv.bias": "failed", "conv.speed": "skipped"}, \
        [(t.id, t.status, t.message) for t in record.tests]
    assert record.score == 0
    if share == "1":  # the timed call was made ahead, in a group, and its outcome left unused
        assert record.timings["share:speculative"] >= 1 and record.timings["share:unused"] >= 1, record.timings


@pytest.mark.slow
def test_the_timed_call_itself_would_earn_its_points(tmp_path, monkeypatch):
    """The control: without the requirement the probe's timed call passes its check and earns full credit."""
    monkeypatch.setenv("GRADER_SHARE_PRODUCTS", "1")
    rubric = _rubric(tmp_path, requires=False)
    record = grade_submission(PROBE, tmp_path / "out", GradeConfig(rubric_path=str(rubric), backend="nkisim",
                                                                   timeout_scale=1.0))
    got = {t.id: t.status for t in record.tests}
    assert got == {"conv.plain": "failed", "conv.bias": "failed", "conv.speed": "passed"}, \
        [(t.id, t.status, t.message) for t in record.tests]
    assert record.score == 2
