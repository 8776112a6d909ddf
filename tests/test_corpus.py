# STAFF-ONLY: checks the calibration corpus (complete solutions); excluded from the student release.
"""Every corpus kernel x configuration against an independent float64 NumPy reference.

All kernels run every small-image (32x16) configuration in full mode; two run the 224x224 fp16 pool-1 case
(marked ``slow``: few, but still part of ``make test``; checked on a sample of output rows that includes both
edges); every kernel runs two 224x224 configurations (fp32 pool 2, fp16 pool 1) in timing mode, so a kernel that
the front end or the model rejects fails here (``python -m nkisim.calibration.corpus --all`` runs the rest).
Transposes: 1024x1024 exact in full mode, 4096x4096 in timing mode.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from nkisim.calibration import corpus
from nkisim.calibration.corpus import ConvConfig, TransposeConfig
from nkisim.core.runtime import run_kernel
from nkisim.perf import estimate

# 224x224 fp16 pool-1 full-mode runs (a few seconds each): one per kernel family of loop structure
HEAVY_FULL = ("seed004-conv", "nl2024-block")
# 224x224 timing-mode runs: both dtypes and both pool sizes, in two runs per kernel (the rest: the corpus script)
TIMING_224 = (ConvConfig(224, 224, "float32", 2), ConvConfig(224, 224, "float16", 1))


@functools.lru_cache(maxsize=4)
def conv_inputs(height: int, width: int, dtype: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Signed inputs (a kernel that drops a term or a sign cannot hide behind all-positive sums)."""
    rng = np.random.default_rng([9, height, width, np.dtype(dtype).itemsize])
    X = rng.uniform(-1, 1, (1, 256, height, width)).astype(dtype)
    W = rng.uniform(-1, 1, (256, 256, 3, 3)).astype(dtype)
    bias = rng.uniform(-1, 1, 256).astype(dtype)
    return X, W, bias


def conv_float64(config: ConvConfig, rows: np.ndarray) -> np.ndarray:
    """conv2d(X, W) + bias in float64 from the (already rounded) inputs, for the conv output rows ``rows`` only:
    one GEMM over an im2col matrix of those rows."""
    X, W, bias = conv_inputs(config.height, config.width, config.dtype)
    k = W.shape[2]
    x = X[0].astype(np.float64)
    c, _, w = x.shape
    ow = w - k + 1
    windows = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))[:, rows]  # (c, r, ow, k, k)
    cols = windows.transpose(0, 3, 4, 1, 2).reshape(c * k * k, len(rows) * ow)
    out = W.astype(np.float64).reshape(W.shape[0], -1) @ cols
    return out.reshape(W.shape[0], len(rows), ow) + bias.astype(np.float64)[:, None, None]


def pooled_rows(config: ConvConfig, sample: bool) -> np.ndarray:
    """Indices of the output rows to check: all, or (sample) the first and last three and every 16th."""
    n = (config.height - 2) // config.pool
    if not sample:
        return np.arange(n)
    return np.unique(np.concatenate([np.arange(3), np.arange(n - 3, n), np.arange(0, n, 16)]))


def expected(config: ConvConfig, out_rows: np.ndarray) -> np.ndarray:
    p = config.pool
    conv_rows = (out_rows[:, None] * p + np.arange(p)[None, :]).ravel()
    conv = conv_float64(config, conv_rows)
    oc, _, ow = conv.shape
    trimmed = conv[:, :, : ow // p * p]
    return trimmed.reshape(oc, len(out_rows), p, ow // p, p).max(axis=(2, 4))[None]


def assert_conv_close(out: np.ndarray, config: ConvConfig, sample: bool = False) -> None:
    """Compares every output row, or (sample: the 224x224 runs) a sample of rows that includes both edges."""
    rows = pooled_rows(config, sample)
    ref = expected(config, rows)
    full_shape = (1, 256, (config.height - 2) // config.pool, (config.width - 2) // config.pool)
    assert out.shape == full_shape and out.dtype == np.dtype(config.dtype), (out.shape, out.dtype)
    assert np.isfinite(out.astype(np.float64)).all(), "non-finite outputs (rows never written?)"
    got = out[:, :, rows, :].astype(np.float64)
    scale = float(np.abs(ref).max())
    # fp16: one rounding of the result (2^-11 relative) plus fp32 accumulation; fp32: accumulation order only
    rtol = 2e-3 if config.dtype == "float16" else 2e-5
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * scale)


def run_conv(kernel_entry, config: ConvConfig, mode: str):
    X, W, bias = conv_inputs(config.height, config.width, config.dtype)
    kwargs = {"pool_size": config.pool, **kernel_entry.kwargs}
    return run_kernel(kernel_entry.load(), args=(X, W, bias), kwargs=kwargs, mode=mode)


def _cases(family: str, pred) -> list:
    return [
        pytest.param(k, c, id=f"{k.id}-{c.key}")
        for k in corpus.kernels(family)
        for c in k.configs
        if pred(k, c)
    ]


@pytest.mark.parametrize("entry, config", _cases("conv", lambda k, c: c.height == 32))
def test_conv_small_image_matches_numpy(entry, config):
    assert_conv_close(run_conv(entry, config, "full").outputs, config)


@pytest.mark.slow
@pytest.mark.parametrize(
    "entry, config",
    _cases("conv", lambda k, c: k.id in HEAVY_FULL and c == ConvConfig(224, 224, "float16", 1)),
)
def test_conv_large_image_matches_numpy(entry, config):
    assert_conv_close(run_conv(entry, config, "full").outputs, config, sample=True)


@pytest.mark.slow
@pytest.mark.parametrize("entry, config", _cases("conv", lambda k, c: c.height == 224 and c in TIMING_224))
def test_conv_large_image_runs_in_timing_mode(entry, config):
    latency = estimate(run_conv(entry, config, "timing").trace).nc_latency_us
    assert np.isfinite(latency) and latency > 0


def test_heavy_list_names_corpus_kernels():
    ids = {k.id for k in corpus.kernels("conv")}
    assert set(HEAVY_FULL) <= ids, set(HEAVY_FULL) - ids


@pytest.mark.parametrize("entry, config", _cases("transpose", lambda k, c: c.rows <= 1024))
def test_transpose_is_exact(entry, config):
    a = np.random.default_rng(config.rows).standard_normal((config.rows, config.cols)).astype(config.dtype)
    out = run_kernel(entry.load(), args=(a,), kwargs=dict(entry.kwargs), mode="full").outputs
    np.testing.assert_array_equal(out, a.T)


@pytest.mark.parametrize("entry, config", _cases("transpose", lambda k, c: c.rows > 1024))
def test_large_transpose_runs_in_timing_mode(entry, config):
    a = np.empty((config.rows, config.cols), dtype=config.dtype)
    run = run_kernel(entry.load(), args=(a,), kwargs=dict(entry.kwargs), mode="timing")
    assert estimate(run.trace).nc_latency_us > 0


def test_registry_is_consistent():
    ids = [k.id for k in corpus.KERNELS]
    assert len(ids) == len(set(ids)), "duplicate corpus ids"
    for k in corpus.KERNELS:
        assert k.description.strip() and k.configs, k.id
        assert callable(k.load()), k.id
        for h in k.hardware:
            assert h.config in k.configs, (k.id, h.row_id)
        assert set(k.unsupported).isdisjoint(c.key for c in k.configs), k.id
        expected_configs = corpus.ALL_CONV if k.family == "conv" else corpus.ALL_TRANSPOSE
        missing = {c.key for c in expected_configs} - {c.key for c in k.configs}
        assert missing == set(k.unsupported), (k.id, "every course configuration is run or explained", missing)
        if not k.hardware:
            assert k.expectations, (k.id, "without a hardware row, state hardware-plausible properties")
        assert isinstance(k.configs[0], ConvConfig if k.family == "conv" else TransposeConfig)


@pytest.mark.slow
def test_corpus_is_staff_only_and_outside_the_model_fingerprint(tmp_path, monkeypatch):
    """Complete solutions must not ship to students, and leaving them out must not change the fingerprint the
    grader's reference timings are keyed by (the release would otherwise never find its timings)."""
    import sys
    from pathlib import Path

    from grader import thresholds

    repo = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(repo / "tools"))
    import release

    patterns = release.exclude_patterns(repo)
    corpus_dir = repo / "nkisim" / "calibration" / "corpus"
    for f in [*corpus_dir.glob("*.py"), Path(__file__)]:
        rel = f.relative_to(repo).as_posix()
        assert release.is_excluded(rel, patterns), rel
        assert release.STAFF_MARKER in f.read_text(), rel
    # a copy of the package with one more corpus file hashes like the real one (never write into the source tree:
    # other test workers hash it concurrently)
    import shutil

    import nkisim

    copy = tmp_path / "nkisim"
    shutil.copytree(Path(nkisim.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "calibration" / "corpus" / "zz_probe.py").write_text("# probe\n")
    real = thresholds.perf_fingerprint()
    thresholds.perf_fingerprint.cache_clear()
    monkeypatch.setattr(nkisim, "__file__", str(copy / "__init__.py"))
    try:
        assert thresholds.perf_fingerprint() == real
    finally:
        thresholds.perf_fingerprint.cache_clear()


def test_corpus_script_prints_the_table(capsys):
    from nkisim.calibration.corpus.__main__ import main

    assert main(["--id", "whole-image-sbuf"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["id", "config", "model_us", "hw_us"]
    rows = [line.split() for line in out[1:] if line.startswith("whole-image-sbuf")]
    assert [r[1] for r in rows] == ["conv32x16-fp32-pool1", "conv32x16-fp16-pool1"]
    for r in rows:
        assert float(r[2]) > 0 and float(r[5]) > 0  # modelled us, and the staff reference's
