"""nki.benchmark back end and timing-only == full-mode latency on real kernels through the front end."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nkisim.calibration import load_kernels
from nkisim.core.runtime import run_kernel
from nkisim.measure import run_benchmark
from nkisim.perf import estimate
from nkisim.perf.benchmark import PERCENTILES


@pytest.fixture(scope="module")
def K():
    return load_kernels()


VEC = [
    ("vector_add_tiled_2025", {"ROW_CHUNK": 128}, 25600, "trn2"),
    ("vector_add_stream_2025", {"FREE_DIM": 50}, 25600, "trn2"),
    ("vector_add_tiled_2024", {"ROW_CHUNK": 64}, 12800, "trn1"),
    ("vector_add_stream_2024", {"FREE_DIM": 20}, 25600, "trn1"),
    ("vector_add_direct_allocation_2024", {"FREE_DIM": 100}, 128000, "trn1"),
]


@pytest.mark.parametrize("name, knobs, n, target", VEC)
def test_timing_mode_latency_equals_full_mode(K, name, knobs, n, target):
    rng = np.random.default_rng(1)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    full = run_kernel(getattr(K, name), (a, b), knobs, mode="full", target=target)
    assert np.allclose(np.asarray(full.outputs).reshape(-1), a + b)
    timing = run_kernel(getattr(K, name), (a, b), knobs, mode="timing", target=target)
    assert timing.outputs is None
    rf, rt = estimate(full.trace), estimate(timing.trace)
    assert len(full.trace) == len(timing.trace)
    assert rf.total_us == rt.total_us and rf.nc_latency_us == rt.nc_latency_us
    assert rf.engine_busy_us == rt.engine_busy_us


def test_matmul_kernels_are_correct_and_timing_equal(K):
    import ml_dtypes

    rng = np.random.default_rng(2)
    blocks = {"TILES_IN_BLOCK_M": 2, "TILES_IN_BLOCK_N": 1, "TILES_IN_BLOCK_K": 2}
    lhsT = rng.random((512, 512), dtype=np.float32)  # K=512 (2 K blocks), M=512 (2 M blocks)
    rhs = rng.random((512, 1024), dtype=np.float32)  # N=1024 (2 N blocks)
    run = run_kernel(K.matmul_blocked_fp32, (lhsT, rhs), blocks, mode="full", target="trn2")
    assert np.allclose(run.outputs, lhsT.T @ rhs, rtol=1e-4)
    t = run_kernel(K.matmul_blocked_fp32, (lhsT, rhs), blocks, mode="timing", target="trn2")
    assert estimate(t.trace).total_us == estimate(run.trace).total_us
    lb, rb = lhsT.astype(ml_dtypes.bfloat16), rhs.astype(ml_dtypes.bfloat16)
    run = run_kernel(K.matmul_fully_optimized, (lb, rb), blocks, mode="full", target="trn1")
    ref = lb.astype(np.float32).T @ rb.astype(np.float32)
    assert np.allclose(np.asarray(run.outputs, dtype=np.float32), ref, rtol=3e-2)
    rep = estimate(run.trace)
    assert 0 < rep.mfu <= rep.hfu <= 1.0


def test_benchmark_result_shape_and_percentiles(K, tmp_path):
    a = np.ones(25600, np.float32)
    res = run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100}, warmup=1, iters=10)
    lat = res.nc_latency
    vals = [lat.get_latency_percentile(p) for p in PERCENTILES]
    assert all(v == pytest.approx(res.report.nc_latency_us) for v in vals)
    for bad in (5, 99.5, "99", None, 101):
        with pytest.raises(ValueError, match="percentile"):
            lat.get_latency_percentile(bad)
    with pytest.raises(ValueError, match="iters"):
        run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100}, iters=0)


def test_benchmark_noise_is_seeded_and_ordered(K):
    a = np.ones(25600, np.float32)
    r1 = run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100}, iters=50, noise=0.05, seed=3)
    r2 = run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100}, iters=50, noise=0.05, seed=3)
    p = [r1.nc_latency.get_latency_percentile(q) for q in PERCENTILES]
    assert p == [r2.nc_latency.get_latency_percentile(q) for q in PERCENTILES]
    assert p == sorted(p) and p[0] < p[-1]


def test_benchmark_writes_profile_files_and_disable_dge(K, tmp_path):
    a = np.ones(25600, np.float32)
    neff = tmp_path / "file.neff"
    ntff = tmp_path / "prof.ntff"
    res = run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100}, save_neff_name=str(neff),
                        save_trace_name=str(ntff), additional_compile_opt="--disable-dge")
    assert neff.exists() and ntff.exists()
    doc = json.loads(neff.read_text())
    assert "not a real NEFF" in doc["note"]
    assert res.report.dge is False
    dflt = run_benchmark(K.vector_add_stream_2025, (a, a), {"FREE_DIM": 100})
    assert dflt.report.dge is True and dflt.report.nc_latency_us != res.report.nc_latency_us


def _part1():
    import importlib.util
    import os

    from nkisim import _hook

    _hook.install()
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "part1", "kernels.py")
    if not os.path.exists(path):
        pytest.skip("part1/kernels.py not present")
    spec = importlib.util.spec_from_file_location("perf_test_part1_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("name, n", [("vector_add_naive", 128), ("vector_add_tiled", 1280),
                                     ("vector_add_stream", 25600)])
def test_starter_kernels_timing_equals_full(name, n):
    mod = _part1()
    rng = np.random.default_rng(4)
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    full = run_kernel(getattr(mod, name), (a, b), {}, mode="full")
    timing = run_kernel(getattr(mod, name), (a, b), {}, mode="timing")
    assert np.allclose(np.asarray(full.outputs).reshape(-1), a + b)
    assert estimate(full.trace).nc_latency_us == estimate(timing.trace).nc_latency_us


def test_nki_benchmark_both_call_forms(K, tmp_path, monkeypatch):
    from nkisim import _hook

    _hook.install()
    import neuronxcc.nki as nki

    monkeypatch.chdir(tmp_path)
    a = np.ones(25600, np.float32)
    b1 = nki.benchmark(K.vector_add_stream_2025, warmup=1, iters=10, save_neff_name="file.neff",
                       save_trace_name="s.ntff", additional_compile_opt="--disable-dge")
    b1(a, a, FREE_DIM=100)
    p99 = b1.benchmark_result.nc_latency.get_latency_percentile(99)
    assert (tmp_path / "file.neff").exists() and (tmp_path / "s.ntff").exists()
    b2 = nki.benchmark(warmup=5, iters=20)(K.vector_add_stream_2025)
    b2(a, a, FREE_DIM=100)
    assert b2.benchmark_result.report.dge and not b1.benchmark_result.report.dge
    assert b2.benchmark_result.nc_latency.get_latency_percentile(50) != p99
