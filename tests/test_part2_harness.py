"""part2: the NumPy references, the harness's test definitions and scoring, and the stub's clean failure in both
editions (current API part2/conv2d.py, legacy editions/legacy/part2/conv2d.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "part2"))

import conv2d_numpy  # noqa: E402
import test_harness as harness  # noqa: E402

SCORE_LINE = re.compile(
    r"^(Correctness|Performance|Extra credit|Part 2 total): ([0-9.]+) points \(out of ([0-9.]+)(?:, plus up to "
    r"([0-9.]+) extra credit)?\)$",
    re.M,
)


@settings(max_examples=20, deadline=None)
@given(
    batch=st.integers(1, 2),
    cin=st.integers(1, 4),
    cout=st.integers(1, 3),
    k=st.integers(1, 3),
    extra_h=st.integers(0, 4),
    extra_w=st.integers(0, 4),
    pool=st.sampled_from([1, 2]),
    dtype=st.sampled_from(["float32", "float16"]),
    seed=st.integers(0, 2**16),
)
def test_fast_reference_matches_the_definition(batch, cin, cout, k, extra_h, extra_w, pool, dtype, seed):
    rng = np.random.default_rng(seed)
    X = rng.random((batch, cin, k + extra_h, k + extra_w), dtype=np.float32).astype(dtype)
    W = rng.random((cout, cin, k, k), dtype=np.float32).astype(dtype)
    bias = rng.random(cout, dtype=np.float32).astype(dtype)
    slow = conv2d_numpy.maxpool2d_naive(conv2d_numpy.conv2d_naive(X, W, bias), pool)
    fast = conv2d_numpy.fused_conv2d_maxpool_reference(X, W, bias, pool)
    assert fast.dtype == np.dtype(dtype) and fast.shape == slow.shape
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == "float16" else {"rtol": 1e-5, "atol": 1e-6}
    np.testing.assert_allclose(fast.astype(np.float64), slow, **tol)


def test_reference_rejects_bad_shapes():
    with pytest.raises(ValueError, match="input channels"):
        conv2d_numpy.conv2d(np.zeros((1, 2, 5, 5)), np.zeros((1, 3, 3, 3)))
    with pytest.raises(ValueError, match="larger than the image"):
        conv2d_numpy.conv2d(np.zeros((1, 2, 2, 5)), np.zeros((1, 2, 3, 3)))
    with pytest.raises(ValueError, match="pool_size"):
        conv2d_numpy.fused_conv2d_maxpool_reference(np.zeros((1, 1, 4, 4)), np.zeros((1, 1, 3, 3)), np.zeros(1), 3)


def test_points_follow_the_course():
    corr = harness.correctness_tests()
    perf = harness.performance_tests()
    assert [t.points for t in corr] == [2.5] * 4
    assert sum(t.points for t in corr if not t.needs_maxpool) == 7.5
    assert sum(t.points for t in perf if not t.extra_credit) == 50
    assert sum(t.points for t in perf if not t.extra_credit and not t.needs_maxpool) == 35
    assert sum(t.points for t in perf if t.extra_credit) == 5
    for t in perf:
        c = t.case
        assert (c.batch, c.in_channels, c.out_channels, c.filter_size) == (1, 256, 256, 3)
        assert (c.height, c.width) == ((32, 16) if t.extra_credit else (224, 224))
    small = corr[0].cases
    assert {(c.in_channels, c.out_channels) for c in small} == {(128, 128), (128, 256), (256, 128), (256, 256)}
    assert all(c.batch == 4 for t in corr for c in t.cases)
    assert {c.dtype for t in corr for c in t.cases} == {"float32", "float16"}
    assert any(c.pool_size == 2 for c in corr[3].cases) and not any(c.pool_size == 2 for c in corr[2].cases)


def test_performance_tiers():
    assert harness.performance_credit(100.0, 200.0, 120.0, 10.0) == 10.0
    assert harness.performance_credit(120.0, 200.0, 120.0, 10.0) == 10.0
    assert harness.performance_credit(150.0, 200.0, 120.0, 10.0) == pytest.approx(9.0)
    assert harness.performance_credit(200.0, 200.0, 120.0, 10.0) == pytest.approx(9.0)
    assert harness.performance_credit(200.1, 200.0, 120.0, 10.0) == 0.0


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(latency=st.floats(1.0, 1e4), optimized=st.floats(1.0, 1e4), gap=st.floats(0.0, 1e4))
def test_harness_tiers_match_the_grader(latency, optimized, gap):
    """The standalone harness keeps its own copy of the tier rule: it must give what the grader gives."""
    from grader.rubric import load_rubric
    from grader.thresholds import boundary_distance, credit_tier

    relaxed = optimized + gap
    rubric = load_rubric()
    fraction = {"full": 1.0, "partial": rubric.partial_credit, "none": 0.0}
    assert harness.performance_credit(latency, relaxed, optimized, 1.0) == pytest.approx(
        fraction[credit_tier(latency, relaxed, optimized)])
    assert harness.BORDERLINE_MARGIN == rubric.borderline_margin
    distance = boundary_distance(latency, relaxed, optimized)
    if abs(distance - rubric.borderline_margin) > 1e-9:
        assert harness.near_a_target(latency, relaxed, optimized) == (distance < rubric.borderline_margin)


def test_thresholds_come_from_the_grader_on_nkisim():
    from grader.problems.conv2d import conv_thresholds

    for dtype, h, pool in [("float32", 224, 1), ("float16", 224, 2), ("float16", 32, 1)]:
        relaxed, optimized, source = harness.conv_thresholds(dtype, h, pool)
        assert (relaxed, optimized) == pytest.approx(conv_thresholds(dtype, h, pool, "nkisim", "trn2"))
        assert relaxed >= optimized > 0
        # 224x224 scales with the staff kernel on nkisim; the small-image extra credit uses the published target
        assert source == ("reference kernels on nkisim trn2" if h == 224 else "published trn2")


def test_input_bank_is_deterministic_and_shares_the_expensive_convolution():
    bank = harness.InputBank(seed=7)
    a = harness.ConvCase(2, 128, 128, 8, 6, random_bias=False)
    b = harness.ConvCase(2, 128, 128, 8, 6, random_bias=True, pool_size=2)
    Xa, Wa, ba = bank.inputs(a)
    Xb, Wb, bb = bank.inputs(b)
    assert Xa is Xb and Wa is Wb and not ba.any() and bb.any()
    np.testing.assert_array_equal(harness.InputBank(seed=7).inputs(b)[2], bb)
    assert not np.array_equal(harness.InputBank(seed=8).inputs(a)[0], Xa)
    np.testing.assert_allclose(bank.reference(b), conv2d_numpy.fused_conv2d_maxpool_reference(Xb, Wb, bb, 2), rtol=1e-6)
    assert len(bank._conv) == 1


def test_fp16_comparison_tolerates_rounding_but_not_errors():
    ref = np.full((2, 2), 600.0, dtype=np.float16)
    assert harness.outputs_match(ref + np.float16(0.5), ref, "float16")
    assert not harness.outputs_match(ref + np.float16(16), ref, "float16")
    assert not harness.outputs_match(ref[:1], ref, "float16")
    assert not harness.outputs_match(np.full((2, 2), 600.01, np.float32), ref.astype(np.float32), "float32")


STUBS = {"nki": REPO / "part2" / "conv2d.py", "legacy": REPO / "editions" / "legacy" / "part2" / "conv2d.py"}


@pytest.mark.parametrize("api", list(STUBS))
def test_stub_scores_zero_without_crashing(api):
    kernel = harness.load_kernel(STUBS[api])
    lines: list[str] = []
    report = harness.run_harness(kernel, test_maxpool=True, log=lines.append)
    assert harness.kernel_api_line(kernel) in lines and f"`import {'nki' if api == 'nki' else 'neuronxcc.nki'}" \
        in harness.kernel_api_line(kernel)
    assert all(not r.passed for r in report.correctness)
    assert all(
        "NotImplementedError: fused_conv2d_maxpool is not implemented yet" in r.detail for r in report.correctness
    )
    assert report.skipped_performance
    assert "Correctness failed, skipping performance tests." in lines
    assert report.score("correctness") == (0.0, 10.0)
    assert report.score("performance") == (0.0, 50.0)
    assert report.score("extra credit") == (0.0, 5.0)


@pytest.mark.slow
@pytest.mark.parametrize("api", ["nki", "legacy"])
def test_command_line_prints_verdicts_and_score_lines(api):
    """`python part2/test_harness.py` on the default edition's stub; the legacy edition's through --submission."""
    extra = [] if api == "nki" else ["--submission", str(REPO / "editions" / "legacy")]
    proc = subprocess.run(
        [sys.executable, str(REPO / "part2" / "test_harness.py"), *extra],
        cwd=REPO / "part2",
        capture_output=True,
        text=True,
        timeout=300,
        encoding="utf-8",
    )
    assert proc.returncode == 0, proc.stderr
    scores = {m.group(1): tuple(float(g or 0) for g in m.groups()[1:]) for m in SCORE_LINE.finditer(proc.stdout)}
    assert scores == {
        "Correctness": (0.0, 7.5, 0.0),
        "Performance": (0.0, 35.0, 0.0),
        "Extra credit": (0.0, 2.5, 0.0),
        "Part 2 total": (0.0, 42.5, 2.5),
    }
    assert "Backend: nkisim estimate, trn2" in proc.stdout
    assert ("Kernel API: current NKI (`import nki`" if api == "nki" else "Kernel API: legacy NKI") in proc.stdout
    assert proc.stdout.count("FAILED") == 3


def test_load_kernel_errors_are_clear(tmp_path, capsys):
    with pytest.raises(FileNotFoundError):
        harness.load_kernel(tmp_path / "missing.py")
    # a directory without the file names both places it looked; the command line says so without a traceback
    assert harness.main(["--submission", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"no conv2d.py at {tmp_path}/part2/conv2d.py or {tmp_path}/conv2d.py" in err
    for argv in (["--submission", str(tmp_path / "nowhere")], ["--seed", "-5"]):
        with pytest.raises(SystemExit) as exc:
            harness.main(argv)
        assert exc.value.code == 2
    (tmp_path / "conv2d.py").write_text("x = 1\n")
    with pytest.raises(AttributeError, match="does not define fused_conv2d_maxpool"):
        harness.load_kernel(tmp_path)


def test_prefetched_references_are_the_inline_ones():
    cases = [
        harness.ConvCase(2, 128, 128, 10, 7, random_bias=False),
        harness.ConvCase(2, 128, 128, 10, 7, pool_size=2),
        harness.ConvCase(1, 128, 256, 6, 5, dtype="float16"),
    ]
    fetched, inline = harness.InputBank(seed=5), harness.InputBank(seed=5)
    fetched.prefetch(cases)
    for case in reversed(cases):  # asked for out of order: each waits for its own convolution
        got, want = fetched.reference(case), inline.reference(case)
        assert got.dtype == want.dtype == np.dtype(case.dtype)
        np.testing.assert_array_equal(got, want)
    assert len(fetched._conv) == 2


def test_a_failing_prefetched_reference_raises_in_the_caller(monkeypatch):
    import threading

    inline = harness.conv2d

    def broken(X, W):  # fails only in the background thread: the error must reach the caller, not be redone
        if threading.current_thread() is not threading.main_thread():
            raise MemoryError("no room for the reference")
        return inline(X, W)

    monkeypatch.setattr(harness, "conv2d", broken)
    bank = harness.InputBank(seed=1)
    case = harness.ConvCase(1, 128, 128, 5, 5)
    bank.prefetch([case])
    with pytest.raises(MemoryError, match="no room"):
        bank.reference(case)


KINDS = ["off", "nan", "inf", "-inf", "tiny", "edge", "edge+", "ref-nan", "ref-inf", "both-inf", "zero"]


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 60),
    bad=st.lists(st.tuples(st.integers(0, 59), st.sampled_from(KINDS)), max_size=3),
    dtype=st.sampled_from(["float32", "float16"]),
    seed=st.integers(0, 2**16),
)
def test_outputs_match_slice_by_slice_is_allclose(n, bad, dtype, seed):
    """outputs_match is np.allclose on the whole arrays, also where its float32 fast check (harness._close_f32)
    hands a slice to allclose: NaN and infinities in either array, elements at the tolerance's edge."""
    rng = np.random.default_rng(seed)
    ref = (rng.random((n, 1)) * 600).astype(dtype)
    out = ref.copy()
    rtol, atol = (1e-2, 1e-2) if dtype == "float16" else (1e-5, 1e-8)
    for i, kind in bad:
        if i < n:
            r = np.float32(ref[i, 0])
            edge = np.float32(atol + rtol * abs(r))  # the bound, then its neighbours in the arrays' type
            out[i, 0] = {"off": r * 1.5 + 1, "nan": np.nan, "inf": np.inf, "-inf": -np.inf, "tiny": r * (1 + 1e-7),
                         "edge": r + edge, "edge+": np.nextafter(r + edge, np.float32(np.inf)),
                         "ref-nan": out[i, 0], "ref-inf": out[i, 0], "both-inf": np.inf, "zero": 0.0}[kind]
            if kind in ("ref-nan", "ref-inf", "both-inf"):
                ref[i, 0] = np.nan if kind == "ref-nan" else np.inf
    if dtype == "float16":
        whole = np.allclose(out.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)
    else:
        whole = np.allclose(out, ref)
    chunk = harness._MATCH_CHUNK
    harness._MATCH_CHUNK = 7  # many slices, a ragged last one
    try:
        assert harness.outputs_match(out, ref, dtype) == bool(whole)
    finally:
        harness._MATCH_CHUNK = chunk


def test_a_kernel_calling_sys_exit_is_a_failed_test_not_a_silent_exit():
    def exits(X, W, bias, pool_size=1):
        sys.exit(0)

    args = (np.zeros((1, 128, 4, 4), np.float32), np.zeros((128, 128, 3, 3), np.float32), np.zeros(128, np.float32))
    for simulate in (False, True):
        with pytest.raises(RuntimeError, match=r"the kernel called sys.exit\(0\) instead of returning its output"):
            harness.launch(exits, args, {"pool_size": 1}, simulate)


def test_score_lines_are_worded_like_the_graders_total():
    from grader.points import points_total

    report = harness.HarnessReport("nkisim estimate, trn2")
    report.correctness = [harness.TestResult("c", True, 10.0, 10.0)]
    report.performance = [
        harness.TestResult("p", True, 0.9 * 17.5, 17.5),
        harness.TestResult("e", True, 1.25, 1.25, extra_credit=True),
    ]
    lines = harness.score_lines(report)
    assert lines[-1] == "Part 2 total: 27 points (out of 27.5, plus up to 1.25 extra credit)"
    assert lines[1] == "Performance: 15.75 points (out of 17.5)"
    assert points_total(76, 70, 6) == "76 points (out of 70, plus up to 6 extra credit)"
    assert points_total(10, 10) == "10 points (out of 10)"
    assert points_total(5, 0, 5) == "5 points (out of up to 5 extra credit)"  # was "out of 0, plus up to 5"


def test_only_keys_are_the_graders_test_ids_in_the_harness_order():
    """--only names a harness test as `make grade --only` names it (grader/rubric.toml's part2.* ids), so one
    name works in both; the keys follow the harness's own order."""
    from grader.rubric import load_rubric

    ids = [t.id.removeprefix("part2.") for t in load_rubric().tests if t.id.startswith("part2.")]
    assert sorted(harness.known_keys()) == sorted(ids)
    corr, perf = harness.select_tests("part2.perf_fp16,small")  # the grader's spelling works too
    assert [t.name for t in corr] == ["smaller images"] and [t.name for t in perf] == ["224x224 float16"]
    corr, perf = harness.select_tests("ec_*")
    assert corr == [] and [t.key for t in perf] == ["ec_fp32", "ec_fp16", "ec_fp32_pool", "ec_fp16_pool"]
    assert all(t.extra_credit for t in perf)
    for bad in ("perf_fp8", "small,bogus*", " , "):
        with pytest.raises(ValueError, match="no such test|at least one") as exc:
            harness.select_tests(bad)
        assert "perf_fp16" in str(exc.value)  # the message lists the names that exist


def test_only_on_the_command_line_refuses_unknown_names(capsys):
    with pytest.raises(SystemExit) as exc:
        harness.main(["--only", "small,perf_fp61"])
    assert exc.value.code == 2
    assert "--only perf_fp61: no such test (known: small, large, bias, maxpool, perf_fp32" in capsys.readouterr().err


def test_only_runs_just_the_named_tests_and_says_the_total_is_not_a_score():
    """A selected performance test runs without correctness tests when none is selected (the stub raises there);
    the score lines cover the tests that ran and say that the full run is what scores."""
    kernel = harness.load_kernel(STUBS["nki"])
    lines: list[str] = []
    report = harness.run_harness(kernel, log=lines.append, only="perf_fp16_pool")
    assert report.correctness == [] and [r.name for r in report.performance] == ["224x224 float16 + maxpool"]
    assert "Only: perf_fp16_pool (of 12 tests)" in lines
    assert any("without checking the kernel's output" in line for line in lines)
    assert report.performance[0].points == 0 and "NotImplementedError" in report.performance[0].detail
    score = harness.score_lines(report)
    assert score == ["Performance: 0 points (out of 7.5)",
                     "(--only: 1 of 12 tests; run without --only for the Part 2 score)"]
    assert not any(line.startswith("Part 2 total") for line in score)
    # a failing selected correctness test still gates the selected performance tests
    report = harness.run_harness(kernel, log=lines.append, only="small,perf_fp32")
    assert report.skipped_performance and [r.detail for r in report.performance] == ["skipped"]


@pytest.mark.skipif(not (REPO / "grader" / "reference" / "part2" / "conv2d.py").is_file(),
                    reason="staff reference solutions are not part of the student release")
def test_a_timed_test_past_the_relaxed_target_says_so_and_scores_nothing():
    kernel = harness.load_kernel(REPO / "grader" / "reference")
    test = next(t for t in harness.performance_tests() if t.key == "ec_fp16")
    lines: list[str] = []
    [result] = harness.run_performance(kernel, [test], harness.InputBank(42), log=lines.append,
                                       thresholds=lambda dtype, height, pool: (2.0, 1.0, "test targets"))
    assert result.points == 0 and not result.passed
    assert result.detail == "FAILED (too slow: slower than 2 \u03bcs, no credit)"
    assert any(line.endswith("-> FAILED (too slow: slower than 2 \u03bcs, no credit)") for line in lines)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**16), pool=st.sampled_from([1, 2]), dtype=st.sampled_from(["float32", "float16"]),
       special=st.booleans())
def test_the_reference_pools_before_the_bias_with_the_same_bits(seed, pool, dtype, special):
    """InputBank.reference computes maxpool(conv) + bias: bit for bit maxpool(conv + bias), the definition (adding
    a channel's bias rounds monotonically), also with negative values, zeros of either sign and ties."""
    rng = np.random.default_rng(seed)
    conv = (rng.standard_normal((2, 3, 6, 5)) * 4).astype(np.float32)
    bias = rng.standard_normal(3).astype(dtype)
    if special:
        conv[0, 0, :2, :2] = [[-0.0, 0.0], [0.0, -0.0]]
        conv[1, 1, :2, :2] = -float(bias[1])  # sums that are exactly zero
        bias[2] = 0.0
    case = harness.ConvCase(2, 128, 3, 8, 7, random_bias=True, pool_size=pool, dtype=dtype)
    bank = harness.InputBank(seed)
    bank.set_convolution(bank.key(case), conv)
    monkey_bias = bias.copy()
    bank.inputs = lambda c: (None, None, monkey_bias)  # type: ignore[method-assign]
    want = harness.maxpool2d(conv + bias.astype(np.float32)[None, :, None, None], pool).astype(dtype)
    got = bank.reference(case)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))
