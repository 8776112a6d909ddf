"""The Part 2 harness's grouped correctness runs (``group_run``: cases on the same X and W in lockstep, sharing
their matrix products through ``nkisim.core.runtime.run_shared``): each case's outcome, output bits and prints are
its separate run's, a case that raises stops alone, and the parallel harness with groups prints and scores what the
serial one does.  Also the worker pool's shared-memory results and the per-image reference jobs."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from nkibench import forkpool

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "part2"))
import test_harness as harness  # noqa: E402
from test_part2_parallel import WRONG_KERNEL, _both  # noqa: E402

import nkisim  # noqa: E402
from nkisim.core import context, sharing  # noqa: E402
from nkisim.core.runtime import run_shared  # noqa: E402

STAFF = REPO / "grader" / "reference" / "part2" / "conv2d.py"
LEGACY = REPO / "grader" / "reference" / "legacy" / "part2" / "conv2d.py"
NAIVE = REPO / "staff" / "ladder" / "step0_naive_nki.py"
needs_staff = pytest.mark.skipif(not (STAFF.is_file() and NAIVE.is_file()),
                                 reason="staff kernels are not part of the student release")
needs_fork = pytest.mark.skipif(not forkpool.available(), reason="worker processes are forked on Linux only")

# batch 4, 32x16: the three variants of the batch-4 224x224 cases (large, bias, maxpool) at a size that runs fast
CASES = [harness.ConvCase(4, 128, 256, 32, 16, random_bias=False), harness.ConvCase(4, 128, 256, 32, 16),
         harness.ConvCase(4, 128, 256, 32, 16, pool_size=2)]


def _naive_variant(tmp_path: Path, raise_after: int | None) -> Path:
    """The handout's starting point, printing a line per call and (``raise_after``) raising in the middle of a
    pooling call, after that many output rows' matmuls: a member that fails beside healthy ones."""
    text = NAIVE.read_text()
    head = "    batch_size, in_channels, input_height, input_width = X.shape\n"
    loop = "        for out_row in nl.affine_range(pooled_h):\n"
    assert head in text and loop in text
    text = text.replace(head, head + '    print(f"called with pool {pool_size}")\n    rows = []\n')
    if raise_after is not None:
        text = text.replace(loop, loop + "            rows.append(1)\n            if pool_size == 2 and "
                            f"len(rows) > {raise_after}:\n                raise ValueError('pooling: not yet')\n")
    path = tmp_path / "conv2d.py"
    path.write_text(text)
    return path


def _fields(trace) -> list:
    return [[getattr(i, k) for k in i.__slots__] for i in trace.instrs]


@needs_staff
@pytest.mark.parametrize("path", [STAFF, LEGACY, pytest.param(NAIVE, marks=pytest.mark.slow)],
                         ids=["staff", "staff-legacy-api", "starting-point"])
def test_runs_in_a_group_are_their_separate_runs_bit_for_bit(path, monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)  # every reuse the equality memo allows is checked bitwise too
    kernel = harness.load_kernel(path)
    bank = harness.InputBank(7)

    def run(case):
        X, W, bias = bank.inputs(case)
        return lambda: nkisim.run_kernel(kernel, (X, W, bias), {"pool_size": case.pool_size}, mode="full")

    alone = [run(case)() for case in CASES]
    grouped, errors, figures = run_shared([run(case) for case in CASES])
    assert errors == [None] * 3
    for a, g in zip(alone, grouped, strict=True):
        assert np.array_equal(a.outputs.view(np.uint8), g.outputs.view(np.uint8))  # NaN, -0.0: every bit
        assert _fields(g.trace) == _fields(a.trace) and g.trace.meta == a.trace.meta
        assert (g.peak_sbuf_bytes, g.peak_psum_bytes) == (a.peak_sbuf_bytes, a.peak_psum_bytes)
    # the same X and W: large's and bias's products are one another's (maxpool's, in another row order, partly)
    assert figures["hits"] >= figures["misses"] // 2 > 0
    assert context._STACK == []
    # a timing run in a group computes no products and shares nothing
    X, W, bias = bank.inputs(CASES[0])
    timed, _, figures = run_shared([lambda: nkisim.run_kernel(kernel, (X, W, bias), mode="timing")] * 2)
    assert figures["hits"] == figures["misses"] == 0
    assert _fields(timed[0].trace) == _fields(timed[1].trace) == _fields(alone[0].trace)


@needs_staff
def test_group_run_gives_each_case_its_own_outcome_and_prints(tmp_path, monkeypatch):
    monkeypatch.setattr(sharing, "SELF_CHECK", True)
    kernel = harness.load_kernel(_naive_variant(tmp_path, raise_after=3))
    bank = harness.InputBank(7)
    alone = [harness.case_run(kernel, case, bank, False) for case in CASES]
    grouped = harness.group_run(kernel, CASES, bank, False)
    assert [o[0] for o in alone] == [g[0][0] for g in grouped] == ["out", "out", "error"]
    for a, (g, _, _) in zip(alone[:2], grouped[:2]):
        assert np.array_equal(a[1].view(np.uint8), g[1].view(np.uint8))
    # the pooling case stops at its own error, with its own traceback; the others ran on to the end
    assert grouped[2][0][2] == alone[2][2] == "ValueError: pooling: not yet"
    assert "raise ValueError('pooling: not yet')" in grouped[2][0][1]
    assert [g[1] for g in grouped] == ["called with pool 1\n", "called with pool 1\n", "called with pool 2\n"]
    assert sys.stdout is not None and not isinstance(sys.stdout, harness._PerThread)


@needs_fork
def test_a_results_announced_arrays_come_back_through_shared_memory():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(6, dtype=np.float16).reshape(2, 3)
    with forkpool.ForkPool(1) as pool:
        pool.add("two", lambda: [("out", a + 1), ("out", b * 2), ("small", np.ones(3))],
                 outputs=[((2, 3), np.float16), ((2, 3, 4), np.float32)])
        pool.add("other", lambda: ("out", a.astype(np.float64)), outputs=[((2, 3, 4), np.float32)])
        for key in ("two", "other"):
            pool.queue(key)
        got = pool.result("two")
        np.testing.assert_array_equal(got[0][1], a + 1)
        np.testing.assert_array_equal(got[1][1], b * 2)
        np.testing.assert_array_equal(got[2][1], np.ones(3))

        def in_shared_memory(x: np.ndarray) -> bool:
            while isinstance(x, np.ndarray):
                x = x.base
            return isinstance(x.obj if isinstance(x, memoryview) else x, mmap.mmap)

        assert in_shared_memory(got[0][1]) and in_shared_memory(got[1][1]) and not in_shared_memory(got[2][1])
        other = pool.result("other")[1]  # not as announced: through the pipe, as it was
        assert other.dtype == np.float64 and not in_shared_memory(other)


def test_a_reference_made_image_by_image_is_the_batch_reference():
    """The parallel harness computes a large reference as one job per image (they balance the cores): conv2d
    computes a batch image by image, so the parts are the whole's bits."""
    rng = np.random.default_rng(5)
    X = rng.random((3, 128, 20, 12), dtype=np.float32)
    W = rng.random((128, 128, 3, 3), dtype=np.float32)
    whole = harness.conv2d(X, W)
    parts = np.concatenate([harness.conv2d(X[b:b + 1], W) for b in range(3)])
    assert np.array_equal(whole.view(np.uint32), parts.view(np.uint32))


def test_the_group_leaves_one_case_per_other_worker_alone():
    assert [harness._group_size(3, w) for w in (2, 3, 4)] == [2, 1, 0]


@needs_fork
@needs_staff
@pytest.mark.parametrize("which", ["staff", pytest.param("wrong", marks=pytest.mark.slow),
                                   pytest.param("raises-in-pooling", marks=pytest.mark.slow)])
def test_grouped_parallel_runs_print_and_score_as_the_serial_harness(which, tmp_path, capfd, monkeypatch):
    """Every same-input case pair of the small images grouped (the 32x16 cases stand in for the 224x224 ones),
    against the serial harness: the same log, output, verdicts and details."""
    if which == "staff":
        kernel = harness.load_kernel(STAFF)
    elif which == "wrong":
        (tmp_path / "conv2d.py").write_text(WRONG_KERNEL)
        kernel = harness.load_kernel(tmp_path)
    else:
        kernel = harness.load_kernel(_naive_variant(tmp_path, raise_after=1))
    real_tests = harness.correctness_tests
    monkeypatch.setattr(harness, "correctness_tests", lambda: [  # without the 224x224 cases: a test's budget
        harness.CorrectnessTest(t.name, tuple(c for c in t.cases if c.height < 224), t.points, t.needs_maxpool, t.key)
        for t in real_tests()])
    monkeypatch.setattr(harness, "_SMALL_JOB", 1.0)  # every case is "large"
    monkeypatch.setattr(harness, "_group_size", lambda cases, workers: cases)
    made = []
    real = harness.ParallelRuns.__init__

    def spied(self, *a, **k):
        real(self, *a, **k)
        made.append(dict(self.grouped))

    monkeypatch.setattr(harness.ParallelRuns, "__init__", spied)
    (serial, parallel), ((log1, out1), (log2, out2)) = _both(kernel, capfd, monkeypatch, only="small,bias,maxpool")
    assert made and len(made[0]) >= 4, made  # (128->256 fp32: small + maxpool; 256->256 fp16: small + bias)
    assert log1 == log2 and out1 == out2
    assert [(r.passed, r.detail) for r in serial.correctness] == [(r.passed, r.detail) for r in parallel.correctness]
    if which == "staff":
        assert all(r.passed for r in parallel.correctness)
    elif which == "raises-in-pooling":
        assert [r.passed for r in parallel.correctness] == [True, True, False]
        assert "kernel raised ValueError: pooling: not yet" in parallel.correctness[2].detail
        assert out1.count("called with pool 2") == 1  # the pooling test stopped at its first case


def test_run_shared_without_kernels_is_plain_threads():
    """What a function returns or raises is its own; the caller's module state is restored."""
    results, errors, figures = run_shared([lambda: 1, lambda: 1 / 0, lambda: "x"])
    assert results[0] == 1 and results[2] == "x" and isinstance(errors[1], ZeroDivisionError)
    assert figures["hits"] == figures["misses"] == 0 and len(figures["cpu_seconds"]) == 3
    assert context._STACK == []


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("larger_first", [True, False])
def test_a_smaller_batchs_inputs_are_the_first_images_of_the_larger(dtype, larger_first):
    """Batch prefixes (InputBank): drawn either way round, the batch-1 case's X is the batch-4 case's first image
    and W and the bias are the same, as the grader's inputs are."""
    one, four = (harness.ConvCase(b, 128, 256, 12, 10, dtype=dtype) for b in (1, 4))
    bank, alone = harness.InputBank(11), harness.InputBank(11)
    first, second = (four, one) if larger_first else (one, four)
    got = {first: bank.inputs(first), second: bank.inputs(second)}
    assert got[one][0].shape == (1, 128, 12, 10) and got[four][0].dtype == np.dtype(dtype)
    for a, b in zip(got[one], alone.inputs(one)):  # as drawn alone
        assert np.array_equal(a, b)
    assert np.array_equal(got[one][0][0], got[four][0][0])
    assert np.array_equal(got[one][1], got[four][1]) and np.array_equal(got[one][2], got[four][2])
    assert not np.array_equal(got[four][0][1], got[four][0][0])
    assert not np.array_equal(harness.InputBank(12).inputs(one)[0], got[one][0])


def test_strided_maxpool_is_the_windows_maximum():
    rng = np.random.default_rng(2)
    X = rng.standard_normal((2, 3, 9, 7)).astype(np.float32)
    X[0, 1, 2, 3] = np.nan
    for pool in (1, 2, 3):
        got = harness.maxpool2d(X, pool)
        h, w = 9 // pool, 7 // pool
        want = X[:, :, :h * pool, :w * pool].reshape(2, 3, h, pool, w, pool).max(axis=(3, 5))
        assert got.dtype == X.dtype and np.array_equal(got, want, equal_nan=True)
