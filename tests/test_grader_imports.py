"""The one-time import check and the resource-limit marks of grader/pipeline.py.

A file that fails to import (exception, exit, hang, memory) fails every test needing it with one message and
without a single kernel call; a kernel call that times out or runs out of memory stops later calls of the same
function on inputs at least as large, while smaller ones still run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grader_helpers import FAST_RUBRIC, GOOD, check_reports

from grader.pipeline import grade_submission
from grader.records import GradeConfig
from grader.rubric import load_rubric

GOOD_SOURCE = (GOOD / "part1" / "kernels.py").read_text()
IMPORT_LIMIT = load_rubric(FAST_RUBRIC).limits.import_timeout_s


def _submission(tmp_path: Path, source: str) -> Path:
    sub = tmp_path / "sub"
    (sub / "part1").mkdir(parents=True)
    (sub / "part1" / "kernels.py").write_text(source)
    return sub


def _grade(tmp_path: Path, source: str, rubric: str = FAST_RUBRIC):
    out = tmp_path / "out"
    cfg = GradeConfig(rubric_path=rubric, timeout_scale=0.5)
    record = grade_submission(_submission(tmp_path, source), out, cfg)
    assert record.status == "graded", record.error
    check_reports(out, load_rubric(rubric).total_points)
    return record


FAILED_IMPORTS = {
    "hang": (
        "\nwhile True:\n    pass\n",
        "timeout",
        f"part1/kernels.py did not finish importing within {IMPORT_LIMIT:g} s",
    ),
    "exception": (
        "\nraise ValueError('bad configuration')\n",
        "error",
        "importing part1/kernels.py failed: ValueError: bad configuration",
    ),
    "exit": ("\nraise SystemExit(3)\n", "error", "part1/kernels.py called exit(3) while importing"),
    "memory": ("\nhog = bytearray(64 * 1024**3)\n", "error", "part1/kernels.py ran out of memory while importing"),
}


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k == "hang" else k  # waits out the limit
                                  for k in sorted(FAILED_IMPORTS)])
def test_a_failed_import_fails_every_test_at_once_with_one_message(kind, tmp_path):
    tail, status, message = FAILED_IMPORTS[kind]
    record = _grade(tmp_path, GOOD_SOURCE + tail)
    assert record.score == 0
    assert len(record.tests) == 2
    for t in record.tests:
        assert t.status == status, (t.id, t.status, t.message)
        assert t.message.startswith(message), t.message
        assert t.cases == [], "no kernel call may be made for a file that does not import"
    assert len({t.message for t in record.tests}) == 1
    assert "import:part1/kernels.py" in record.timings


def test_import_error_message_names_the_line(tmp_path):
    record = _grade(tmp_path, GOOD_SOURCE + "\n\nx = 1 / 0\n")
    line = len((GOOD_SOURCE + "\n\nx = 1 / 0\n").splitlines())
    msg = record.tests[0].message
    assert "ZeroDivisionError" in msg and f'File "part1/kernels.py", line {line}' in msg, msg


def test_the_static_screen_keeps_precedence_over_the_import_check(tmp_path):
    record = _grade(tmp_path, "import os\n" + GOOD_SOURCE + "\nwhile True:\n    pass\n")
    assert [t.status for t in record.tests] == ["rejected", "rejected"]
    assert "import:part1/kernels.py" not in record.timings  # a rejected file is never imported


def test_a_missing_function_is_found_by_the_import_check(tmp_path):
    record = _grade(tmp_path, GOOD_SOURCE.replace("def matrix_transpose(", "def matrix_transposed("))
    for t in record.tests:
        assert t.status == "error" and "defines no function 'matrix_transpose'" in t.message
        assert t.cases == []


def test_a_good_file_passes_the_import_check_and_its_tests(tmp_path):
    record = _grade(tmp_path, GOOD_SOURCE)
    assert record.score == 12 and record.timings["import:part1/kernels.py"] > 0


# ------------------------------------------------------------------------------------------- marks ----

MARKS_RUBRIC = """
[rubric]
title = "marks"
seed = 3

[limits]
address_space_mib = 2048
processes = 32
import_timeout_s = 10

[[test]]
id = "t.small"
name = "small first"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 1
timeout_s = 30
cases = [{ shape = [128, 128], dtype = "float32" }]

[[test]]
id = "t.big"
name = "big"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 1
timeout_s = 12
cases = [{ shape = [512, 256], dtype = "float32" }]

[[test]]
id = "t.big_too"
name = "as big, other shape"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 1
timeout_s = 12
cases = [{ shape = [128, 128], dtype = "float32" }, { shape = [256, 512], dtype = "float32" }]

[[test]]
id = "t.bigger"
name = "bigger, timed"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "performance"
problem = "transpose"
points = 1
timeout_s = 12
cases = [{ shape = [512, 512], dtype = "float32" }]
thresholds = { source = "fixed", optimized_us = 1000000.0 }

[[test]]
id = "t.small_after"
name = "smaller, after the failure"
part = 1
file = "part1/kernels.py"
function = "matrix_transpose"
kind = "correctness"
problem = "transpose"
points = 1
timeout_s = 30
cases = [{ shape = [256, 128], dtype = "float32" }]
"""

LIMIT_HIT = {
    "hang": ("        while True:\n            pass\n", "timeout", "timed out"),
    "hog": (
        "        hog = []\n        while True:\n            hog.append(bytearray(1024 * 1024 * 1024))\n",
        "error",
        "ran out of memory",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(LIMIT_HIT))
def test_a_call_that_hits_a_limit_stops_larger_calls_only(kind, tmp_path):
    body, status, why = LIMIT_HIT[kind]
    source = GOOD_SOURCE.replace(
        "    M, N = a_tensor.shape\n", "    M, N = a_tensor.shape\n    if M * N >= 512 * 256:\n" + body
    )
    assert source != GOOD_SOURCE
    rubric = tmp_path / "rubric.toml"
    rubric.write_text(MARKS_RUBRIC)
    record = _grade(tmp_path, source, str(rubric))
    by_id = {t.id: t for t in record.tests}
    assert by_id["t.small"].status == "passed"
    assert by_id["t.big"].status == status, by_id["t.big"].message
    # same size in another shape: its small first case still runs, the large second one does not
    too = by_id["t.big_too"]
    assert too.status == "skipped" and too.message == f"case 2/2: not run: matrix_transpose {why} in t.big"
    assert [c.verdict for c in too.cases] == ["passed", "not-run"]
    assert by_id["t.bigger"].status == "skipped"
    assert by_id["t.bigger"].message == f"not run: matrix_transpose {why} in t.big"
    assert by_id["t.small_after"].status == "passed", by_id["t.small_after"].message
    assert record.score == 2


def test_a_kernel_bound_to_an_spmd_grid_earns_nothing(tmp_path):
    """nkisim would time nl.nc programs on several cores in parallel: a grid must not buy a faster score."""
    source = GOOD_SOURCE + "\n\nmatrix_transpose = matrix_transpose[nl.nc(2)]\n"
    record = _grade(tmp_path, source)
    assert record.score == 0
    first, timed = record.tests
    assert first.status == "failed", (first.id, first.status, first.message)
    assert "SPMD grid [" in first.message and "one NeuronCore" in first.message, first.message
    assert timed.status == "skipped"
