"""Model-gaming submissions (tests/hostile_model/): kernels that bought modelled speed or exactness the hardware
would not give them (docs/grading-security.md).  Each scores what its hardware run would score: the score of
its honest twin where the trick is harmless on hardware, 0 where the hardware would compute something else.
Also the plausibility guard (grader/plausibility.py): an impossible latency earns nothing and is flagged in every
report format."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from grader_helpers import CONV16, FAST_RUBRIC, FIXED_THRESHOLDS, TESTS, check_reports, conv_rubric, conv_test_toml

from grader import plausibility, problems, records
from grader.pipeline import grade_submission
from grader.problems import conv2d as conv
from grader.records import GradeConfig
from grader.rubric import load_rubric

GAMING = TESTS / "hostile_model"
CORRECT, SPEED = "part1.transpose", "part1.transpose_speed"  # the fast rubric's test ids

# The grader tests' fast rubric (part 1: two small correctness cases, a 512 x 512 timed case) with the targets and
# the values check set per test; the conv rubric is its header with one 32x16 correctness and one timed test.
FAST_TEXT = Path(FAST_RUBRIC).read_text()
FIXED_TARGETS = "optimized_us = 1000000.0, relaxed_us = 2000000.0"
CONV_CASE = {**CONV16, "batch": 1, "height": 32, "width": 16, "pool": 1, "bias": "random"}


def _rubric(tmp_path: Path, text: str, name: str = "rubric.toml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _transpose_rubric(tmp_path: Path, optimized: float = 1e6, relaxed: float = 2e6, verify: bool = True) -> str:
    assert FIXED_TARGETS in FAST_TEXT and "verify_performance_outputs = true" in FAST_TEXT
    text = FAST_TEXT.replace(FIXED_TARGETS, f"optimized_us = {optimized}, relaxed_us = {relaxed}")
    text = text.replace("verify_performance_outputs = true", f"verify_performance_outputs = {str(verify).lower()}")
    return _rubric(tmp_path, text, f"rubric-{optimized:.3f}-{verify}.toml")


def _conv_rubric(tmp_path: Path) -> str:
    return str(conv_rubric(tmp_path / "conv.toml",
                           conv_test_toml("c.correct", "conv2d correctness, 32x16", [CONV_CASE], points=2.5),
                           conv_test_toml("c.speed", "conv2d latency, 32x16", [CONV_CASE], kind="performance",
                                          points=1.25, requires=("c.correct",), thresholds=FIXED_THRESHOLDS)))


def _grade(tmp_path: Path, name: str, rubric: str):
    out = tmp_path / f"out-{name}-{Path(rubric).stem}"
    record = grade_submission(GAMING / name, out, GradeConfig(rubric_path=rubric, timeout_scale=1.0))
    assert record.status == "graded", record.error
    check_reports(out, load_rubric(rubric).total_points)
    return record, {t.id: t for t in record.tests}, out


def test_every_model_gaming_submission_is_tested():
    on_disk = {p.name for p in GAMING.iterdir() if p.is_dir()}
    assert on_disk == {"broadcast_first", "broadcast_first_honest", "operand_tamper", "onezero_lie",
                       "onezero_honest", "onezero_when_timed", "conv_onezero", "conv_transpose_mode",
                       "conv_honest", "psum_zero_scratch", "psum_zero_scratch_honest", "gpsimd_max",
                       "scattered_placement", "partition_broadcast", "partition_broadcast_honest",
                       "index_transpose", "partition_shift", "no_reorder_block",
                       "no_reorder_block_twin"} | DMA_AND_NKI_SET | VALUES_SET


def _scores_like_its_twin(tmp_path: Path, hostile: str, twin: str) -> None:
    """The hostile kernel is timed as its honest twin, also with targets just below the twin's latency (where
    the cheaper timing it used to get bought full credit instead of partial)."""
    _, honest, _ = _grade(tmp_path, twin, _transpose_rubric(tmp_path))
    latency = honest[SPEED].latency_us
    tight = _transpose_rubric(tmp_path, optimized=0.995 * latency, relaxed=10 * latency)
    _, bad, _ = _grade(tmp_path, hostile, tight)
    _, good, _ = _grade(tmp_path, twin, tight)
    assert bad[CORRECT].status == "passed"
    assert bad[SPEED].latency_us == pytest.approx(latency, rel=1e-6)
    assert bad[SPEED].status == good[SPEED].status == "partial"
    assert bad[SPEED].score == good[SPEED].score


@pytest.mark.slow
def test_a_broadcast_operand_placed_first_buys_nothing(tmp_path):
    """G1: the evacuation costs the block whichever operand comes first."""
    _scores_like_its_twin(tmp_path, "broadcast_first", "broadcast_first_honest")


@pytest.mark.slow
def test_psum_zeros_read_as_data_buy_nothing(tmp_path):
    """G5: the zero fills VectorE reads cost what any other fill costs (before: 54 us against the twin's 92)."""
    _scores_like_its_twin(tmp_path, "psum_zero_scratch", "psum_zero_scratch_honest")


def test_max_on_gpsimd_earns_nothing(tmp_path):
    """G8: GpSimd has no max: the kernel does not compile on Trainium."""
    record, tests, _ = _grade(tmp_path, "gpsimd_max", _transpose_rubric(tmp_path))
    assert record.score == 0
    assert tests[CORRECT].status == "error" and "GpSimd runs only add, multiply" in tests[CORRECT].message


@pytest.mark.slow
def test_a_placement_nkisim_cannot_alias_earns_no_performance_credit(tmp_path):
    """G7: correct values, but a timing nkisim cannot make the hardware's: flagged, no credit."""
    record, tests, out = _grade(tmp_path, "scattered_placement", _transpose_rubric(tmp_path))
    assert tests[CORRECT].status == "passed"
    speed = tests[SPEED]
    assert speed.status == "failed" and speed.score == 0 and record.score == 10
    assert speed.message.startswith("flagged for course staff") and "direct allocation" in speed.implausible[0]
    assert "flagged for course staff" in (out / "summary.md").read_text()


def test_a_kernel_cannot_rewrite_its_own_trace(tmp_path):
    """G2: the screen refuses the unbound call (Relabel.apply(record): SANDBOX-CLASS-ESCAPE, issue 31); without the
    screen the kernel fails as it would on Trainium: tensors have no operand() (the records are the core's own)."""
    record, tests, _ = _grade(tmp_path, "operand_tamper", _transpose_rubric(tmp_path))
    assert record.score == 0
    assert tests[CORRECT].status == "rejected" and "SANDBOX-CLASS-ESCAPE" in tests[CORRECT].message
    out = tmp_path / "out-operand_tamper-unscreened"
    record = grade_submission(GAMING / "operand_tamper", out, GradeConfig(
        rubric_path=_transpose_rubric(tmp_path), timeout_scale=1.0, screen=False))
    tests = {t.id: t for t in record.tests}
    assert record.score == 0
    assert tests[CORRECT].status == "error"
    assert "AttributeError" in tests[CORRECT].message and "operand" in tests[CORRECT].message
    assert tests[SPEED].status == "skipped"


@pytest.mark.slow
def test_a_onezero_hint_on_data_earns_nothing_and_on_an_identity_keeps_its_speed_up(tmp_path):
    """G3: the promise is checked on the values."""
    rubric = _transpose_rubric(tmp_path)
    record, lie, _ = _grade(tmp_path, "onezero_lie", rubric)
    assert record.score == 0
    assert lie[CORRECT].status == "error"
    assert "is_stationary_onezero=True but the stationary tile (float32)" in lie[CORRECT].message
    _, honest, _ = _grade(tmp_path, "onezero_honest", rubric)
    assert honest[CORRECT].status == "passed" and honest[SPEED].status == "passed"


@pytest.mark.slow
def test_a_onezero_hint_on_the_timed_shape_only_earns_nothing(tmp_path):
    """G3 on the timed run: checked when values are computed (the default); costed without the hint when the
    rubric skips the values, so the lie buys no speed (its latency is the unhinted kernel's)."""
    _, checked, _ = _grade(tmp_path, "onezero_when_timed", _transpose_rubric(tmp_path))
    assert checked[CORRECT].status == "passed"
    assert checked[SPEED].status == "error" and checked[SPEED].score == 0
    assert "is_stationary_onezero=True" in checked[SPEED].message
    unchecked_rubric = _transpose_rubric(tmp_path, verify=False)
    _, unchecked, _ = _grade(tmp_path, "onezero_when_timed", unchecked_rubric)
    _, plain, _ = _grade(tmp_path, "onezero_lie", unchecked_rubric)  # correctness fails: no timed run to compare
    assert plain[SPEED].status == "skipped"
    _, honest, _ = _grade(tmp_path, "onezero_honest", unchecked_rubric)
    assert unchecked[SPEED].status == "passed"
    # the honest kernel's hint is dropped as well (unchecked), so both are costed as plain fp32 matmuls
    assert unchecked[SPEED].latency_us == pytest.approx(honest[SPEED].latency_us, rel=1e-6)
    _, verified_honest, _ = _grade(tmp_path, "onezero_honest", _transpose_rubric(tmp_path))
    assert verified_honest[SPEED].latency_us < unchecked[SPEED].latency_us  # the checked hint counts


@pytest.mark.parametrize("name,message", [
    ("conv_onezero", "is_moving_onezero=True but the moving tile (float32)"),
    ("conv_transpose_mode", "is_transpose=True turns on the Tensor Engine's transpose mode"),
])
@pytest.mark.slow
def test_hinted_convolutions_earn_nothing(name, message, tmp_path):
    """G3/G4 on a real matrix product: the hardware would not compute the convolution."""
    rubric = _conv_rubric(tmp_path)
    record, tests, _ = _grade(tmp_path, name, rubric)
    assert record.score == 0
    assert tests["c.correct"].status == "error" and message in tests["c.correct"].message
    assert tests["c.speed"].status == "skipped"
    honest_record, _, _ = _grade(tmp_path, "conv_honest", rubric)
    assert honest_record.score == 2.5 + 1.25


# ---- the plausibility guard ----------------------------------------------------------------------------------


def _conv_inv(dtype: str = "float32", height: int = 224):
    case = {"batch": 1, "in_channels": 256, "out_channels": 256, "height": height, "width": height, "kernel": 3,
            "pool": 1, "bias": "random", "dtype": dtype}
    x, w, out = conv.conv2d_shapes(case)
    np_dtype = np.dtype(problems.DTYPES[dtype])
    args = [np.empty(x, np_dtype), np.empty(w, np_dtype), np.empty(w[0], np_dtype)]
    flops = 2.0 * w[0] * w[1] * w[2] * w[3] * out[2] * out[3]
    return problems.Invocation(args, {"pool_size": 1}, out, np_dtype, flops)


@pytest.mark.slow
def test_the_staff_kernels_are_plausible():
    """No honest kernel loses credit: every modelled staff latency (reference_timings.json, both targets, both
    tiers) passes the guard."""
    entries = json.loads((TESTS.parent / "grader" / "reference_timings.json").read_text())["entries"]
    checked = 0
    for key, entry in entries.items():
        target = key.split("|")[1]
        for name, us in entry["timings_us"].items():
            if name.startswith("conv2d:"):
                _, dtype, size, pool, _ = name.split(":")
                h, w = (int(v) for v in size.split("x"))
                case = {"batch": 1, "in_channels": 256, "out_channels": 256, "height": h, "width": w, "kernel": 3,
                        "pool": int(pool[4:]), "bias": "random", "dtype": dtype}
                inv = problems.make_invocation("conv2d", case, 0)
            else:
                _, shape, dtype = name.split(":")
                rows, cols = (int(v) for v in shape.split("x"))
                inv = problems.make_invocation("transpose", {"shape": [rows, cols], "dtype": dtype}, 0)
            assert plausibility.findings(inv, us, target) == [], (key, name, us)
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_faster_than_the_tensor_engine_is_flagged(target):
    from nkisim.perf.costs import costs_for

    inv = _conv_inv("float16")
    peak_us = inv.flops / costs_for(target).tensor_peak_flops * 1e6
    assert plausibility.findings(inv, 1.05 * peak_us, target) == []
    found = plausibility.findings(inv, 0.95 * peak_us, target)
    assert len(found) == 1 and "TensorE peak" in found[0] and "105%" in found[0]
    # fp32 counts twice (the course's MFU convention): half the fp16 rate is the limit
    inv32 = _conv_inv("float32")
    assert plausibility.findings(inv32, 2.1 * peak_us, target) == []
    assert "TensorE peak" in plausibility.findings(inv32, 1.9 * peak_us, target)[0]


def test_faster_than_the_dma_engines_is_flagged():
    inv = problems.make_invocation("transpose", {"shape": [4096, 4096], "dtype": "float32"}, 0)
    floor_us = 2 * 4096 * 4096 * 4 / (16 * 23.0) / 1e3  # the trn2 table: 16 engines x 23 B/ns
    assert plausibility.findings(inv, 1.01 * floor_us, "trn2") == []
    found = plausibility.findings(inv, 0.99 * floor_us, "trn2")
    assert len(found) == 1 and "134.2 MB" in found[0] and "16 DMA engines" in found[0]
    assert plausibility.findings(inv, 0.0, "trn2") == ["the latency 0.0 us is not a positive time"]


def test_an_impossible_result_earns_nothing_and_is_flagged_in_every_report(tmp_path, monkeypatch):
    """End to end: whatever made the model report it (here a stand-in for the estimate), a latency below the DMA
    floor scores 0, and its reason reaches results.json, junit.xml, summary.md and result.json."""
    import nkisim.perf

    real = nkisim.perf.estimate

    def too_fast(trace, target=None, **kw):
        report = real(trace, target, **kw)
        report.nc_latency_us = 0.5
        return report

    monkeypatch.setattr(nkisim.perf, "estimate", too_fast)
    record, tests, out = _grade(tmp_path, "broadcast_first_honest", _transpose_rubric(tmp_path))
    speed = tests[SPEED]
    assert speed.status == "failed" and speed.score == 0 and speed.latency_us == 0.5
    assert speed.message.startswith("flagged for course staff: no performance credit, the result is not one")
    assert len(speed.implausible) == 1 and "DMA engines" in speed.implausible[0]
    assert record.score == 10
    results = json.loads((out / "results.json").read_text())
    assert any("flagged for course staff" in t["output"] for t in results["tests"])
    assert "flagged for course staff" in (out / "junit.xml").read_text()
    assert "flagged for course staff" in (out / "summary.md").read_text()
    stored = json.loads((out / "result.json").read_text())
    assert next(t for t in stored["tests"] if t["id"] == SPEED)["implausible"] == speed.implausible


def test_withhold_credit_leaves_a_plausible_result_alone():
    res = records.TestResult("x", "x", 1, "performance", 2.0, False, "visible", [], latency_us=5000.0)
    inv = _conv_inv("float32")
    assert not plausibility.withhold_credit(res, inv, "trn2")
    assert res.implausible == [] and res.message == ""


def test_unchecked_promises_are_costed_without_their_hints():
    """The grader turns off the hints nkisim lists as unchecked (nkisim.core.instr.UNVERIFIED), and only those."""
    from nkisim.core.instr import UNVERIFIED

    ins = SimpleNamespace(op="nc_matmul", attrs={"N": 512, "is_moving_onezero": True, "is_transpose": True,
                                                 UNVERIFIED: ["is_moving_onezero"]})
    checked = SimpleNamespace(op="nc_matmul", attrs={"is_stationary_onezero": True})
    trace = SimpleNamespace(instrs=[ins, checked])
    plausibility.without_unchecked_promises(trace)
    assert ins.attrs == {"N": 512, "is_moving_onezero": False, "is_transpose": True, UNVERIFIED: ["is_moving_onezero"]}
    assert checked.attrs == {"is_stationary_onezero": True}


def test_a_placement_nkisim_cannot_alias_earns_no_timing_credit():
    """G7: direct allocation at addresses that are not a fixed stride gets storage of its own in nkisim (no
    aliasing, no shared hazards), so its timing is not the hardware's: flagged, no credit."""
    inv = _conv_inv("float32")
    trace = SimpleNamespace(meta={"unaliased_placements": 2}, instrs=[])
    found = plausibility.findings(inv, 5000.0, "trn2", trace)
    assert len(found) == 1 and "placed 2 tensor(s) by direct allocation" in found[0]
    res = records.TestResult("x", "x", 2, "performance", 2.0, False, "visible", [], latency_us=5000.0)
    assert plausibility.withhold_credit(res, inv, "trn2", trace) and res.score == 0
    assert plausibility.findings(inv, 5000.0, "trn2", SimpleNamespace(meta={}, instrs=[])) == []


def test_a_transposing_index_expression_earns_nothing(tmp_path):
    """G11: ``nl.copy(tile[i_f, i_p])`` transposed a block in one VectorE copy (before: 12.0 at 32.63 us); no engine
    moves data across partitions like that, so the kernel is refused as it would not run on Trainium."""
    record, tests, _ = _grade(tmp_path, "index_transpose", _transpose_rubric(tmp_path))
    assert record.score == 0
    assert tests[CORRECT].status == "error" and "cannot be an engine operand" in tests[CORRECT].message
    assert "varies along free axis 1" in tests[CORRECT].message and tests[SPEED].status == "skipped"


@pytest.mark.slow
def test_a_no_reorder_block_is_graded_in_program_order(tmp_path):
    """G9: inside ``ncc.no_reorder()`` the engines keep program order, so blocks transposed last-loaded first wait
    for the last load (31.16 us against the twin's 29.65 on trn2); ignoring the directive timed it as the twin, and
    under targets between the two it bought full credit the hardware would not give."""
    _, twin, _ = _grade(tmp_path, "no_reorder_block_twin", _transpose_rubric(tmp_path))
    latency = twin[SPEED].latency_us
    tight = _transpose_rubric(tmp_path, optimized=1.01 * latency, relaxed=10 * latency)
    _, ordered, _ = _grade(tmp_path, "no_reorder_block", tight)
    _, free, _ = _grade(tmp_path, "no_reorder_block_twin", tight)
    assert ordered[CORRECT].status == free[CORRECT].status == "passed"
    assert ordered[SPEED].latency_us > 1.03 * latency
    assert free[SPEED].status == "passed" and ordered[SPEED].status == "partial"
    assert ordered[SPEED].score < free[SPEED].score


@pytest.mark.slow
def test_a_partition_broadcast_buys_nothing(tmp_path):
    """G6: a [1, F] row added over the partitions pays the compiler's TensorE broadcast and its PSUM eviction,
    as the same kernel with the ones-matmul written out does."""
    _scores_like_its_twin(tmp_path, "partition_broadcast", "partition_broadcast_honest")


# ---- the DMA closures (D1-D4) and the current API's column of the hostile set -------------------------------------
# Current-API (``import nki``) submissions: D1-D4 on the part 1 transpose, and ports of legacy ones (``_nki``).
# Each (submission, rubric, target) is graded once per module; the tests share the gradings.

DMA_AND_NKI_SET = {"dma_honest_nki", "dge_none_nki", "dge_swdge_nki", "gather_identity_nki", "cast_load_nki",
                   "cast_load_honest_nki", "dma_compute_hbm_nki", "dma_copy_hbm_nki", "onezero_lie_nki",
                   "onezero_honest_nki", "gpsimd_max_nki", "accumulate_memset_nki", "gather_dma_compute_nki"}
LOOSE_FP32 = "float32 = { rtol = 1e-2, atol = 1e-2 }"  # the float16 tests' tolerance: an fp16 cast survives it


class _Gradings:
    """Grades each (submission, targets, tolerance, target) once; returns the tests by id."""

    def __init__(self, root: Path):
        self.root, self.done = root, {}

    def rubric(self, optimized: float = 1e6, relaxed: float = 2e6, loose: bool = False) -> str:
        path = Path(_transpose_rubric(self.root, optimized, relaxed))
        if not loose:
            return str(path)
        text = path.read_text()
        assert 'float32 = { rtol = 1e-5, atol = 1e-8 }' in text
        return _rubric(self.root, text.replace('float32 = { rtol = 1e-5, atol = 1e-8 }', LOOSE_FP32),
                       f"loose-{path.name}")

    def __call__(self, name: str, optimized: float = 1e6, relaxed: float = 2e6, loose: bool = False,
                 target: str = "trn2") -> dict:
        key = (name, round(optimized, 6), round(relaxed, 6), loose, target)
        if key not in self.done:
            rubric = self.rubric(optimized, relaxed, loose)
            out = self.root / f"out-{len(self.done)}-{name}"
            cfg = GradeConfig(rubric_path=rubric, timeout_scale=1.0, target=target)
            record = grade_submission(GAMING / name, out, cfg)
            assert record.status == "graded", record.error
            check_reports(out, load_rubric(rubric).total_points)
            self.done[key] = {t.id: t for t in record.tests}
        return self.done[key]

    def trace(self, name: str, target: str = "trn2"):
        """The timed run's trace of a submission's transpose on the fast rubric's timed shape, run in this process
        (a fraction of a grading's time; the latency does not depend on the values)."""
        import importlib.util

        from nkisim.core.runtime import run_kernel
        from nkisim.frontends import NKI

        spec = importlib.util.spec_from_file_location(name, GAMING / name / "part1" / "kernels.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        a = np.zeros((512, 512), np.float32)
        return run_kernel(module.matrix_transpose, (a,), {}, mode="timing", target=target, frontend=NKI).trace

    def timed_us(self, name: str, target: str = "trn2") -> float:
        from nkisim.perf import estimate

        key = ("timed", name, target)
        if key not in self.done:
            self.done[key] = float(estimate(self.trace(name, target), target).nc_latency_us)
        return self.done[key]


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> _Gradings:
    return _Gradings(tmp_path_factory.mktemp("hostile-nki"))


def _never_scores_above_its_twin(graded: _Gradings, hostile: str, twin: str, loose: bool = False,
                                 target: str = "trn2") -> tuple[float, float]:
    """The hostile kernel passes correctness and, with targets just below its honest twin's latency (where a
    cheaper timing would buy full credit instead of partial), scores no more than the twin; returns both timed
    latencies (hostile, twin)."""
    latency = graded.timed_us(twin, target)  # what the grader will time it at (checked below)
    tight = {"optimized": 0.995 * latency, "relaxed": 10 * latency, "loose": loose, "target": target}
    bad, good = graded(hostile, **tight), graded(twin, **tight)
    assert bad[CORRECT].status == "passed", bad[CORRECT].message
    assert good[SPEED].status == "partial" and good[SPEED].latency_us == pytest.approx(latency, rel=1e-9)
    assert bad[SPEED].status in ("partial", "failed") and bad[SPEED].score <= good[SPEED].score
    return bad[SPEED].latency_us, latency


def _swdge_descriptor_us(target: str) -> float:
    """GpSimd time nkisim charges to build one 128-row DMA's descriptors in software (MODEL.md "DMA descriptor
    modes": GPSIMD_START + 6 cycles a row, the conservative guess)."""
    from nkisim.perf.costs import costs_for

    tc = costs_for(target)
    return (tc.gpsimd_start_cycles + tc.dma_swdge_desc_cycles * 128) / tc.gpsimd_ghz / 1e3


def test_d1_a_casting_load_fails_where_the_cast_loses_precision(graded):
    """D1 on the course's float32 tolerance: fp32 -> fp16 loads change the values, so no credit, as on hardware."""
    tests = graded("cast_load_nki")
    assert tests[CORRECT].status == "failed" and "values differ from the reference" in tests[CORRECT].message
    assert tests[SPEED].status == "skipped" and tests[SPEED].score == 0


@pytest.mark.slow
def test_d1_a_casting_load_buys_no_dma_time_where_the_tolerance_survives(graded):
    """D1 where the fp16 values pass (the float16 tests' tolerance): the casting loads are charged the fp32 bytes
    they read (cost undocumented: the larger side), so the DMA-bound kernel is never timed faster than its fp32
    twin (charged the fp16 bytes, trn2 timed 20.48 us against the twin's 21.18: full credit instead of partial)."""
    hostile, twin = _never_scores_above_its_twin(graded, "cast_load_nki", "cast_load_honest_nki", loose=True)
    assert hostile >= twin


@pytest.mark.slow
def test_d2_dge_mode_none_is_timed_as_static_descriptors(graded):
    """D2: dge_mode=none on every DMA is timed exactly as its twin compiled with --disable-dge (static
    descriptors: 850 ns per DMA and trigger queue, calibrated on hardware --disable-dge profiles).  For 20 small
    DMAs that is faster than the hardware DGE's serial issue, on Trainium too, so the speed-up is kept (before:
    dge_mode was ignored and the kernel timed as the twin)."""
    from nkisim.perf import estimate

    none = graded("dge_none_nki")
    assert none[CORRECT].status == "passed" and none[SPEED].status == "passed"
    static = estimate(graded.trace("dma_honest_nki"), "trn2", dge=False).nc_latency_us
    assert none[SPEED].latency_us == pytest.approx(static, rel=1e-9)
    assert none[SPEED].latency_us < graded("dma_honest_nki")[SPEED].latency_us


@pytest.mark.slow
@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_d2_software_dge_buys_nothing(graded, target):
    """D2: dge_mode=swdge pays GpSimd descriptor time on top of a static issue (undocumented cost: the
    conservative side), so the kernel is slower than its twin (before: timed as the twin)."""
    hostile, twin = _never_scores_above_its_twin(graded, "dge_swdge_nki", "dma_honest_nki", target=target)
    assert hostile >= twin + _swdge_descriptor_us(target)


def test_d3_an_identity_gather_buys_nothing(graded):
    """D3: loading rows through an index tile is software DGE (the hardware DGE cannot gather), so at least one
    descriptor build lies on the critical path (before: costed as a plain load, trn2 26.94 us against the
    twin's 26.52; on trn1 the gather is slower than its twin for more than D3: no test of the closure there)."""
    hostile, twin = _never_scores_above_its_twin(graded, "gather_identity_nki", "dma_honest_nki")
    assert hostile >= twin + _swdge_descriptor_us("trn2")


@pytest.mark.slow
@pytest.mark.parametrize("target", ["trn2", "trn1"])
def test_d4_dma_compute_moves_at_half_the_copy_rate(graded, target):
    """D4: an HBM -> HBM transpose by nisa.dma_compute (documented: 50% of DMA throughput before v4) takes
    nearly twice its dma_copy twin's time (before: the twin's)."""
    hostile, twin = _never_scores_above_its_twin(graded, "dma_compute_hbm_nki", "dma_copy_hbm_nki", target=target)
    assert hostile > 1.7 * twin


@pytest.mark.slow
def test_current_api_ports_of_the_hostile_set(graded, tmp_path):
    """G3, G8 and the PSUM accumulate-onto-memset rule in the current API: 0 where the hardware would compute
    something else or not compile; the honest onezero kernel keeps its hint and is timed as its legacy twin."""
    lie = graded("onezero_lie_nki")
    assert lie[CORRECT].status == "error"
    assert "is_stationary_onezero=True but the stationary tile (float32)" in lie[CORRECT].message
    assert lie[SPEED].status == "skipped"
    honest = graded("onezero_honest_nki")
    assert honest[CORRECT].status == "passed" and honest[SPEED].status == "passed"
    _, legacy, _ = _grade(tmp_path, "onezero_honest", _transpose_rubric(tmp_path))
    assert honest[SPEED].latency_us == pytest.approx(legacy[SPEED].latency_us, rel=1e-6)
    gpsimd = graded("gpsimd_max_nki")
    assert gpsimd[CORRECT].status == "error" and "GpSimd runs only add, multiply" in gpsimd[CORRECT].message
    memset = graded("accumulate_memset_nki")
    assert memset[CORRECT].status == "error" and memset[SPEED].status == "skipped"
    assert "initialised by a non-matmul instruction" in memset[CORRECT].message


def test_an_indirect_dma_compute_buys_nothing(graded):
    """D6: the identity gather by a one-source DMA compute (before: trn2 27.98 us, under the dma_copy gather's 28.04
    that pays the software DGE) is not a documented form: the indirect dma_compute is a read-modify-write with
    exactly two sources, so the kernel is refused as the compiler refuses it."""
    tests = graded("gather_dma_compute_nki")
    assert tests[CORRECT].status == "error" and tests[SPEED].status == "skipped"
    assert "only the two read-modify-write forms are supported" in tests[CORRECT].message


# ---- device values and the hardware's values (docs/grading-security.md S1-S4, V3-V6; current API) -------------
VALUES_SET = {"register_peek_nki", "timed_loop_nki", "tf32_transpose_nki", "collective_copy_nki"}


def test_s1_a_register_value_never_reaches_the_kernel(graded):
    """S1: the transpose computed on the host from input bits read through registers (before: correctness passed
    with no kernel behind it) fails as the compiler would: a register has no value at specialization."""
    tests = graded("register_peek_nki")
    assert tests[CORRECT].status == "error" and "has no attribute 'value'" in tests[CORRECT].message
    assert tests[SPEED].status == "skipped" and tests[SPEED].score == 0


def test_s3_a_timed_run_cannot_be_told_from_a_checked_one(tmp_path):
    """S3: a data-dependent loop in a ``try`` no longer tells the kernel that its values are not computed (before:
    the run without values raised through the kernel, which skipped the transpose: 14.0 us timed against the 27.0 us
    of the work it does when checked).  The timed latency is that of the kernel's full run."""
    import importlib.util

    from nkisim.core.runtime import run_kernel
    from nkisim.frontends import NKI
    from nkisim.perf import estimate

    spec = importlib.util.spec_from_file_location("timed_loop_nki", GAMING / "timed_loop_nki" / "part1" / "kernels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    full = run_kernel(module.matrix_transpose, (np.ones((512, 512), np.float32),), frontend=NKI)
    latency = estimate(full.trace, "trn2").nc_latency_us
    _, tests, _ = _grade(tmp_path, "timed_loop_nki", _transpose_rubric(tmp_path, optimized=0.995 * latency,
                                                                       relaxed=10 * latency, verify=False))
    assert tests[CORRECT].status == "passed"
    assert tests[SPEED].latency_us == pytest.approx(latency, rel=1e-9) and tests[SPEED].status == "partial"


def test_v3_tf32_multiplies_as_tf32(graded):
    """V3: the TensorE transpose with tf32 tiles (before: exact fp32 values) gives the tf32-rounded values the
    hardware gives, which the fp32 tolerance rejects."""
    tests = graded("tf32_transpose_nki")
    assert tests[CORRECT].status == "failed" and "values differ from the reference" in tests[CORRECT].message
    assert tests[SPEED].status == "skipped"


def test_v5_a_one_rank_collective_is_refused(graded):
    """V5: a one-rank ``all_gather`` at LNC=1 (before: a local DMA copy, full credit) is not a documented form."""
    tests = graded("collective_copy_nki")
    assert tests[CORRECT].status == "error" and "only for LNC=2 launches" in tests[CORRECT].message
    assert tests[SPEED].status == "skipped"


def test_a_cross_partition_vector_copy_earns_nothing(tmp_path):
    """G10: a VectorE copy from partitions [28, 128) to [0, 100) is no instruction of the engines (a DMA or a matmul
    moves rows across partitions): the kernel does not compile on Trainium."""
    record, tests, _ = _grade(tmp_path, "partition_shift", _transpose_rubric(tmp_path))
    assert record.score == 0
    assert tests[CORRECT].status == "error"
    assert "100 partition(s) starting at partition 28" in tests[CORRECT].message
