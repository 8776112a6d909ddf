"""``nkibench.launch_once``: one run for the outputs, and the timing of that same run (part1/run_benchmark.py).

On nkisim the timing costs the checked run's own trace instead of running the kernel again in timing mode.  That
is only right if a run's trace never depends on whether values are computed; these tests check that the single
run gives exactly the separate timing run's latency (and outputs, and instruction stream) on the staff kernels of
both parts and both APIs, the starters, the handout's Part 2 starting point, and kernels whose control flow and
addresses depend on data (a register-bounded loop, a run-time offset).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np
import pytest

import nkibench
import nkisim
from nkisim.core.instr import UNVERIFIED

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO / "part2"))
from fingerprint_runs import canonical_trace  # noqa: E402
from test_harness import ConvCase, InputBank  # noqa: E402


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"launch_once_{abs(hash(str(path)))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@nki.jit
def data_dependent(x, n_input, k_input):
    """A loop bounded by a register loaded from memory, then a row read at a run-time offset: what a timing run
    cannot know without values (it runs in full mode after all, core.runtime.run_kernel)."""
    out = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.shared_hbm)
    n_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=n_sb, src=n_input)
    k_sb = nl.ndarray((1, 1), dtype=nl.int32, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=k_input)
    n_reg = nisa.register_alloc()
    nisa.register_load(n_reg, n_sb)
    row = nl.ndarray((1, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=row, src=x.ap([[x.shape[1], 1], [1, x.shape[1]]], scalar_offset=k_sb, indirect_dim=0))

    def body(i):
        nisa.tensor_scalar(dst=row, data=row, op0=nl.add, operand0=1.0)

    nl.fori_loop(0, n_reg, body)
    nisa.dma_copy(dst=out, src=row)
    return out


def _part1_cases():
    rng = np.random.default_rng(7)
    a, b = rng.random(25600, dtype=np.float32), rng.random(25600, dtype=np.float32)
    m = rng.random((256, 384), dtype=np.float32)
    files = {"staff nki": REPO / "grader/reference/part1/kernels.py",
             "staff legacy": REPO / "grader/reference/legacy/part1/kernels.py",
             "starter nki": REPO / "part1/kernels.py", "starter legacy": REPO / "editions/legacy/part1/kernels.py"}
    for label, path in files.items():
        names = ["vector_add_naive", "vector_add_tiled", "vector_add_stream"]
        if label.startswith("staff"):
            names.append("matrix_transpose")  # the starters' transpose is a stub that raises
        for name in names:
            # the tiled kernel at 2,560 elements: 10,240 instructions (ROW_CHUNK=1) instead of 102,400
            args = ((m,) if name == "matrix_transpose" else (a[:128], b[:128]) if name.endswith("naive")
                    else (a[:2560], b[:2560]) if name.endswith("tiled") else (a, b))
            yield pytest.param(path, name, args, {}, id=f"{label}:{name}")


def _part2_cases():
    kernels = {"staff nki": (REPO / "grader/reference/part2/conv2d.py", "fused_conv2d_maxpool"),
               "staff legacy": (REPO / "grader/reference/legacy/part2/conv2d.py", "fused_conv2d_maxpool"),
               "starting point nki": (REPO / "staff/ladder/step0_naive_nki.py", "fused_conv2d_maxpool"),
               "starting point legacy": (REPO / "staff/ladder/conv_ladder.py", "step0_naive")}
    bank = InputBank(3)
    for label, (path, name) in kernels.items():
        for dtype, pool in (("float32", 1), ("float16", 2)):
            case = ConvCase(1, 256, 256, 32, 16, dtype=dtype, pool_size=pool)
            yield pytest.param(path, name, bank.inputs(case), {"pool_size": pool},
                               id=f"{label}:32x16-{dtype}-pool{pool}")


def _check_one_run_times_like_a_timing_run(kernel, args, kwargs, monkeypatch, traces: bool = False):
    runs: list[str] = []
    real = nkisim.run_kernel

    def counted(*a, **kw):
        runs.append(kw.get("mode", "full"))
        return real(*a, **kw)

    monkeypatch.setattr(nkisim, "run_kernel", counted)
    once = nkibench.launch_once(kernel, args, kwargs)
    single = once.measure(warmup=1, iterations=10)
    assert runs == ["full"], "launch_once ran the kernel more than once"
    separate = nkibench.measure(kernel, args, kwargs, warmup=1, iterations=10)
    assert single.timing.p99_us == separate.timing.p99_us  # exactly: the same trace, the same model
    assert single.timing == separate.timing
    for got, want in zip(*(o if isinstance(o, tuple) else (o,) for o in (once.outputs, nkibench.launch(
            kernel, args, kwargs)))):
        np.testing.assert_array_equal(got, want)
    if not traces:
        return
    # the instruction streams themselves (the full run checks hint promises, so it marks none unverified)
    full = real(kernel, args, kwargs, mode="full").trace
    timed = real(kernel, args, kwargs, mode="timing").trace
    for ins in timed.instrs:
        ins.attrs.pop(UNVERIFIED, None)
    assert canonical_trace(full) == canonical_trace(timed)


@pytest.mark.parametrize(("path", "name", "args", "kwargs"), [*_part1_cases(), *_part2_cases()])
def test_the_checked_run_times_exactly_like_a_separate_timing_run(path, name, args, kwargs, monkeypatch):
    _check_one_run_times_like_a_timing_run(_load(path, name), args, kwargs, monkeypatch)


@pytest.mark.parametrize(("n", "k"), [(0, 2), (3, 5)])
def test_a_data_dependent_kernel_times_alike_from_its_checked_run(n, k, monkeypatch):
    x = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    args = (x, np.array([[n]], np.int32), np.array([[k]], np.int32))
    _check_one_run_times_like_a_timing_run(data_dependent, args, {}, monkeypatch, traces=True)
    np.testing.assert_array_equal(nkibench.launch_once(data_dependent, args).outputs, x[k:k + 1] + n)


@pytest.mark.slow
@pytest.mark.parametrize("label", ["staff nki", "starting point nki"])
def test_a_224x224_conv_times_alike_from_its_checked_run(label, monkeypatch):
    path = {"staff nki": REPO / "grader/reference/part2/conv2d.py",
            "starting point nki": REPO / "staff/ladder/step0_naive_nki.py"}[label]
    case = ConvCase(1, 256, 256, 224, 224, dtype="float16", pool_size=2)
    _check_one_run_times_like_a_timing_run(_load(path, "fused_conv2d_maxpool"), InputBank(3).inputs(case),
                                           {"pool_size": 2}, monkeypatch)


@pytest.mark.parametrize("path", [REPO / "staff/ladder/step0_naive_nki.py", REPO / "grader/reference"],
                         ids=["starting point", "staff"])
def test_the_instruction_streams_of_both_modes_are_the_same(path, monkeypatch):
    case = ConvCase(1, 256, 256, 32, 16, dtype="float16", pool_size=2)
    kernel = _load(path if path.is_file() else path / "part2" / "conv2d.py", "fused_conv2d_maxpool")
    _check_one_run_times_like_a_timing_run(kernel, InputBank(5).inputs(case), {"pool_size": 2}, monkeypatch,
                                           traces=True)


def test_a_failed_check_is_never_timed(tmp_path):
    """The timing and the profile files come only when asked for, after the check (nothing is written by the
    launch itself)."""
    kernel = _load(REPO / "grader/reference/part1/kernels.py", "vector_add_stream")
    rng = np.random.default_rng(0)
    once = nkibench.launch_once(kernel, (rng.random(2560, dtype=np.float32), rng.random(2560, dtype=np.float32)))
    assert not list(tmp_path.iterdir())
    m = once.measure(warmup=1, iterations=10, profile=nkibench.ProfileRequest(str(tmp_path / "p")))
    assert {Path(f).name for f in m.profile_files} >= {"p.neff", "p.summary.txt", "p.html"}
