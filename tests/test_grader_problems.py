"""The problems package (grader/problems/): every problem answers the whole protocol, and a new problem is one
module plus its rubric entries (the toy problem below is graded end to end without touching any other file)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
from grader_helpers import check_reports

from grader import problems
from grader.pipeline import grade_submission
from grader.records import GradeConfig, Status
from grader.rubric import RubricError, load_rubric
from grader.staff import reference_dir

COURSE = ("conv2d", "transpose", "vector_add")

TOY_PROBLEM = '''
"""Toy problem: ``double(a)`` returns 2 * a for a (128, F) float32 matrix."""

from typing import Any

import numpy as np

from grader.problems.base import Invocation, case_dtype
from grader.problems.generic import ProblemBase


class Double(ProblemBase):
    name = "double"

    def invocation(self, case: dict[str, Any], seed: int) -> Invocation:
        a = np.random.default_rng(seed).random(tuple(case["shape"]), dtype=np.float32).astype(case_dtype(case))
        return Invocation([a], {}, a.shape, a.dtype, 0.0)

    def reference(self, inv: Invocation, precision: str = "float64") -> np.ndarray:
        return inv.args[0] * 2

    def input_elements(self, case: dict[str, Any]) -> int:
        return int(np.prod(case["shape"]))


PROBLEM = Double()
'''

TOY_KERNEL = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def double(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    r = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=t, op0=nl.multiply, operand0=FACTOR)
    nisa.dma_copy(dst=out, src=r)
    return out
'''

TOY_RUBRIC = '''
[rubric]
title = "toy problem"
seed = 3

[limits]
address_space_mib = 2048
import_timeout_s = 10

[tolerances]
float32 = { rtol = 1e-5, atol = 1e-8 }

[[test]]
id = "toy.double"
name = "double correctness"
part = 1
file = "part1/kernels.py"
function = "double"
kind = "correctness"
problem = "double"
points = 3
timeout_s = 30
cases = [{ shape = [128, 64], dtype = "float32" }, { shape = [128, 32], dtype = "float32" }]

[[test]]
id = "toy.double_speed"
name = "double latency"
part = 1
file = "part1/kernels.py"
function = "double"
kind = "performance"
problem = "double"
points = 1
requires = ["toy.double"]
timeout_s = 30
cases = [{ shape = [128, 512], dtype = "float32" }]
thresholds = { source = "fixed", optimized_us = 1000000.0 }
'''


@pytest.fixture
def toy_problem(tmp_path, monkeypatch):
    """The toy problem's module in a directory of its own, searched as part of grader.problems (as if the file
    had been dropped into grader/problems/)."""
    where = tmp_path / "more_problems"
    where.mkdir()
    (where / "double.py").write_text(TOY_PROBLEM)
    monkeypatch.setattr(problems, "__path__", [*problems.__path__, str(where)])
    problems.get.cache_clear()
    yield where
    problems.get.cache_clear()


@pytest.mark.parametrize("name", COURSE)
def test_course_problems_answer_the_whole_protocol(name):
    problem = problems.get(name)
    assert isinstance(problem, problems.Problem) and problem.name == name
    assert name in problems.names()


def test_an_unknown_problem_is_named_with_the_known_ones():
    with pytest.raises(problems.UnknownProblem, match="'fft'.*conv2d, transpose, vector_add"):
        problems.get("fft")
    with pytest.raises(problems.UnknownProblem):
        problems.get("base")  # shared code, not a problem


def test_case_descriptions_are_the_ones_reports_always_showed():
    conv = {"batch": 4, "in_channels": 128, "out_channels": 256, "height": 32, "width": 16, "kernel": 3,
            "pool": 2, "bias": "random", "dtype": "float16"}
    assert problems.get("conv2d").describe(conv) == "[batch 4, 128->256 ch, 32x16, pool 2, bias random, float16]"
    assert problems.get("conv2d").rubric_text(conv) == ("batch 4, 128->256 ch, 32x16, 3x3 float16, random bias, "
                                                        "2x2 max-pool")
    assert problems.get("transpose").describe({"shape": [256, 512], "dtype": "float32"}) == "256x512 float32"


def test_timing_keys_name_the_staff_kernels_timed():
    conv = {"batch": 1, "in_channels": 256, "out_channels": 256, "height": 224, "width": 224, "kernel": 3,
            "pool": 1, "bias": "random", "dtype": "float32"}
    assert problems.get("conv2d").timing_keys({"source": "conv2d"}, conv, "t") == {
        "optimized": "conv2d:float32:224x224:pool1:optimized", "relaxed": "conv2d:float32:224x224:pool1:relaxed"}
    spec = {"source": "reference", "key": "transpose:4096x4096:float32"}
    assert problems.get("transpose").timing_keys(spec, {"shape": [4096, 4096]}, "t") == {
        "optimized": "transpose:4096x4096:float32"}
    assert problems.get("vector_add").timing_keys({"source": "fixed"}, {"shape": [512]}, "p1.va") == {
        "optimized": "vector_add:p1.va"}


def test_vector_add_reference_is_one_rounding_of_the_sum():
    va = problems.get("vector_add")
    for dtype in ("float32", "float16"):
        inv = va.invocation({"shape": [1024], "dtype": dtype}, 5)
        a, b = inv.args
        exact = a.astype(np.float64) + b.astype(np.float64)
        assert inv.out_shape == (1024,) and inv.out_dtype == np.dtype(dtype)
        np.testing.assert_array_equal(va.reference(inv), exact.astype(dtype))
    assert problems.reference_precision("vector_add", {"shape": [8], "dtype": "float32"}, {}) == "exact"
    with pytest.raises(ValueError, match=r"shape must be \[N\]"):
        va.invocation({"shape": [8, 8]}, 0)


@pytest.mark.parametrize("shape", [(1, 1), (3, 700), (257, 513), (1024, 1024), (4096, 4096)])
def test_transpose_reference_is_the_plain_transposed_copy(shape):
    """The reference copies in blocks (the plain copy walks the input down its columns): the same array."""
    from grader.problems import transpose

    a = np.random.default_rng(0).random(shape, dtype=np.float32)
    got = transpose.transposed(a)
    assert got.flags.c_contiguous and got.dtype == a.dtype
    np.testing.assert_array_equal(got, np.ascontiguousarray(a.T))


def test_an_exact_reference_is_computed_once_per_inputs():
    """ProblemBase.expected memoises by the inputs' digests: a grading's reference thread computes it beside the
    call and the judge takes that one (read-only); other inputs get their own."""
    from grader import refcache

    transpose = problems.get("transpose")
    calls = []

    class Counting(type(transpose)):
        def reference(self, inv, precision="float64"):
            calls.append(inv.args[0].shape)
            return super().reference(inv, precision)

    counting = Counting()
    refcache.clear_memory()
    store = refcache.ReferenceStore(None, None)
    case = {"shape": [96, 160], "dtype": "float32"}
    shared = counting.shared_invocation(case, 11)
    first = counting.expected(store, shared, "exact")
    again = counting.expected(store, counting.shared_invocation(case, 11), "exact")
    assert again is first and not first.flags.writeable and calls == [(96, 160)]
    np.testing.assert_array_equal(first, shared.inv.args[0].T)
    other = counting.expected(store, counting.shared_invocation(case, 12), "exact")
    assert len(calls) == 2 and not np.array_equal(other, first)


def test_the_rubric_checks_threshold_sources_per_problem(tmp_path):
    rubric = tmp_path / "r.toml"
    text = TOY_RUBRIC.replace('problem = "double"', 'problem = "transpose"')
    rubric.write_text(text.replace('source = "fixed"', 'source = "conv2d"'))
    with pytest.raises(RubricError, match="'reference' or 'fixed'"):
        load_rubric(rubric)
    rubric.write_text(TOY_RUBRIC.replace('problem = "double"', 'problem = "fft"'))
    with pytest.raises(RubricError, match="unknown problem 'fft'"):
        load_rubric(rubric)


def _submission(root: Path, factor: str) -> Path:
    (root / "part1").mkdir(parents=True)
    (root / "part1" / "kernels.py").write_text(textwrap.dedent(TOY_KERNEL).replace("FACTOR", factor))
    return root


def test_a_toy_problem_is_its_own_module_plus_a_rubric_entry(toy_problem, tmp_path):
    """Graded end to end: inputs, reference, judging, the work check and the latency test all come from the
    toy module; nothing else was edited."""
    assert "double" in problems.names()
    rubric = tmp_path / "toy.toml"
    rubric.write_text(TOY_RUBRIC)
    config = GradeConfig(rubric_path=str(rubric), backend="nkisim")
    good = grade_submission(_submission(tmp_path / "good", "2.0"), tmp_path / "out-good", config)
    assert good.status == "graded", good.error
    assert [t.status for t in good.tests] == [Status.PASSED, Status.PASSED], [t.message for t in good.tests]
    assert good.score == 4 and good.tests[1].latency_us and good.tests[1].latency_us > 0
    check_reports(tmp_path / "out-good", 4)
    bad = grade_submission(_submission(tmp_path / "bad", "3.0"), tmp_path / "out-bad", config)
    assert [t.status for t in bad.tests] == [Status.FAILED, Status.SKIPPED]
    assert bad.tests[0].message.startswith("case 1/2 128x64 float32: ")  # the generic description of a shape


@pytest.mark.skipif(not (reference_dir() / "part1" / "kernels.py").exists(), reason="staff reference not here")
def test_vector_add_grades_the_staff_stream_kernel(tmp_path):
    """The course's vector add as a rubric entry: the staff kernel passes, on inputs it reads from HBM."""
    rubric = tmp_path / "va.toml"
    rubric.write_text(TOY_RUBRIC.split("[[test]]")[0] + '''
[[test]]
id = "part1.vector_add"
name = "vector_add_stream correctness"
part = 1
file = "part1/kernels.py"
function = "vector_add_stream"
kind = "correctness"
problem = "vector_add"
points = 1
timeout_s = 30
cases = [{ shape = [512], dtype = "float32" }, { shape = [1024], dtype = "float32" }]
''')
    record = grade_submission(reference_dir(), None, GradeConfig(rubric_path=str(rubric), backend="nkisim"))
    assert record.status == "graded", record.error
    assert record.tests[0].status == Status.PASSED, record.tests[0].message
